"""``nn.Embedding(max_norm=...)``'s row renormalization as a function of the weight.

``F.embedding`` with ``max_norm`` first calls ``embedding_renorm_(weight, indices, max_norm,
norm_type)``, which torch-mlir cannot lower: every forward of such an embedding ran it eagerly
and cut the step's graph in two (adversary round 40). Eager's CPU kernel visits each distinct
index once and scales that row by ``max_norm / (norm + 1e-7)`` when its norm exceeds
``max_norm``; the norm is the row's ``norm(norm_type)`` (in the weight's dtype) read as a
double, and the row is multiplied in place by that double.

Written here for every row at once: which rows the indices name is a scatter of flags (rows
named twice are still scaled once), and indices outside the table mark nothing (the
``embedding`` that follows raises eager's error for them, and no write lands out of bounds).
The norms of all rows are one reduction, which may round an ulp apart from eager's row by row.

Half-precision rows are scaled as eager's ``row *= scale`` does: the double scale becomes an
operand of the row's dtype first (TensorIterator casts the scalar to the common dtype), then
the product is taken in float32 and rounded once. Multiplying by the float32 scale left 7 of 10
bfloat16 rows an ulp off (adversary round 41). Under bf16 emulation (``lowering/bf16.py``) the
weight arrives as float32 values and a cast to bfloat16 inside the decomposition is not kept, so
the norm and the scale are rounded to bfloat16 on their float64 bits (``bfloat16_in_float64``).
"""

from __future__ import annotations

import torch

_HALF = (torch.float16, torch.bfloat16)

#: bfloat16's smallest normal magnitude, its subnormal spacing, and where rounding overflows.
_BF16_MIN_NORMAL = 2.0 ** -126
_BF16_SUBNORMAL_STEP = 2.0 ** -133
_BF16_OVERFLOW = 2.0 ** 128
#: float64 fraction bits below bfloat16's seven.
_DROPPED = 52 - 7


def bfloat16_in_float64(x: torch.Tensor) -> torch.Tensor:
    """float64 ``x`` rounded to the nearest bfloat16 (ties to even), as float64: eager's
    ``x.to(torch.bfloat16)`` of a double, computed on the bits (no cast to fold away)."""
    bits = x.view(torch.int64)
    odd = (bits >> _DROPPED) & 1
    bits = ((bits + ((1 << (_DROPPED - 1)) - 1) + odd) >> _DROPPED) << _DROPPED
    rounded = bits.view(torch.float64)
    # Below bfloat16's normal range its spacing is fixed: a multiple of 2 ** -133, exact in float64.
    subnormal = torch.round(x * (1.0 / _BF16_SUBNORMAL_STEP)) * _BF16_SUBNORMAL_STEP
    rounded = torch.where(x.abs() < _BF16_MIN_NORMAL, subnormal, rounded)
    return torch.where(rounded.abs() >= _BF16_OVERFLOW, x * torch.inf, rounded)


def embedding_renorm(weight: torch.Tensor, indices: torch.Tensor, max_norm: float, norm_type: float,
                     logical_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The functional ``embedding_renorm``: ``weight`` with the named rows over ``max_norm`` scaled.

    ``logical_dtype`` is the weight's dtype as PyTorch has it (bfloat16 for the float32
    ``weight`` of bf16 emulation)."""
    dtype = logical_dtype or weight.dtype
    emulated = dtype == torch.bfloat16 and weight.dtype != dtype
    rows = weight.shape[0]
    flat = indices.reshape(-1)
    valid = (flat >= 0) & (flat < rows)
    safe = torch.where(valid, flat, torch.zeros_like(flat))
    named = torch.zeros(rows, dtype=torch.int32, device=weight.device)
    named = named.index_put((safe,), valid.to(torch.int32), accumulate=True) > 0
    if dtype in _HALF:  # accumulated in float32 and rounded once, as eager's norm kernel does
        norms = torch.linalg.vector_norm(weight.float(), ord=norm_type, dim=1)
        norms = bfloat16_in_float64(norms.double()) if emulated else norms.to(dtype).double()
    else:
        norms = torch.linalg.vector_norm(weight, ord=norm_type, dim=1).to(torch.float64)
    scale = max_norm / (norms + 1e-7)
    if emulated:
        scaled = weight * bfloat16_in_float64(scale).to(weight.dtype)[:, None]
    elif dtype in _HALF:
        scaled = (weight.float() * scale.to(dtype).float()[:, None]).to(dtype)
    else:
        scaled = weight * scale.to(dtype)[:, None]
    return torch.where((named & (norms > max_norm))[:, None], scaled, weight)
