# RUN: %PYTHON %s | FileCheck %s
# The same step with a different scalar each time is the same function: the
# scalar is an argument, so the name (the graph hash) does not change.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
w = torch.randn(4).to("lazy")
g = torch.randn(4).to("lazy")
for lr in (0.1, 0.01, 0.001):
    w = w - lr * g
    emit_step()

# CHECK: // signature: @[[NAME:lazy_graph_[0-9a-f]+]](device_data[4]:float32, device_data[4]:float32, scalar_pack[1]:float64) -> ([4]:float32)
# CHECK: torch.aten.select.int %arg2, {{.*}} : !torch.vtensor<[1],f64>, !torch.int, !torch.int -> !torch.vtensor<[],f64>
# CHECK: torch.aten.item %{{[0-9]+}} : !torch.vtensor<[],f64> -> !torch.float
# CHECK: // signature: @[[NAME]](device_data[4]:float32, device_data[4]:float32, scalar_pack[1]:float64)
# CHECK: func.func @[[NAME]](
# CHECK: // signature: @[[NAME]](
# CHECK: func.func @[[NAME]](
