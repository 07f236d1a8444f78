# RUN: %PYTHON %s | FileCheck %s
# A cast from float to an integer is guarded first (lowering/float_to_int.py):
# values outside [-2**31, 2**31) and NaN become -2**31 (x86's result, which
# eager shows), so a NaN literal cannot reach fptosi, which LLVM folds to
# poison. int8 goes through int32, whose wrap is defined.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
f = torch.randn(2, 3).to("lazy")
emit([f.int(), f.to(torch.int8)])

# CHECK: %[[LO:[0-9]+]] = torch.aten.ge.Scalar %arg0, %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],i1>
# CHECK: %[[HI:[0-9]+]] = torch.aten.lt.Scalar %arg0, %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],i1>
# CHECK: %[[OK:[0-9]+]] = torch.aten.logical_and %[[LO]], %[[HI]]
# CHECK: %[[G:[0-9]+]] = torch.aten.where.ScalarOther %[[OK]], %arg0, %{{.*}} : !torch.vtensor<[2,3],i1>, !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten._to_copy %[[G]], %{{.*}} -> !torch.vtensor<[2,3],si32>
# CHECK: torch.aten._to_copy %{{[0-9]+}}, %{{.*}} : !torch.vtensor<[2,3],si32>, {{.*}} -> !torch.vtensor<[2,3],si8>
