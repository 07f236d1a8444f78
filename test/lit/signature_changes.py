# RUN: %PYTHON %s | FileCheck %s
# The name is a structural hash: the same program on another shape, or with
# another op, is a different function; the same program again is not.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")


def f(x):
    return (x * x).sum(0)


a = emit([f(torch.randn(3, 4).to("lazy"))])
b = emit([f(torch.randn(3, 4).to("lazy"))])
c = emit([f(torch.randn(5, 4).to("lazy"))])
d = emit([(torch.randn(3, 4).to("lazy") + 2).sum(0)])
print("same program, same name:", a.func_name == b.func_name)
print("other shape, other name:", a.func_name != c.func_name)
print("other op, other name:", a.func_name != d.func_name)

# CHECK: // signature: @[[A:lazy_graph_[0-9a-f]+]](device_data[3, 4]:float32) -> ([4]:float32)
# CHECK: // signature: @[[A]](device_data[3, 4]:float32) -> ([4]:float32)
# CHECK: // signature: @lazy_graph_{{[0-9a-f]+}}(device_data[5, 4]:float32) -> ([4]:float32)
# CHECK: func.func @lazy_graph_{{[0-9a-f]+}}(%arg0: !torch.vtensor<[5,4],f32>
# CHECK: same program, same name: True
# CHECK: other shape, other name: True
# CHECK: other op, other name: True
