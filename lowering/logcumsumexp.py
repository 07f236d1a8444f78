"""``logcumsumexp`` as a scan of eager's pairwise ``log_add_exp``.

torch-mlir lowers ``logcumsumexp`` as ``log(cumsum(exp(x)))``. That is exact
only on paper: ``exp`` overflows above 88 (``logcumsumexp([100., 100.])``
was ``[inf, inf]``, eager ``[100, 100.69]``), underflows below -104 (``[-200,
0]`` gave ``-inf`` first) and rounds twice even in range: the first element,
which eager copies, came back as ``0.99999994`` for ``1.0`` and a following
``.to(torch.int64)`` then read 0 (fuzz seed 1202 program 542, reference).

Eager's CPU kernel (``ReduceOps.cpp``) folds ``acc = log_add_exp(x[i], acc)``
from ``acc = -inf``, with ``log_add_exp(x, y) = max + log1p(exp(min - max))``
and ``x`` itself when both are the same infinity (``inf - inf`` would be
NaN). The combine is associative, so it is computed here as an inclusive
parallel scan (Hillis and Steele): ``ceil(log2 n)`` steps, each combining
every element with the one ``2^k`` before it. Each step is elementwise work
over the whole tensor, so the graph stays one fused computation; the first
element is never combined and equals ``x[0]`` exactly, and every result is
within a few ulps of eager's (eager accumulates in double: at most
``log2 n`` roundings here). A half-precision input is scanned in float32 and
rounded once, as eager's accumulator is (``lowering/half_accumulation.py``).
Eager never returns -0.0 (its first step is ``log1p(0) + x``, and ``+0.0 +
-0.0`` is +0.0): every zero is written as +0.0 (a ``masked_fill``: lavapipe
folds ``y + 0.0`` to ``y``; fuzz seed 1202 program 763').
"""

from __future__ import annotations

import torch

__all__ = ["logcumsumexp"]


def _log_add_exp(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
    """Eager's ``_log_add_exp_helper(x, acc)``: NaN propagates (through
    maximum/minimum and the sum), equal infinities give ``x``."""
    hi = torch.maximum(x, acc)
    lo = torch.minimum(x, acc)
    combined = torch.log1p(torch.exp(lo - hi)) + hi
    return torch.where((lo != hi) | torch.isfinite(lo), combined, x)


def logcumsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``torch.logcumsumexp(x, dim)`` for a floating ``x`` (0-d: a copy, -0.0 kept, as eager)."""
    if x.dim() == 0:
        return x.clone()
    half = x.dtype in (torch.float16, torch.bfloat16)
    y = x.float() if half else x
    dim = dim % x.dim()
    n = x.shape[dim]
    step = 1
    while step < n:
        combined = _log_add_exp(y.narrow(dim, step, n - step), y.narrow(dim, 0, n - step))
        y = torch.cat([y.narrow(dim, 0, step), combined], dim)
        step *= 2
    y = y.masked_fill(y == 0, 0.0)
    return y.to(x.dtype) if half else y
