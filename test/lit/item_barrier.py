# RUN: %PYTHON %s | FileCheck %s
# .item() is a barrier: the pending graph runs, the value becomes device
# data, and the ops after it are a new graph whose argument is that data.
# The Python float read back is then an ordinary scalar parameter.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import lower_graph, print_computation

lazy_core.init("eager")
graphs = []
lazy_core.executor().hooks.append(lambda graph, entry, reason: graphs.append((graph, reason)))
x = torch.arange(4.0).to("lazy")
s = (x * x).sum()
v = s.item()
print("value:", v)
y = x / v
lazy_core.mark_step()
for g, reason in graphs:
    print("// reason:", reason.split(" ")[0])
    print_computation(lower_graph(g))

# CHECK: value: 14.0
# CHECK: // reason: item
# CHECK: // signature: @{{.*}}(device_data[4]:float32) -> ([]:float32)
# CHECK: torch.aten.mul.Tensor %arg0, %arg0
# CHECK: torch.aten.sum
# CHECK: // reason: mark_step
# CHECK: // signature: @{{.*}}(device_data[4]:float32, scalar_pack[1]:float64) -> ([4]:float32)
# CHECK: %[[S:[0-9]+]] = torch.aten.{{select.int|squeeze.dim}} %arg1, {{.*}} : !torch.vtensor<[1],f64>, {{.*}} -> !torch.vtensor<[],f64>
# CHECK: %[[V:[0-9]+]] = torch.aten.item %[[S]] : !torch.vtensor<[],f64> -> !torch.float
# CHECK: torch.aten.div.Scalar %arg0, %[[V]] : !torch.vtensor<[4],f32>, !torch.float -> !torch.vtensor<[4],f32>
# CHECK-NOT: torch.aten.sum
