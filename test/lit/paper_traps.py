# RUN: %PYTHON %s | FileCheck %s
# The LazyTensor paper's traps: `a += 1; print(a); print(a)` adds once (the
# second print runs no graph), and `b = a + 2; a += 1` gives b the old a:
# b's graph reads the argument a, not the updated value.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import print_computation, lower_graph

lazy_core.init("eager")
graphs = []
lazy_core.executor().hooks.append(lambda graph, entry, reason: graphs.append(graph))

a = torch.zeros(3).to("lazy")
a += 1
print("first:", a.cpu().tolist())
print("second:", a.cpu().tolist())
print("graphs run:", len(graphs))
for g in graphs:
    print_computation(lower_graph(g))

# CHECK: first: [1.0, 1.0, 1.0]
# CHECK: second: [1.0, 1.0, 1.0]
# CHECK: graphs run: 1
# CHECK: torch.aten.add.Scalar %arg0, %int1{{.*}}
# CHECK-NOT: func.func

graphs.clear()
b = a + 2
a += 1
lazy_core.mark_step()
print("a:", a.cpu().tolist(), "b:", b.cpu().tolist())
for g in graphs:
    print_computation(lower_graph(g))

# CHECK: a: [2.0, 2.0, 2.0] b: [3.0, 3.0, 3.0]
# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[3],f32> {{.*}}, %arg1: !torch.vtensor<[1],si64> {{.*}}) -> (!torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>)
# CHECK-DAG: %[[B:[0-9]+]] = torch.aten.add.Scalar %arg0, %{{[0-9]+}}, %int1
# CHECK-DAG: %[[A:[0-9]+]] = torch.aten.add.Scalar %arg0, %int1{{[_0-9]*}}, %int1
# CHECK: return %[[A]], %[[B]] :
