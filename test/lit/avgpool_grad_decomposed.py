# RUN: %PYTHON %s | FileCheck %s
# avg_pool2d_backward imports but torch-mlir cannot lower it: the lowering
# inlines a decomposition instead (divide by each window's size, spread with a
# transposed convolution of a ones kernel, crop the padding).
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(2, 3, 8, 8).to("lazy").requires_grad_()
torch.nn.functional.avg_pool2d(x, 3, stride=2, padding=1).sum().backward()
emit([x.grad])

# CHECK-NOT: avg_pool2d_backward
# CHECK: torch.aten.arange
# CHECK: torch.aten.convolution {{.*}} -> !torch.vtensor<[6,1,9,9],f32>
# CHECK: torch.aten.slice.Tensor {{.*}} -> !torch.vtensor<[6,1,8,8],f32>
# CHECK: return {{.*}} : !torch.vtensor<[2,3,8,8],f32>
