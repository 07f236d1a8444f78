# RUN: %PYTHON %s | FileCheck %s
# In-place ops are functional substitutions: x.add_(y) and x.mul_(2) become
# add/mul whose result is the new value of x's storage, the graph's only result.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
x = torch.randn(3, 4).to("lazy")
y = torch.randn(3, 4).to("lazy")
x.add_(y)
x.mul_(2)
x.relu_()
emit_step()

# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[3,4],f32> {{.*}}, %arg1: !torch.vtensor<[3,4],f32> {{.*}}, %arg2: !torch.vtensor<[1],si64> {{.*}}) -> !torch.vtensor<[3,4],f32>
# CHECK: %[[ADD:[0-9]+]] = torch.aten.add.Tensor %arg0, %arg1, %{{.*}} : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
# CHECK: %[[MUL:[0-9]+]] = torch.aten.mul.Scalar %[[ADD]], %{{.*}} : !torch.vtensor<[3,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
# relu is eager's kernel, masked_fill(x < 0, 0): -0.0 and NaN stay (lowering/decompositions.py).
# CHECK: %[[NEG:[0-9]+]] = torch.aten.lt.Tensor %[[MUL]]
# CHECK: %[[RELU:[0-9]+]] = torch.aten.masked_fill.Scalar %[[MUL]], %[[NEG]], {{.*}} -> !torch.vtensor<[3,4],f32>
# CHECK: return %[[RELU]] : !torch.vtensor<[3,4],f32>
# CHECK-NOT: torch.aten.add_
# CHECK-NOT: torch.copy
