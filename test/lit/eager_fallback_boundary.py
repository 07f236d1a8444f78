# RUN: %PYTHON %s | FileCheck %s
# An op with a data-dependent shape (nonzero) cannot be traced: its inputs
# are materialized (one graph), it runs eagerly on the CPU, and tracing
# continues from its result, which is an argument of the next graph.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import capture_step, print_computation, lower_graph

lazy_core.init("eager")
ran = []
lazy_core.executor().hooks.append(lambda graph, entry, reason: ran.append((graph, reason)))
x = torch.tensor([[0.0, 1.0], [2.0, 0.0]]).to("lazy")
y = x * 3
idx = torch.nonzero(y)
z = idx * 2
for graph, reason in ran:
    print("// reason:", reason.split(" ")[0])
    print_computation(lower_graph(graph))
capture_step()
print_computation(lower_graph(lazy_core.executor().last_graph()))
print("fallbacks:", lazy_core.metrics.counter("fallback::aten.nonzero.default"))

# CHECK: // reason:
# CHECK: torch.aten.mul.Scalar %arg0, %{{[0-9]+}} : !torch.vtensor<[2,2],f32>, !torch.int -> !torch.vtensor<[2,2],f32>
# CHECK-NOT: torch.aten.nonzero
# CHECK: // signature: @{{.*}}(device_data[2, 2]:int64, scalar_pack[1]:int64) -> ([2, 2]:int64)
# CHECK: torch.aten.mul.Scalar %arg0, %{{[0-9]+}} : !torch.vtensor<[2,2],si64>, !torch.int -> !torch.vtensor<[2,2],si64>
# CHECK: fallbacks: 1
