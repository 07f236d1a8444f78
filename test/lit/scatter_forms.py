# RUN: %PYTHON %s | FileCheck %s
# Scatters torch-mlir's lowering cannot take as recorded: one into a 0-d tensor goes
# through its 1-element vector (IREE rejects a 0-d scatter), and the scatter a
# decomposition emits with the user's negative dim gets a non-negative one (torch-mlir
# took -1 as an unsigned size and the process died).
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
s = torch.tensor(5.0).to("lazy")
y = s.scatter_add(0, torch.tensor(0).to("lazy"), torch.tensor(2.0).to("lazy"))
emit_step()
x = torch.zeros(2, 3).to("lazy")
z = x.scatter(-1, torch.tensor([[1, 0, 1], [2, 2, 0]]).to("lazy"), torch.ones(2, 3).to("lazy"), reduce="add")
emit_step()

# CHECK: func.func
# CHECK: %[[X:[0-9]+]] = torch.aten.reshape %arg{{[0-9]+}}, %{{[0-9]+}} : !torch.vtensor<[],f32>, !torch.list<int> -> !torch.vtensor<[1],f32>
# CHECK: %[[I:[0-9]+]] = torch.aten.reshape %{{[0-9]+}}, %{{[0-9]+}} : !torch.vtensor<[],si64>, !torch.list<int> -> !torch.vtensor<[1],si64>
# CHECK: %[[ONE:[0-9]+]] = torch.aten.scatter_add %[[X]], %int0{{[_0-9]*}}, %[[I]], %{{[0-9]+}} : !torch.vtensor<[1],f32>, !torch.int, !torch.vtensor<[1],si64>, !torch.vtensor<[1],f32> -> !torch.vtensor<[1],f32>
# CHECK: %[[OUT:[0-9]+]] = torch.aten.reshape %[[ONE]], %{{[0-9]+}} : !torch.vtensor<[1],f32>, !torch.list<int> -> !torch.vtensor<[],f32>
# CHECK: return %{{[0-9]+}}, %[[OUT]]
# CHECK: func.func
# CHECK-NOT: torch.constant.int -1
# CHECK: torch.aten.scatter_reduce.two %arg{{[0-9]+}}, %int1{{[_0-9]*}}, {{.*}} -> !torch.vtensor<[2,3],f32>
