# RUN: %PYTHON %s | FileCheck %s
# An MNIST-style training step (MLP, cross entropy, SGD): one graph whose ops
# carry the lines of this file that made them (forward, loss, backward,
# optimizer), and which lowers to linalg-on-tensors.
import torch
import lazy_core
from lazy_mlir import lowering
from lazy_mlir.tools.lit_helpers import capture_step, print_computation

lazy_core.init("eager")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 32), torch.nn.ReLU(),
                            torch.nn.Linear(32, 10)).to("lazy")
opt = torch.optim.SGD(model.parameters(), lr=0.05)
images = torch.randn(16, 1, 28, 28).to("lazy")
labels = torch.randint(0, 10, (16,)).to("lazy")
logits = model(images)
loss = torch.nn.functional.cross_entropy(logits, labels)
loss.backward()
opt.step()
opt.zero_grad()
[graph] = capture_step()
computation = lowering.lower_graph(graph)
print_computation(computation)
print_computation(lowering.lower(computation, "linalg-on-tensors"), locations=False)

# The weights' new values, the logits and the loss are the live results; the
# label check (lazy_core/checks.py) adds its int64 accumulator ([1]), in and out, and
# its check ids as int64 scalars.
# CHECK: // signature: @{{.*}}(device_data[32, 784]:float32, device_data[10]:float32, device_data[32]:float32, device_data[16, 1, 28, 28]:float32, device_data[10, 32]:float32, device_data[16]:int64, device_data[1]:int64, scalar_pack[{{[0-9]+}}]:float64, scalar_pack[{{[0-9]+}}]:int64) -> ([32, 784]:float32, [32]:float32, [10, 32]:float32, [10]:float32, [16, 10]:float32, [1]:int64, []:float32)
# CHECK: torch.aten.view %arg3, {{.*}} -> !torch.vtensor<[16,784],f32> loc("{{.*}}mnist_train_step.py":17:0)
# CHECK: torch.aten.addmm {{.*}} -> !torch.vtensor<[16,32],f32> loc("{{.*}}mnist_train_step.py":17:0)
# CHECK: torch.aten._log_softmax {{.*}} -> !torch.vtensor<[16,10],f32> loc("{{.*}}mnist_train_step.py":18:0)
# CHECK: %output, %total_weight = torch.aten.nll_loss_forward {{.*}} -> !torch.vtensor<[],f32>, !torch.vtensor<[],f32> loc("{{.*}}mnist_train_step.py":18:0)
# CHECK: torch.aten.nll_loss_backward {{.*}} loc("{{.*}}mnist_train_step.py":19:0)
# CHECK: torch.aten._log_softmax_backward_data {{.*}} loc("{{.*}}mnist_train_step.py":19:0)
# CHECK: torch.aten.masked_fill.Scalar {{.*}} -> !torch.vtensor<[16,32],f32> loc("{{.*}}mnist_train_step.py":19:0)
# CHECK: torch.aten.add.Tensor %arg{{[0-9]+}}, {{.*}} : !torch.vtensor<[32,784],f32>, !torch.vtensor<[32,784],f32>, !torch.float -> !torch.vtensor<[32,784],f32> loc("{{.*}}mnist_train_step.py":20:0)
# CHECK: // form: linalg-on-tensors
# CHECK: linalg.matmul
# CHECK-NOT: torch.aten
# CHECK: return
