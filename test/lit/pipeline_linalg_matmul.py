# RUN: %PYTHON %s | FileCheck %s
# linalg-on-tensors: a matmul is linalg.matmul on a zero-filled init tensor;
# a row sum is a linalg.generic with a reduction iterator.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(4, 8).to("lazy")
w = torch.randn(8, 3).to("lazy")
emit([(x @ w).relu(), x.sum(1)], target="linalg-on-tensors")

# CHECK: func.func @{{.*}}(%arg0: tensor<4x8xf32> {{.*}}, %arg1: tensor<8x3xf32> {{.*}}) -> (tensor<4x3xf32>, tensor<4xf32>)
# CHECK: %[[INIT:.+]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<4x3xf32>) -> tensor<4x3xf32>
# CHECK: %[[MM:.+]] = linalg.matmul ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<8x3xf32>) outs(%[[INIT]] : tensor<4x3xf32>) -> tensor<4x3xf32>
# relu keeps -0.0 and NaN as eager does: a compare against the 0-d zero, then a select.
# CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} ins(%[[MM]], %{{.*}} : tensor<4x3xf32>, tensor<f32>)
# CHECK: arith.cmpf olt, %{{.*}}, %{{.*}} : f32
# CHECK: arith.select
# CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]} ins(%arg0 : tensor<4x8xf32>)
# CHECK: arith.addf
# CHECK-NOT: torch.aten
