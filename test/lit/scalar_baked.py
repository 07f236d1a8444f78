# RUN: %PYTHON %s | FileCheck %s
# 0 and 1 stay in the graph as constants so the compiler can fold them: no
# scalar_param argument, no torch.aten.item.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(2, 3).to("lazy")
emit([x * 1, x + 0])

# CHECK: // signature: @{{.*}}(device_data[2, 3]:float32) -> ([2, 3]:float32, [2, 3]:float32)
# CHECK-NOT: scalar_param
# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[2,3],f32> {{[^,]*}}) ->
# CHECK-NOT: torch.aten.item
# CHECK: %[[ONE:.+]] = torch.constant.int 1
# CHECK-NEXT: torch.aten.mul.Scalar %arg0, %[[ONE]] : !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
# CHECK: %[[ZERO:.+]] = torch.constant.int 0
# CHECK: torch.aten.add.Scalar %arg0, %[[ZERO]], %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.int, !torch.int
# CHECK-NOT: torch.aten.item
