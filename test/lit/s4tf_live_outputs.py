# RUN: %PYTHON %s | FileCheck %s
# The Swift for TensorFlow LazyTensor example: only the live tensor z is a
# result of the step graph; w, x, y are intermediates no Python object holds.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
a, b, c = (torch.full((2, 3), float(i)).to("lazy") for i in (1, 2, 3))


def step():
    w = a + b
    x = w - c
    y = x + x + w
    return y + y


z = step()
emit_step()

# CHECK: // signature: @lazy_graph_{{[0-9a-f]+}}(device_data[2, 3]:float32, device_data[2, 3]:float32, device_data[2, 3]:float32) -> ([2, 3]:float32)
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(%arg0: !torch.vtensor<[2,3],f32> {{.*}}, %arg1: !torch.vtensor<[2,3],f32> {{.*}}, %arg2: !torch.vtensor<[2,3],f32> {{.*}}) -> !torch.vtensor<[2,3],f32>
# CHECK: %[[W:[0-9]+]] = torch.aten.add.Tensor %arg0, %arg1, %{{.+}} : !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
# CHECK: %[[X:[0-9]+]] = torch.aten.sub.Tensor %[[W]], %arg2,
# CHECK: %[[XX:[0-9]+]] = torch.aten.add.Tensor %[[X]], %[[X]],
# CHECK: %[[Y:[0-9]+]] = torch.aten.add.Tensor %[[XX]], %[[W]],
# CHECK: %[[Z:[0-9]+]] = torch.aten.add.Tensor %[[Y]], %[[Y]],
# CHECK: return %[[Z]] : !torch.vtensor<[2,3],f32>
# CHECK-NOT: torch.aten
