# RUN: %PYTHON %s | FileCheck %s
# A comparison with a Python number is emitted in a form torch-mlir's folder
# gets right (lowering/comparisons.py): a float tensor
# is compared with a float, a bool tensor is first converted to the compare
# dtype, an integer one with a float is compared with a 0-d constant of the
# dtype PyTorch compares in, through the Tensor form;
# an integer tensor and an int keep the Scalar form. (A number that is not a
# small constant is a runtime parameter, which no folder sees.)
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
f = torch.randn(2, 3).to("lazy")
m = (torch.randn(2, 3) > 0).to("lazy")
i = torch.arange(6).reshape(2, 3).to("lazy")
emit([f > 0, m > 0, i < 0.0, i >= 1])

# CHECK: torch.aten.gt.Scalar %arg{{[0-9]+}}, %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],i1>
# CHECK: %[[WIDE:[0-9]+]] = torch.aten._to_copy %arg{{[0-9]+}}, {{.*}} -> !torch.vtensor<[2,3],si64>
# CHECK: torch.aten.gt.Scalar %[[WIDE]], %{{.*}} : !torch.vtensor<[2,3],si64>, !torch.int -> !torch.vtensor<[2,3],i1>
# CHECK: %[[FZERO:[0-9]+]] = torch.aten.scalar_tensor %{{.*}} -> !torch.vtensor<[],f32>
# CHECK: torch.aten.lt.Tensor %arg{{[0-9]+}}, %[[FZERO]] : !torch.vtensor<[2,3],si64>, !torch.vtensor<[],f32> -> !torch.vtensor<[2,3],i1>
# CHECK: torch.aten.ge.Scalar %arg{{[0-9]+}}, %{{.*}} : !torch.vtensor<[2,3],si64>, !torch.int -> !torch.vtensor<[2,3],i1>
