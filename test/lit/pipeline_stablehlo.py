# RUN: %PYTHON %s | FileCheck %s
# StableHLO: matmul is dot_general, relu a maximum with zero, sums are
# stablehlo.reduce, broadcasting explicit broadcast_in_dim.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(4, 8).to("lazy")
w = torch.randn(8, 3).to("lazy")
b = torch.randn(3).to("lazy")
emit([(x @ w + b).relu(), x.sum(1)], target="stablehlo")

# CHECK: // form: stablehlo
# CHECK: func.func @{{.*}}(%arg0: tensor<4x8xf32> {{.*}}, %arg1: tensor<8x3xf32> {{.*}}, %arg2: tensor<3xf32> {{.*}}) -> (tensor<4x3xf32>, tensor<4xf32>)
# CHECK: %[[MM:[0-9]+]] = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
# CHECK: %[[BB:[0-9]+]] = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<3xf32>) -> tensor<4x3xf32>
# CHECK: %[[ADD:[0-9]+]] = stablehlo.add %[[MM]], %[[BB]] : tensor<4x3xf32>
# relu keeps -0.0 and NaN as eager does: a compare and a select in f32.
# CHECK: %[[NEG:[0-9]+]] = stablehlo.compare LT, %[[ADD]], %{{.*}}, FLOAT : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xi1>
# CHECK: stablehlo.select {{.*}} : tensor<4x3xi1>, tensor<4x3xf32>
# CHECK: stablehlo.reduce(%arg0 init: %{{.*}}) applies stablehlo.add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
# CHECK-NOT: torch.aten
