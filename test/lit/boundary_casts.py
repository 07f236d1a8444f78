# RUN: %PYTHON %s | FileCheck %s
# A backend whose runtime cannot pass bf16 buffers asks for boundary casts:
# arguments and results are f32 at the function boundary and cast to and
# from bf16 inside, so the computation itself still runs in bf16.
import torch
import lazy_core
from lazy_mlir import lowering
from lazy_core.graph import build_graph
from lazy_mlir.tools.lit_helpers import print_computation

lazy_core.init("eager")
x = torch.randn(2, 3, dtype=torch.bfloat16).to("lazy")
y = x * x
computation = lowering.lower_graph(build_graph([y._lz_value()]), boundary_casts={torch.bfloat16: torch.float32})
print_computation(computation, locations=False)
print("args:", [(a.dtype, a.logical_dtype) for a in computation.args])

# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2,3],f32>
# CHECK: %[[IN:[0-9]+]] = torch.aten._to_copy %arg0, %int15{{.*}} : !torch.vtensor<[2,3],f32>, {{.*}} -> !torch.vtensor<[2,3],bf16>
# CHECK: %[[SQ:[0-9]+]] = torch.aten.mul.Tensor %[[IN]], %[[IN]] : !torch.vtensor<[2,3],bf16>, !torch.vtensor<[2,3],bf16> -> !torch.vtensor<[2,3],bf16>
# CHECK: %[[OUT:[0-9]+]] = torch.aten._to_copy %[[SQ]], %int6{{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: return %[[OUT]] : !torch.vtensor<[2,3],f32>
# CHECK: args: [(torch.float32, torch.bfloat16)]
