# RUN: %PYTHON %s | FileCheck %s
# select_backward and slice_backward have no torch-dialect op: the lowering
# inlines their decomposition (zeros + select_scatter / slice_scatter), with
# the location of the line whose view made them.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(4, 6).to("lazy").requires_grad_()
loss = x[:, 0].sum() + x[1:, 2:5:2].sum()
loss.backward()
emit([x.grad])

# CHECK-NOT: select_backward
# CHECK-NOT: slice_backward
# CHECK: torch.aten.new_zeros
# CHECK-DAG: torch.aten.select_scatter {{.*}} -> !torch.vtensor<[4,6],f32> loc("{{.*}}view_backward_decomposed.py":12:0)
# CHECK-DAG: torch.aten.slice_scatter {{.*}} -> !torch.vtensor<[3,6],f32> loc("{{.*}}view_backward_decomposed.py":12:0)
