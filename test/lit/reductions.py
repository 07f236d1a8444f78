# RUN: %PYTHON %s | FileCheck %s
# Reductions: full sum to a 0-d tensor, keepdim sums, mean, amax, argmax
# (si64 result), var with a correction (scaled, see below), and max(dim) with two results.
# argmax and max(dim) are NaN-aware decompositions (lowering/decompositions.py):
# the first NaN along the dim wins, else the first maximum, as on the CPU.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
z = torch.randn(3, 4).to("lazy")
values, indices = z.max(1)
emit([z.sum(), z.sum(1, keepdim=True), z.mean(0), z.amax(1), z.argmax(1), z.var(1), values, indices])

# CHECK: // signature: @{{.*}}(device_data[3, 4]:float32) -> ([]:float32, [3, 1]:float32, [4]:float32, [3]:float32, [3]:int64, [3]:float32, [3]:float32, [3]:int64)
# CHECK: torch.aten.sum %arg0, %none{{.*}} : !torch.vtensor<[3,4],f32>, !torch.none -> !torch.vtensor<[],f32>
# CHECK: torch.aten.sum.dim_IntList %arg0, %{{[0-9]+}}, %true{{.*}} -> !torch.vtensor<[3,1],f32>
# CHECK: torch.aten.mean.dim %arg0, %{{[0-9]+}}, %false{{.*}} -> !torch.vtensor<[4],f32>
# CHECK: torch.aten.amax %arg0, {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: torch.aten.isnan %arg0
# CHECK: torch.aten.where.self
# CHECK: %[[ARGMAX:[0-9]+]] = torch.aten.rsub.Scalar {{.*}} -> !torch.vtensor<[3],si64>
# var of float32: rows with a value past 2**40 are scaled by 2**-80 first and the result
# scaled back, twice by 2**80 (lowering/decompositions.py _scaled_variance).
# CHECK: torch.aten.abs %arg0
# CHECK: torch.aten.gt.Scalar
# CHECK: %[[SCALED:[0-9]+]] = torch.aten.mul.Tensor %arg0,
# CHECK: %[[V:[0-9]+]] = torch.aten.var.correction %[[SCALED]], {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: %[[V1:[0-9]+]] = torch.aten.mul.Tensor %[[V]],
# CHECK: %[[VAR:[0-9]+]] = torch.aten.mul.Tensor %[[V1]],
# CHECK: %[[VALUES:[0-9]+]] = torch.aten.amax %arg0, {{.*}} -> !torch.vtensor<[3],f32>
# CHECK: torch.aten.isnan %arg0
# CHECK: %[[INDICES:[0-9]+]] = torch.aten.rsub.Scalar {{.*}} -> !torch.vtensor<[3],si64>
# CHECK: return {{.*}}, %[[ARGMAX]], %[[VAR]], %[[VALUES]], %[[INDICES]] :
