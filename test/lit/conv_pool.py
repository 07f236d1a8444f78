# RUN: %PYTHON %s | FileCheck %s
# A small CNN forward: conv2d is torch.aten.convolution with its stride,
# padding and dilation lists; max_pool2d is eager's window scan
# (lowering/pooling.py: one strided slice per window position, NaN-aware
# compares); flatten is a view of the pooled values.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
torch.manual_seed(0)
conv = torch.nn.Conv2d(1, 4, 3, padding=1).to("lazy")
x = torch.randn(2, 1, 8, 8).to("lazy")
with torch.no_grad():
    y = torch.nn.functional.max_pool2d(conv(x).relu(), 2).flatten(1)
emit([y])

# CHECK: // signature: @{{.*}} -> ([2, 64]:float32)
# CHECK: %[[C:[0-9]+]] = torch.aten.convolution %arg{{[0-9]}}, %arg{{[0-9]}}, %arg{{[0-9]}}, {{.*}} : !torch.vtensor<[2,1,8,8],f32>, !torch.vtensor<[4,1,3,3],f32>, !torch.vtensor<[4],f32>, !torch.list<int>, !torch.list<int>, !torch.list<int>, !torch.bool, !torch.list<int>, !torch.int -> !torch.vtensor<[2,4,8,8],f32>
# relu is eager's kernel, masked_fill(x < 0, 0): -0.0 and NaN stay (lowering/decompositions.py).
# CHECK: %[[NEG:[0-9]+]] = torch.aten.lt.Tensor %[[C]]
# CHECK: %[[R:[0-9]+]] = torch.aten.masked_fill.Scalar %[[C]], %[[NEG]]
# CHECK: %[[ROWS:[0-9]+]] = torch.aten.slice.Tensor %[[R]], %int-2, {{.*}} -> !torch.vtensor<[2,4,7,8],f32>
# CHECK: torch.aten.isnan {{.*}} -> !torch.vtensor<[2,4,4,4],i1>
# CHECK: torch.aten.view %{{[0-9]+}}, {{.*}} -> !torch.vtensor<[2,64],f32>
