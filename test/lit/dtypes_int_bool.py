# RUN: %PYTHON %s | FileCheck %s
# int64 tensors are si64, comparisons give i1 (bool) tensors, bool logic stays
# i1, where() selects between f32 values under an i1 mask, and integer
# division by a scalar is true division (f32 result).
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
i = torch.arange(6).reshape(2, 3).to("lazy")
f = torch.randn(2, 3).to("lazy")
m = i > 2
emit([i * 3, m, m & (f < 0), torch.where(m, f, 0.0), i / 4, m.sum()])

# CHECK: // signature: @{{.*}}(device_data[2, 3]:int64, {{.*}}) -> ([2, 3]:int64, [2, 3]:bool, [2, 3]:bool, [2, 3]:float32, [2, 3]:float32, []:int64)
# CHECK: torch.aten.mul.Scalar %arg0, %{{[0-9]+}} : !torch.vtensor<[2,3],si64>, !torch.int -> !torch.vtensor<[2,3],si64>
# CHECK: %[[M:[0-9]+]] = torch.aten.gt.Scalar %arg0, %{{[0-9]+}} : !torch.vtensor<[2,3],si64>, !torch.int -> !torch.vtensor<[2,3],i1>
# CHECK: %[[N:[0-9]+]] = torch.aten.lt.Scalar %arg{{[0-9]+}}, %{{.*}} : !torch.vtensor<[2,3],f32>, !torch.float -> !torch.vtensor<[2,3],i1>
# CHECK: torch.aten.bitwise_and.Tensor %[[M]], %[[N]] : !torch.vtensor<[2,3],i1>, !torch.vtensor<[2,3],i1> -> !torch.vtensor<[2,3],i1>
# CHECK: torch.aten.where.{{[A-Za-z]+}} %[[M]], {{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.div.Scalar %arg0, %{{[0-9]+}} : !torch.vtensor<[2,3],si64>, !torch.int -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.sum %[[M]], %{{.*}} : !torch.vtensor<[2,3],i1>, !torch.none -> !torch.vtensor<[],si64>
