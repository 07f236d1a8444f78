# RUN: %PYTHON %s | FileCheck %s
# The torch backend contract (what IREE's torch input and the other
# pipelines start from): composite ops are decomposed (softmax into
# max/sub/exp/sum/div), constants are hoisted and deduplicated.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(4, 8).to("lazy")
emit([(x * x).softmax(-1)], target="torch")

# CHECK: // form: torch
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(%arg0: !torch.vtensor<[4,8],f32> {{.*}}) -> !torch.vtensor<[4,8],f32>
# CHECK-NOT: torch.aten._softmax
# CHECK: %[[SQ:[0-9]+]] = torch.aten.mul.Tensor %arg0, %arg0
# CHECK: %values, %indices = torch.aten.max.dim %[[SQ]], {{.*}} -> !torch.vtensor<[4,1],f32>, !torch.vtensor<[4,1],si64>
# CHECK: %[[SUB:[0-9]+]] = torch.aten.sub.Tensor %[[SQ]], %values
# CHECK: %[[E:[0-9]+]] = torch.aten.exp %[[SUB]]
# CHECK: %[[S:[0-9]+]] = torch.aten.sum.dim_IntList %[[E]], {{.*}} -> !torch.vtensor<[4,1],f32>
# CHECK: %[[D:[0-9]+]] = torch.aten.div.Tensor %[[E]], %[[S]] : !torch.vtensor<[4,8],f32>, !torch.vtensor<[4,1],f32> -> !torch.vtensor<[4,8],f32>
# CHECK: return %[[D]]
# CHECK-NOT: torch.aten._softmax
