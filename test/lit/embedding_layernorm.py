# RUN: %PYTHON %s | FileCheck %s
# Transformer building blocks: embedding lookup with si64 indices, layer norm
# (native_layer_norm with its mean and rstd results), GELU and a softmax.
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

# CHECK: torch.aten.embedding %arg{{[0-9]}}, %arg{{[0-9]}}, {{.*}} : !torch.vtensor<[10,8],f32>, !torch.vtensor<[2,3],si64>, !torch.int, !torch.bool, !torch.bool -> !torch.vtensor<[2,3,8],f32>
# CHECK: torch.aten.native_layer_norm {{.*}} -> !torch.vtensor<[2,3,8],f32>, !torch.vtensor<[2,3,1],f32>, !torch.vtensor<[2,3,1],f32>
# CHECK: torch.aten.gelu {{.*}} -> !torch.vtensor<[2,3,8],f32>
# CHECK: torch.aten._softmax {{.*}} -> !torch.vtensor<[2,3,8],f32>
