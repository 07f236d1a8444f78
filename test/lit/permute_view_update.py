# RUN: %PYTHON %s | FileCheck %s
# An in-place op on a view updates its base through the inverse view op:
# x.permute(1, 2, 0).add_(42) gives permute, add and the inverse permute.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
x = torch.randn(2, 3, 4).to("lazy")
x.permute(1, 2, 0).add_(42)
emit_step()

# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[2,3,4],f32> {{.*}}) -> !torch.vtensor<[2,3,4],f32>
# CHECK: %[[P:.+]] = torch.prim.ListConstruct %int1{{[_0-9]*}}, %int2{{[_0-9]*}}, %int0{{[_0-9]*}} :
# CHECK: %[[V:[0-9]+]] = torch.aten.permute %arg0, %[[P]] : !torch.vtensor<[2,3,4],f32>, !torch.list<int> -> !torch.vtensor<[3,4,2],f32>
# CHECK: %[[A:[0-9]+]] = torch.aten.add.Scalar %[[V]], %{{.*}} : !torch.vtensor<[3,4,2],f32>, !torch.int, !torch.int -> !torch.vtensor<[3,4,2],f32>
# CHECK: %[[INV:.+]] = torch.prim.ListConstruct %int2{{[_0-9]*}}, %int0{{[_0-9]*}}, %int1{{[_0-9]*}} :
# CHECK: %[[B:[0-9]+]] = torch.aten.permute %[[A]], %[[INV]] : !torch.vtensor<[3,4,2],f32>, !torch.list<int> -> !torch.vtensor<[2,3,4],f32>
# CHECK: return %[[B]] : !torch.vtensor<[2,3,4],f32>
