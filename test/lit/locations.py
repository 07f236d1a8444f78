# RUN: %PYTHON %s | FileCheck %s
# Every op carries the user's file:line as an MLIR location, so compiler
# diagnostics name user code. Frames inside torch (nn.functional) and
# lazy_core are skipped, so relu is attributed to the line calling it, while
# a user's own helper function keeps its own line.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(4, 4).to("lazy")
y = x @ x
# CHECK: torch.aten.mm %arg0, %arg0 {{.*}} loc("{{.*}}locations.py":[[# @LINE - 1]]:0)


def helper(t):
    return t.tanh()
# CHECK: torch.aten.tanh {{.*}} loc("{{.*}}locations.py":[[# @LINE - 1]]:0)


z = helper(y)
w = torch.nn.functional.relu(z)
# CHECK: torch.aten.masked_fill.Scalar {{.*}} loc("{{.*}}locations.py":[[# @LINE - 1]]:0)
emit([w])
# The function's own location is its first op's.
# CHECK: } loc("{{.*}}locations.py":
