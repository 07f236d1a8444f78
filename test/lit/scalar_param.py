# RUN: %PYTHON %s | FileCheck %s
# A Python scalar other than 0 and 1 becomes a function argument, so a
# learning rate that changes every step does not change the graph. All float
# scalars travel packed in one 1-D f64 tensor and all int scalars in one 1-D
# si64 tensor, as the last arguments; each is element i of its pack, read back
# with torch.aten.select + torch.aten.item.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(2, 3).to("lazy")
emit([x * 0.5, x + 3, x * 2.5 - 7])

# CHECK: // signature: @{{.*}}(device_data[2, 3]:float32, scalar_pack[2]:float64, scalar_pack[2]:int64) -> ([2, 3]:float32, [2, 3]:float32, [2, 3]:float32)
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(%arg0: !torch.vtensor<[2,3],f32> {{.*}}, %arg1: !torch.vtensor<[2],f64> {{.*}}, %arg2: !torch.vtensor<[2],si64> {{.*}})
# CHECK: %[[S0:[0-9]+]] = torch.aten.select.int %arg1, %{{[a-z0-9_]+}}, %int0{{[_0-9]*}} : !torch.vtensor<[2],f64>, !torch.int, !torch.int -> !torch.vtensor<[],f64>
# CHECK: %[[HALF:[0-9]+]] = torch.aten.item %[[S0]] : !torch.vtensor<[],f64> -> !torch.float
# CHECK: %[[S1:[0-9]+]] = torch.aten.select.int %arg1, %{{[a-z0-9_]+}}, %int1{{[_0-9]*}} : !torch.vtensor<[2],f64>, !torch.int, !torch.int -> !torch.vtensor<[],f64>
# CHECK: %[[TWOHALF:[0-9]+]] = torch.aten.item %[[S1]] : !torch.vtensor<[],f64> -> !torch.float
# CHECK: %[[S2:[0-9]+]] = torch.aten.select.int %arg2, {{.*}} -> !torch.vtensor<[],si64>
# CHECK: %[[THREE:[0-9]+]] = torch.aten.item %[[S2]] : !torch.vtensor<[],si64> -> !torch.int
# CHECK: %[[S3:[0-9]+]] = torch.aten.select.int %arg2, {{.*}} -> !torch.vtensor<[],si64>
# CHECK: %[[SEVEN:[0-9]+]] = torch.aten.item %[[S3]] : !torch.vtensor<[],si64> -> !torch.int
# CHECK: torch.aten.mul.Scalar %arg0, %[[HALF]] : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.add.Scalar %arg0, %[[THREE]], %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,3],f32>
# CHECK: %[[M:[0-9]+]] = torch.aten.mul.Scalar %arg0, %[[TWOHALF]]
# CHECK: torch.aten.sub.Scalar %[[M]], %[[SEVEN]]
# CHECK-NOT: torch.constant.float 5.0
