# RUN: %PYTHON %s | FileCheck %s
# A lowering failure names the op and the user's line and leaves a repro
# (the pipeline and the input MLIR) whose path is in the message. torch-mlir
# has no TOSA lowering for atan2 (a float64 one: float32 is decomposed, lowering/trig.py).
import os

import torch
import lazy_core
from lazy_mlir import lowering
from lazy_core.graph import build_graph

lazy_core.init("eager")
x = torch.randn(4, 5, dtype=torch.float64).to("lazy")
y = torch.atan2(x, x + 1)
computation = lowering.lower_graph(build_graph([y._lz_value()]))
try:
    lowering.lower(computation, "tosa")
except lowering.LoweringError as e:
    print("error:", str(e).splitlines()[0])
    print("location:", e.location)
    print("repro exists:", os.path.exists(e.repro_path))
    print(open(e.repro_path).read())

# CHECK: error: lowering lazy_graph_{{[0-9a-f]+}} to tosa failed at torch.aten.atan2 ({{.*}}pipeline_failure.py:14): failed to legalize operation 'torch.aten.atan2'
# CHECK: location: {{.*}}pipeline_failure.py:14
# CHECK: repro exists: True
# CHECK: // Reproduce: torch-mlir-opt --pass-pipeline='builtin.module(torch-backend-to-tosa-backend-pipeline)'
# CHECK: #loc[[L:[0-9]*]] = loc("{{.*}}pipeline_failure.py":14:0)
# CHECK: torch.aten.atan2 %{{[0-9]+}}, %{{[0-9]+}} : !torch.vtensor<[4,5],f64>, !torch.vtensor<[4,5],f64> -> !torch.vtensor<[4,5],f64> loc(#loc[[L]])
