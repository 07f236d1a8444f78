# RUN: %PYTHON %s | FileCheck %s
# A Python scalar other than 0 and 1 becomes a function argument (a 0-d
# tensor turned back into a scalar with torch.aten.item), so a learning rate
# that changes every step does not change the graph.
import torch
import lazy_core
from tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(2, 3).to("lazy")
emit([x * 0.5, x + 3])

# CHECK: // signature: @{{.*}}(device_data[2, 3]:float32, scalar_param[]:float64, scalar_param[]:int64) -> ([2, 3]:float32, [2, 3]:float32)
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(%arg0: !torch.vtensor<[2,3],f32> {{.*}}, %arg1: !torch.vtensor<[],f64> {{.*}}, %arg2: !torch.vtensor<[],si64> {{.*}})
# CHECK: %[[HALF:[0-9]+]] = torch.aten.item %arg1 : !torch.vtensor<[],f64> -> !torch.float
# CHECK: %[[THREE:[0-9]+]] = torch.aten.item %arg2 : !torch.vtensor<[],si64> -> !torch.int
# CHECK: torch.aten.mul.Scalar %arg0, %[[HALF]] : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.add.Scalar %arg0, %[[THREE]], %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.int, !torch.int -> !torch.vtensor<[2,3],f32>
# CHECK-NOT: torch.constant.float 5.0
