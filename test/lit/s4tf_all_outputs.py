# RUN: %PYTHON %s | FileCheck %s
# The S4TF example with every intermediate still held by Python: w, x, y and
# z are all live, so all four are results (in creation order); x + x is not.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
a, b, c = (torch.full((2, 3), float(i)).to("lazy") for i in (1, 2, 3))

w = a + b
x = w - c
y = x + x + w
z = y + y
emit_step()

# CHECK: // signature: @lazy_graph_{{[0-9a-f]+}}({{.*}}) -> ([2, 3]:float32, [2, 3]:float32, [2, 3]:float32, [2, 3]:float32)
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}({{.*}}) -> (!torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>)
# CHECK: %[[W:[0-9]+]] = torch.aten.add.Tensor %arg0, %arg1
# CHECK: %[[X:[0-9]+]] = torch.aten.sub.Tensor %[[W]], %arg2
# CHECK: %[[XX:[0-9]+]] = torch.aten.add.Tensor %[[X]], %[[X]]
# CHECK: %[[Y:[0-9]+]] = torch.aten.add.Tensor %[[XX]], %[[W]]
# CHECK: %[[Z:[0-9]+]] = torch.aten.add.Tensor %[[Y]], %[[Y]]
# CHECK: return %[[W]], %[[X]], %[[Y]], %[[Z]] :
