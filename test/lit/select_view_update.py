# RUN: %PYTHON %s | FileCheck %s
# Writing through an indexing view: the row is taken with select, updated,
# and scattered back into the base with select_scatter; a slice the same way
# with slice_scatter.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit_step

lazy_core.init("eager")
x = torch.randn(3, 4).to("lazy")
x[1].mul_(10)
emit_step()
x[:, 1:3].zero_()
emit_step()

# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[3,4],f32> {{.*}}, %arg1: !torch.vtensor<[1],si64> {{.*}}) -> !torch.vtensor<[3,4],f32>
# CHECK: %[[ROW:[0-9]+]] = torch.aten.select.int %arg0, %int0{{[_0-9]*}}, %int1{{[_0-9]*}} : !torch.vtensor<[3,4],f32>, !torch.int, !torch.int -> !torch.vtensor<[4],f32>
# CHECK: %[[NEW:[0-9]+]] = torch.aten.mul.Scalar %[[ROW]], %{{[0-9]+}} : !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
# CHECK: %[[OUT:[0-9]+]] = torch.aten.select_scatter %arg0, %[[NEW]], %{{.*}} : !torch.vtensor<[3,4],f32>, !torch.vtensor<[4],f32>, !torch.int, !torch.int -> !torch.vtensor<[3,4],f32>
# CHECK: return %[[OUT]]
# CHECK: func.func
# CHECK: %[[COLS:[0-9]+]] = torch.aten.slice.Tensor %arg0, {{.*}} -> !torch.vtensor<[3,2],f32>
# CHECK: %[[Z:[0-9]+]] = torch.aten.zero %[[COLS]] : !torch.vtensor<[3,2],f32> -> !torch.vtensor<[3,2],f32>
# CHECK: torch.aten.slice_scatter %arg0, %[[Z]], {{.*}} : !torch.vtensor<[3,4],f32>, !torch.vtensor<[3,2],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[3,4],f32>
