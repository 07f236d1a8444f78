# RUN: %PYTHON %s | FileCheck %s
# Two identical training steps (fresh data each time) give the same function:
# same name (the graph hash), same argument and result signature, so the
# later step is a cache hit and an on-disk cache can find it across runs.
# With momentum, the first step differs (it creates the momentum buffers).
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
torch.manual_seed(0)
model = torch.nn.Linear(5, 3).to("lazy")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def step():
    x = torch.randn(4, 5).to("lazy")
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss


names = []
for _ in range(3):
    loss = step()
    [computation] = emit_step()
    names.append(computation.func_name)
print("step 1 == step 2:", names[0] == names[1])
print("step 2 == step 3:", names[1] == names[2])

# CHECK: // signature: @[[FIRST:lazy_graph_[0-9a-f]+]](device_data[3, 5]:float32, device_data[3]:float32, device_data[4, 5]:float32, {{.*}}) -> ([3, 5]:float32, [3]:float32, []:float32, [3, 5]:float32, [3]:float32)
# CHECK: torch.aten.addmm
# CHECK: torch.aten.clone
# CHECK: // signature: @[[NAME:lazy_graph_[0-9a-f]+]]([[SIG:.*]]) -> ([3, 5]:float32, [3]:float32, [3, 5]:float32, [3]:float32, []:float32)
# CHECK: func.func @[[NAME]]([[ARGS:.*]]) -> [[RES:.*]] {
# CHECK: torch.aten.mul.Scalar %arg1, %{{[0-9]+}} : !torch.vtensor<[3,5],f32>, !torch.float
# CHECK: // signature: @[[NAME]]([[SIG]])
# CHECK: func.func @[[NAME]]([[ARGS]]) -> [[RES]] {
# CHECK: step 1 == step 2: False
# CHECK: step 2 == step 3: True
