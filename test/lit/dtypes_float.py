# RUN: %PYTHON %s | FileCheck %s
# Half and bfloat16 keep their element types through the graph; mixing f16
# with f32 promotes to f32 as PyTorch does, and an explicit .float() is a
# _to_copy to dtype 6 (float32).
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
h = torch.randn(2, 3, dtype=torch.float16).to("lazy")
b = torch.randn(2, 3, dtype=torch.bfloat16).to("lazy")
f = torch.randn(2, 3).to("lazy")
emit([h * h, b + b, h + f, b.float()])

# CHECK: // signature: @{{.*}}(device_data[2, 3]:float16, device_data[2, 3]:bfloat16, device_data[2, 3]:float32) -> ([2, 3]:float16, [2, 3]:bfloat16, [2, 3]:float32, [2, 3]:float32)
# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[2,3],f16> {{.*}}, %arg1: !torch.vtensor<[2,3],bf16> {{.*}}, %arg2: !torch.vtensor<[2,3],f32> {{.*}}) -> (!torch.vtensor<[2,3],f16>, !torch.vtensor<[2,3],bf16>, !torch.vtensor<[2,3],f32>, !torch.vtensor<[2,3],f32>)
# CHECK: torch.aten.mul.Tensor %arg0, %arg0 : !torch.vtensor<[2,3],f16>, !torch.vtensor<[2,3],f16> -> !torch.vtensor<[2,3],f16>
# CHECK: torch.aten.add.Tensor %arg1, %arg1, %{{.*}} : !torch.vtensor<[2,3],bf16>, !torch.vtensor<[2,3],bf16>, !torch.int -> !torch.vtensor<[2,3],bf16>
# CHECK: torch.aten.add.Tensor %arg0, %arg2, %{{.*}} : !torch.vtensor<[2,3],f16>, !torch.vtensor<[2,3],f32>, !torch.int -> !torch.vtensor<[2,3],f32>
# CHECK: %[[F32:.+]] = torch.constant.int 6
# CHECK: torch.aten._to_copy %arg1, %[[F32]], {{.*}} : !torch.vtensor<[2,3],bf16>, {{.*}} -> !torch.vtensor<[2,3],f32>
