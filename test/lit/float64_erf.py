# RUN: %PYTHON %s | FileCheck %s
# A target with no float64 math.erf (IREE) asks for float64_erf: each float64 erf, gelu's
# included, becomes fdlibm's steps (exp and ratios of polynomials, lowering/erf64.py);
# a float32 erf stays one op, and without the option a float64 one does too.
import torch
import lazy_core
from lazy_mlir import lowering
from lazy_core.graph import build_graph
from lazy_mlir.tools.lit_helpers import print_computation

lazy_core.init("eager")
x = torch.randn(4, dtype=torch.float64).to("lazy")
graph = build_graph([torch.erf(x)._lz_value(), torch.nn.functional.gelu(x)._lz_value(),
                     torch.erf(x.float())._lz_value()])
print("// with float64_erf")
print_computation(lowering.lower_graph(graph, float64_erf=True), locations=False)
print("// without")
print_computation(lowering.lower_graph(graph), locations=False)

# CHECK-LABEL: // with float64_erf
# CHECK-NOT: torch.aten.erf {{.*}}f64
# CHECK: torch.aten.exp {{.*}} -> !torch.vtensor<[4],f64>
# CHECK: torch.aten.floor {{.*}} -> !torch.vtensor<[4],f64>
# CHECK: torch.aten.erf {{.*}} : !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
# CHECK-LABEL: // without
# CHECK: torch.aten.erf {{.*}} : !torch.vtensor<[4],f64> -> !torch.vtensor<[4],f64>
