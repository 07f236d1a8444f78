# RUN: %PYTHON %s | FileCheck %s
# uint8 and int8 are computed in int32 (lowering/small_ints.py): torch-mlir
# cannot convert a value to an 8-bit type inside an op's lowering, and reads
# ui8 as signed where it converts from it. The 8-bit operand is cast up
# (exact), the op runs in si32, the result is cast back down (truncation)
# with `aten.to.dtype` copy=true, which torch-mlir never folds into a ui8
# constant. A Python scalar compared with a uint8 tensor is first converted
# to uint8, as PyTorch does (300 -> 44). Moving values (permute) stays 8-bit.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.tensor([[1, 200], [3, 255]], dtype=torch.uint8).to("lazy")
emit([x * 3, x > 300, x.permute(1, 0), x.sum()], locations=False)

# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[2,2],ui8>, %arg1: !torch.vtensor<[2],si64>)
# The scalar parameters (3 and 300) are read as uint8 values: 300 becomes 44.
# CHECK: %[[P:[0-9]+]] = torch.aten.select.int %arg1
# CHECK: %[[P8:[0-9]+]] = torch.aten.to.dtype %[[P]], %int0{{[_0-9]*}}, %false{{[_0-9]*}}, %true{{[_0-9]*}}, %none{{[_0-9]*}} : !torch.vtensor<[],si64>, {{.*}} -> !torch.vtensor<[],ui8>
# CHECK: %[[P64:[0-9]+]] = torch.aten._to_copy %[[P8]], %int4{{.*}} -> !torch.vtensor<[],si64>
# CHECK: %[[THREE:[0-9]+]] = torch.aten.item %[[P64]]
# CHECK: %[[LIMIT:[0-9]+]] = torch.aten.item
# One conversion of the argument serves every op that computes on it.
# CHECK: %[[W:[0-9]+]] = torch.aten._to_copy %arg0, %int3{{.*}} : !torch.vtensor<[2,2],ui8>, {{.*}} -> !torch.vtensor<[2,2],si32>
# CHECK: %[[M:[0-9]+]] = torch.aten.mul.Scalar %[[W]], %[[THREE]] : !torch.vtensor<[2,2],si32>, !torch.int -> !torch.vtensor<[2,2],si32>
# CHECK: %[[M8:[0-9]+]] = torch.aten.to.dtype %[[M]], %int0{{[_0-9]*}}, %false{{[_0-9]*}}, %true{{[_0-9]*}}, %none{{[_0-9]*}} : !torch.vtensor<[2,2],si32>, {{.*}} -> !torch.vtensor<[2,2],ui8>
# CHECK: %[[GT:[0-9]+]] = torch.aten.gt.Scalar %[[W]], %[[LIMIT]] : !torch.vtensor<[2,2],si32>, !torch.int -> !torch.vtensor<[2,2],i1>
# CHECK: %[[T:[0-9]+]] = torch.aten.permute %arg0, %{{[0-9]+}} : !torch.vtensor<[2,2],ui8>, !torch.list<int> -> !torch.vtensor<[2,2],ui8>
# CHECK: %[[S:[0-9]+]] = torch.aten.sum %[[W]], %none{{[_0-9]*}} : !torch.vtensor<[2,2],si32>, !torch.none -> !torch.vtensor<[],si64>
# CHECK: return %[[M8]], %[[GT]], %[[T]], %[[S]]
