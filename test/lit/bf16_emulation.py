# RUN: %PYTHON %s | FileCheck %s
# bf16 emulation (lowering/bf16.py): every bf16 op computes in f32 and its
# result is rounded to bf16. "bits" rounds with integer ops on the f32 bits and
# passes bf16 across the boundary as int16 bits; "casts" rounds by a bf16
# round trip and passes f32 values. No other bf16 type is left in either.
import torch
import lazy_core
from lazy_mlir import lowering
from lazy_core.graph import build_graph
from lazy_mlir.tools.lit_helpers import print_computation

lazy_core.init("eager")
x = torch.randn(2, 3, dtype=torch.bfloat16).to("lazy")
y = (x * x).sum(1)
graph = build_graph([y._lz_value()])

bits = lowering.lower_graph(graph, emulate_bf16="bits")
print("// bits")
print_computation(bits, locations=False)
print("args:", [(a.dtype, a.logical_dtype) for a in bits.args])
print("results:", [(r.dtype, r.logical_dtype) for r in bits.results])
print("bf16 left:", "bf16" in bits.asm(locations=False))

# CHECK-LABEL: // bits
# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[2,3],si16>) -> !torch.vtensor<[2],si16>
# CHECK: torch.aten.__lshift__.Scalar {{.*}} -> !torch.vtensor<[2,3],si32>
# CHECK: %[[X:[0-9]+]] = torch.aten.view.dtype {{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: %[[SQ:[0-9]+]] = torch.aten.mul.Tensor %[[X]], %[[X]] : {{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.view.dtype %[[SQ]], {{.*}} -> !torch.vtensor<[2,3],si32>
# CHECK: torch.aten.bitwise_and.Scalar
# CHECK: torch.aten.isnan %[[SQ]]
# CHECK: torch.aten.masked_fill.Scalar
# CHECK: %[[R:[0-9]+]] = torch.aten.view.dtype {{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.sum.dim_IntList %[[R]], {{.*}} -> !torch.vtensor<[2],f32>
# CHECK: torch.aten.__rshift__.Scalar {{.*}} -> !torch.vtensor<[2],si32>
# CHECK: return {{.*}} : !torch.vtensor<[2],si16>
# CHECK: args: [(torch.int16, torch.bfloat16)]
# CHECK: results: [(torch.int16, torch.bfloat16)]
# CHECK: bf16 left: False

casts = lowering.lower_graph(graph, emulate_bf16="casts")
print("// casts")
print_computation(casts, locations=False)
print("args:", [(a.dtype, a.logical_dtype) for a in casts.args])

# CHECK-LABEL: // casts
# CHECK: func.func @{{.*}}(%arg0: !torch.vtensor<[2,3],f32>) -> !torch.vtensor<[2],f32>
# CHECK: %[[SQ:[0-9]+]] = torch.aten.mul.Tensor %arg0, %arg0 : {{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: %[[N:[0-9]+]] = torch.aten._to_copy %[[SQ]], %int15{{.*}} -> !torch.vtensor<[2,3],bf16>
# CHECK: %[[W:[0-9]+]] = torch.aten._to_copy %[[N]], %int6{{.*}} -> !torch.vtensor<[2,3],f32>
# CHECK: torch.aten.sum.dim_IntList %[[W]], {{.*}} -> !torch.vtensor<[2],f32>
# CHECK: args: [(torch.float32, torch.bfloat16)]
