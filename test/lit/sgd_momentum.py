# RUN: %PYTHON %s | FileCheck %s
# torch.optim.SGD with momentum: the learning rate is a scalar parameter
# (argument + item), the momentum buffer and the weight are both results.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(4, 3).to("lazy"))
w.grad = torch.randn(4, 3).to("lazy")
opt = torch.optim.SGD([w], lr=0.1, momentum=0.9, foreach=False)
lazy_core.mark_step()
opt.step()
emit_step()
opt.step()
emit_step()

# First step: the buffer is a clone of the gradient.
# CHECK: // signature: @{{.*}}(device_data[4, 3]:float32, device_data[4, 3]:float32, scalar_pack[1]:float64) -> ([4, 3]:float32, [4, 3]:float32)
# CHECK: %[[S:[0-9]+]] = torch.aten.select.int %arg2, {{.*}} -> !torch.vtensor<[],f64>
# CHECK: %[[LR:[0-9]+]] = torch.aten.item %[[S]] : !torch.vtensor<[],f64> -> !torch.float
# CHECK: %[[BUF:[0-9]+]] = torch.aten.clone %arg1
# CHECK: %[[W:[0-9]+]] = torch.aten.add.Tensor %arg0, %[[BUF]], %[[LR]] : !torch.vtensor<[4,3],f32>, !torch.vtensor<[4,3],f32>, !torch.float -> !torch.vtensor<[4,3],f32>
# CHECK: return %[[W]], %[[BUF]]
# Later steps: buf = buf * momentum + grad; w = w - lr * buf.
# CHECK: // signature: @{{.*}}(device_data[4, 3]:float32, device_data[4, 3]:float32, device_data[4, 3]:float32, scalar_pack[2]:float64) -> ([4, 3]:float32, [4, 3]:float32)
# CHECK-DAG: %[[MOM:[0-9]+]] = torch.aten.item %{{[0-9]+}} : !torch.vtensor<[],f64> -> !torch.float
# CHECK-DAG: %[[LR2:[0-9]+]] = torch.aten.item %{{[0-9]+}} : !torch.vtensor<[],f64> -> !torch.float
# CHECK: %[[M:[0-9]+]] = torch.aten.mul.Scalar %arg{{[0-9]}}, %[[MOM]]
# CHECK: %[[NB:[0-9]+]] = torch.aten.add.Tensor %[[M]], %arg{{[0-9]}}, %int1
# CHECK: torch.aten.add.Tensor %arg{{[0-9]}}, %[[NB]], %[[LR2]]
