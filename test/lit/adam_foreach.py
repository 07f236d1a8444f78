# RUN: %PYTHON %s | FileCheck %s
# torch.optim.Adam(foreach=True): the _foreach_* ops are decomposed into
# per-tensor ops before they reach the graph; hyperparameters are scalar
# parameters; weights and both moment buffers of both tensors are results.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
torch.manual_seed(0)
ws = [torch.nn.Parameter(torch.randn(4, 3).to("lazy")), torch.nn.Parameter(torch.randn(3).to("lazy"))]
for w in ws:
    w.grad = torch.randn(w.shape).to("lazy")
opt = torch.optim.Adam(ws, lr=0.01, foreach=True)
lazy_core.mark_step()
opt.step()
emit_step()

# All twelve scalars (lr, betas, eps, bias corrections ...) arrive in one f64 pack.
# CHECK: // signature: @{{.*}}(device_data[4, 3]:float32, device_data[4, 3]:float32, device_data[3]:float32, device_data[3]:float32, scalar_pack[12]:float64) -> ([4, 3]:float32, [3]:float32, [4, 3]:float32, [4, 3]:float32, [3]:float32, [3]:float32)
# CHECK-NOT: torch.aten._foreach
# CHECK: torch.aten.select.int %arg{{[0-9]+}}, {{.*}} -> !torch.vtensor<[],f64>
# CHECK: torch.aten.item %{{[0-9]+}} : !torch.vtensor<[],f64> -> !torch.float
# exp_avg = lerp(0, grad, 1 - beta1), as eager's two formulas picked by |w| < 0.5
# (lowering/lerp.py); exp_avg_sq = beta2 * 0 + ((1 - beta2) * grad) * grad, addcmul in
# the CPU kernel's order, value times the first factor first (lowering/addc.py)
# CHECK-NOT: torch.aten.lerp
# CHECK: %[[DIFF:[0-9]+]] = torch.aten.sub.Tensor %arg1, %{{[0-9]+}}, %int1{{[_0-9]*}} : !torch.vtensor<[4,3],f32>
# CHECK: %[[SMALL:[0-9]+]] = torch.aten.lt.Scalar %{{[0-9]+}}, %float5.000000e-01 : !torch.vtensor<[],f32>
# CHECK: %[[M:[0-9]+]] = torch.aten.where.self %[[SMALL]], %{{[0-9]+}}, %{{[0-9]+}} : !torch.vtensor<[],i1>, !torch.vtensor<[4,3],f32>, !torch.vtensor<[4,3],f32> -> !torch.vtensor<[4,3],f32>
# CHECK-NOT: torch.aten.addcmul
# CHECK: %[[SCALED:[0-9]+]] = torch.aten.mul.Tensor %arg1, %{{[0-9]+}} : !torch.vtensor<[4,3],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[4,3],f32>
# CHECK: %[[SQ:[0-9]+]] = torch.aten.mul.Tensor %[[SCALED]], %arg1 : !torch.vtensor<[4,3],f32>, !torch.vtensor<[4,3],f32>
# CHECK: %[[V:[0-9]+]] = torch.aten.add.Tensor %{{[0-9]+}}, %[[SQ]], %int1{{[_0-9]*}} : {{.*}} -> !torch.vtensor<[4,3],f32>
# denom = sqrt(exp_avg_sq) / sqrt(bias_correction2) + eps; w = w + (-step_size * exp_avg) / denom
# CHECK: %[[S:[0-9]+]] = torch.aten.sqrt %[[V]] : !torch.vtensor<[4,3],f32> -> !torch.vtensor<[4,3],f32>
# CHECK: %[[D:[0-9]+]] = torch.aten.div.Scalar %[[S]], %{{[0-9]+}} : !torch.vtensor<[4,3],f32>, !torch.float
# CHECK: %[[DEN:[0-9]+]] = torch.aten.add.Scalar %[[D]], %{{[0-9]+}}, %int1{{[_0-9]*}} : !torch.vtensor<[4,3],f32>, !torch.float, !torch.int
# CHECK-NOT: torch.aten.addcdiv
# CHECK: %[[STEP:[0-9]+]] = torch.aten.mul.Tensor %[[M]], %{{[0-9]+}} : !torch.vtensor<[4,3],f32>, !torch.vtensor<[],f32>
# CHECK: %[[Q:[0-9]+]] = torch.aten.div.Tensor %[[STEP]], %[[DEN]] : !torch.vtensor<[4,3],f32>, !torch.vtensor<[4,3],f32>
# CHECK: %[[W:[0-9]+]] = torch.aten.add.Tensor %arg0, %[[Q]], %int1{{[_0-9]*}} : {{.*}} -> !torch.vtensor<[4,3],f32>
# The same for the second parameter, with its own shapes.
# CHECK: torch.aten.sub.Tensor %arg3, {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: torch.aten.where.self {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: torch.aten.mul.Tensor %arg3, {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: torch.aten.add.Tensor %arg2, {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: return %[[W]], %{{[0-9]+}}, %[[M]], %[[V]],
# CHECK-NOT: torch.aten._foreach
