# RUN: %PYTHON %s | FileCheck %s
# Transformer building blocks: embedding lookup with si64 indices, layer norm
# (native_layer_norm with its mean and rstd results), GELU and a softmax.
# The embedding reads a safe index (lazy_core/checks.py): out-of-range entries
# become 0 and raise IndexError at the read instead of reading past the table.
import torch
import lazy_core
from lazy_mlir.tools.lit_helpers import emit

lazy_core.init("eager")
torch.manual_seed(0)
emb = torch.nn.Embedding(10, 8).to("lazy")
ln = torch.nn.LayerNorm(8).to("lazy")
idx = torch.tensor([[1, 2, 3], [4, 5, 6]]).to("lazy")
with torch.no_grad():
    h = torch.nn.functional.gelu(ln(emb(idx)))
    p = h.softmax(-1)
emit([p])

# CHECK: %[[LOW:[0-9]+]] = torch.aten.lt.Scalar %arg1
# CHECK: %[[HIGH:[0-9]+]] = torch.aten.ge.Scalar %arg1
# CHECK: %[[BAD:[0-9]+]] = torch.aten.logical_or %[[LOW]], %[[HIGH]]
# CHECK: %[[SAFE:[0-9]+]] = torch.aten.masked_fill.Scalar %arg1, %[[BAD]]
# CHECK: torch.aten.embedding %arg0, %[[SAFE]], {{.*}} : !torch.vtensor<[10,8],f32>, !torch.vtensor<[2,3],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[2,3,8],f32>
# CHECK: torch.aten.native_layer_norm {{.*}} -> !torch.vtensor<[2,3,8],f32>, !torch.vtensor<[2,3,1],f32>, !torch.vtensor<[2,3,1],f32>
# CHECK: torch.aten.gelu {{.*}} -> !torch.vtensor<[2,3,8],f32>
# CHECK: torch.aten._softmax {{.*}} -> !torch.vtensor<[2,3,8],f32>
