"""``nn.Embedding(max_norm=...)``'s row renormalization as a function of the weight.

``F.embedding`` with ``max_norm`` first calls ``embedding_renorm_(weight, indices, max_norm,
norm_type)``, which torch-mlir cannot lower: every forward of such an embedding ran it eagerly
and cut the step's graph in two (adversary round 40). Eager's CPU kernel visits each distinct
index once and scales that row by ``max_norm / (norm + 1e-7)`` when its norm exceeds
``max_norm``; the norm is the row's ``norm(norm_type)`` read as a double, and the row is
multiplied in place by that double.

Written here for every row at once: which rows the indices name is a scatter of flags (rows
named twice are still scaled once), and indices outside the table mark nothing (the
``embedding`` that follows raises eager's error for them, and no write lands out of bounds).
The norms of all rows are one reduction, which may round an ulp apart from eager's row by row;
half-precision rows are scaled in float32 and rounded once, also within an ulp of eager's.
"""

from __future__ import annotations

import torch

_HALF = (torch.float16, torch.bfloat16)


def embedding_renorm(weight: torch.Tensor, indices: torch.Tensor, max_norm: float, norm_type: float) -> torch.Tensor:
    """The functional ``embedding_renorm``: ``weight`` with the named rows over ``max_norm`` scaled."""
    rows = weight.shape[0]
    flat = indices.reshape(-1)
    valid = (flat >= 0) & (flat < rows)
    safe = torch.where(valid, flat, torch.zeros_like(flat))
    named = torch.zeros(rows, dtype=torch.int32, device=weight.device)
    named = named.index_put((safe,), valid.to(torch.int32), accumulate=True) > 0
    norms = torch.linalg.vector_norm(weight, ord=norm_type, dim=1).to(torch.float64)
    compute = torch.float32 if weight.dtype in _HALF else weight.dtype
    scale = (max_norm / (norms + 1e-7)).to(compute)
    scaled = (weight.to(compute) * scale[:, None]).to(weight.dtype)
    return torch.where((named & (norms > max_norm))[:, None], scaled, weight)
