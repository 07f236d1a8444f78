# RUN: %PYTHON %s | FileCheck %s
# List-of-tensor operands (cat, stack) become torch.prim.ListConstruct of
# vtensors.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
z = torch.randn(3, 4).to("lazy")
w = torch.randn(3, 4).to("lazy")
emit([torch.cat([z, w], 0), torch.stack([z, w], 1)])

# CHECK: %[[L:[0-9]+]] = torch.prim.ListConstruct %arg0, %arg1 : (!torch.vtensor<[3,4],f32>, !torch.vtensor<[3,4],f32>) -> !torch.list<vtensor>
# CHECK: torch.aten.cat %[[L]], %int0{{.*}} : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[6,4],f32>
# CHECK: %[[L2:[0-9]+]] = torch.prim.ListConstruct %arg0, %arg1 :
# CHECK: torch.aten.stack %[[L2]], %int1{{.*}} : !torch.list<vtensor>, !torch.int -> !torch.vtensor<[3,2,4],f32>
