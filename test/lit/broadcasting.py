# RUN: %PYTHON %s | FileCheck %s
# Broadcasting stays implicit in the torch dialect: the result type carries
# the broadcast shape ([3,1] + [1,4] -> [3,4]; [2,3,4] - [4] -> [2,3,4]);
# an explicit expand is an op of its own.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
x = torch.randn(3, 1).to("lazy")
y = torch.randn(1, 4).to("lazy")
b = torch.randn(4).to("lazy")
t = torch.randn(2, 3, 4).to("lazy")
emit([x + y, t - b, x.expand(3, 4)])

# CHECK: torch.aten.add.Tensor %arg0, %arg1, %{{.*}} : !torch.vtensor<[3,1],f32>, !torch.vtensor<[1,4],f32>, !torch.int -> !torch.vtensor<[3,4],f32>
# CHECK: torch.aten.sub.Tensor %arg{{[0-9]}}, %arg{{[0-9]}}, %{{.*}} : !torch.vtensor<[2,3,4],f32>, !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[2,3,4],f32>
# CHECK: torch.aten.expand %arg0, %{{[0-9]+}}, %false{{[_0-9]*}} : !torch.vtensor<[3,1],f32>, !torch.list<int>, !torch.bool -> !torch.vtensor<[3,4],f32>
