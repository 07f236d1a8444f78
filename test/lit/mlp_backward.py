# RUN: %PYTHON %s | FileCheck %s
# The backward pass is traced too (the tracer sits below autograd): ReLU's
# gradient is threshold_backward, Linear's weight gradients are mm with
# transposed operands, bias gradients are sums over the batch.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("lazy")
x = torch.randn(3, 4).to("lazy")
model(x).sum().backward()
emit_step()

# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(
# CHECK: %[[H:[0-9]+]] = torch.aten.addmm {{.*}} -> !torch.vtensor<[3,8],f32>
# relu is eager's kernel, masked_fill(x < 0, 0): -0.0 and NaN stay (lowering/decompositions.py).
# CHECK: %[[NEG:[0-9]+]] = torch.aten.lt.Tensor %[[H]]
# CHECK: %[[R:[0-9]+]] = torch.aten.masked_fill.Scalar %[[H]], %[[NEG]]
# CHECK: %[[W2T:[0-9]+]] = torch.aten.t %arg{{[0-9]}} : !torch.vtensor<[2,8],f32> -> !torch.vtensor<[8,2],f32>
# CHECK: %[[LOSS:[0-9]+]] = torch.aten.sum %{{[0-9]+}}, %none{{.*}} -> !torch.vtensor<[],f32>
# CHECK: %[[ONES:[0-9]+]] = torch.aten.ones_like %[[LOSS]]
# CHECK: %[[G:[0-9]+]] = torch.aten.expand %[[ONES]], {{.*}} -> !torch.vtensor<[3,2],f32>
# CHECK: %[[GT:[0-9]+]] = torch.aten.t %[[G]] : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[2,3],f32>
# CHECK: %[[DW2:[0-9]+]] = torch.aten.mm %[[GT]], %[[R]] : !torch.vtensor<[2,3],f32>, !torch.vtensor<[3,8],f32> -> !torch.vtensor<[2,8],f32>
# CHECK: torch.aten.sum.dim_IntList %[[G]], {{.*}} -> !torch.vtensor<[1,2],f32>
# CHECK: %[[W2:[0-9]+]] = torch.aten.t %[[W2T]] : !torch.vtensor<[8,2],f32> -> !torch.vtensor<[2,8],f32>
# CHECK: %[[DH:[0-9]+]] = torch.aten.mm %[[G]], %[[W2]] : !torch.vtensor<[3,2],f32>, !torch.vtensor<[2,8],f32> -> !torch.vtensor<[3,8],f32>
# threshold_backward (ReLU's backward) is eager's kernel too: 0 where r <= 0, so a NaN passes the gradient on.
# CHECK: %[[OFF:[0-9]+]] = torch.aten.le.Tensor %[[R]], %{{[0-9]+}} : !torch.vtensor<[3,8],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[3,8],i1>
# CHECK: %[[DR:[0-9]+]] = torch.aten.masked_fill.Scalar %[[DH]], %[[OFF]], {{.*}} -> !torch.vtensor<[3,8],f32>
# CHECK: %[[DRT:[0-9]+]] = torch.aten.t %[[DR]] : !torch.vtensor<[3,8],f32> -> !torch.vtensor<[8,3],f32>
# CHECK: %[[DW1:[0-9]+]] = torch.aten.mm %[[DRT]], %arg{{[0-9]}} : !torch.vtensor<[8,3],f32>, !torch.vtensor<[3,4],f32> -> !torch.vtensor<[8,4],f32>
# CHECK: %[[DB1:[0-9]+]] = torch.aten.sum.dim_IntList %[[DR]], {{.*}} -> !torch.vtensor<[1,8],f32>
# CHECK: return {{.*}}%[[DW2]], {{.*}}%[[DW1]], %[[DB1]] :
