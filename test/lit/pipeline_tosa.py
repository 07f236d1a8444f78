# RUN: %PYTHON %s | FileCheck %s
# TOSA: matmul is a batched tosa.matmul between reshapes, relu a clamp,
# sums reduce_sum, softmax exp/reduce_sum/reciprocal/mul.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(4, 8).to("lazy")
w = torch.randn(8, 3).to("lazy")
emit([(x @ w).relu(), x.sum(1), x.softmax(-1)], target="tosa")

# CHECK: // form: tosa
# CHECK: func.func @{{.*}}(%arg0: tensor<4x8xf32> {{.*}}, %arg1: tensor<8x3xf32> {{.*}}) -> (tensor<4x3xf32>, tensor<4xf32>, tensor<4x8xf32>)
# CHECK: %[[A:[0-9]+]] = tosa.reshape %arg0, {{.*}} -> tensor<1x4x8xf32>
# CHECK: %[[B:[0-9]+]] = tosa.reshape %arg1, {{.*}} -> tensor<1x8x3xf32>
# CHECK: %[[MM:[0-9]+]] = tosa.matmul %[[A]], %[[B]], {{.*}} -> tensor<1x4x3xf32>
# relu keeps -0.0 and NaN as eager does: a compare and a select in f32, not tosa.clamp.
# CHECK: %[[NEG:[0-9]+]] = tosa.greater %{{[0-9]+}}, %{{[0-9]+}} : (tensor<1x1xf32>, tensor<4x3xf32>) -> tensor<4x3xi1>
# CHECK: tosa.select %[[NEG]], {{.*}} -> tensor<4x3xf32>
# CHECK: tosa.reduce_sum %arg0 {axis = 1 : i32} : (tensor<4x8xf32>) -> tensor<4x1xf32>
# CHECK: tosa.exp
# CHECK: tosa.reciprocal
# CHECK-NOT: torch.aten
