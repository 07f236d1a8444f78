# RUN: %PYTHON %s | FileCheck %s
# nn.Linear -> ReLU -> nn.Linear on device lazy: weights are arguments, each
# Linear is a transpose and an addmm.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to("lazy")
x = torch.randn(3, 4).to("lazy")
emit([model(x)])

# CHECK: // signature: @{{.*}} -> ([3, 2]:float32)
# Arguments in first-use order: bias 2, bias 1, input, weight 1, weight 2.
# CHECK: func.func @{{[a-z_0-9]+}}(%arg0: !torch.vtensor<[2],f32>
# CHECK-SAME: %arg1: !torch.vtensor<[8],f32>
# CHECK-SAME: %arg2: !torch.vtensor<[3,4],f32>
# CHECK-SAME: %arg3: !torch.vtensor<[8,4],f32>
# CHECK-SAME: %arg4: !torch.vtensor<[2,8],f32>
# CHECK-SAME: -> !torch.vtensor<[3,2],f32>
# CHECK: %[[W1T:[0-9]+]] = torch.aten.t %arg3 : !torch.vtensor<[8,4],f32> -> !torch.vtensor<[4,8],f32>
# CHECK: %[[H:[0-9]+]] = torch.aten.addmm %arg1, %arg2, %[[W1T]], {{.*}} : !torch.vtensor<[8],f32>, !torch.vtensor<[3,4],f32>, !torch.vtensor<[4,8],f32>, !torch.int, !torch.int -> !torch.vtensor<[3,8],f32>
# relu is eager's kernel, masked_fill(x < 0, 0): -0.0 and NaN stay (lowering/decompositions.py).
# CHECK: %[[NEG:[0-9]+]] = torch.aten.lt.Tensor %[[H]], %{{[0-9]+}} : !torch.vtensor<[3,8],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[3,8],i1>
# CHECK: %[[R:[0-9]+]] = torch.aten.masked_fill.Scalar %[[H]], %[[NEG]], {{.*}} -> !torch.vtensor<[3,8],f32>
# CHECK: %[[W2T:[0-9]+]] = torch.aten.t %arg4 : !torch.vtensor<[2,8],f32> -> !torch.vtensor<[8,2],f32>
# CHECK: %[[OUT:[0-9]+]] = torch.aten.addmm %arg0, %[[R]], %[[W2T]], {{.*}} -> !torch.vtensor<[3,2],f32>
# CHECK: return %[[OUT]] : !torch.vtensor<[3,2],f32>
