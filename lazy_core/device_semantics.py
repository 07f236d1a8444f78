"""Ops whose result on device ``lazy`` is not eager CPU's, written as plain PyTorch.

Device ``lazy`` follows eager PyTorch, and where CPU and CUDA differ, library code decides by
device: transformers' MoE routing (``integrations/moe.py``) counts tokens per expert with
``torch.histc`` of an int tensor on every device but cpu and mps, which eager's CPU kernel
rejects ("histogram_cpu" not implemented for 'Int'). Such an op takes eager CUDA's semantics
here. The lowering decomposes the op into the same function (lowering/histc.py), and the
interpreter that runs a graph no backend compiled (``eager_backend.interpret``) calls it
instead of the CPU kernel, so both give one answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["INT_HISTC_TYPES", "KERNELS", "int_histc"]

aten = torch.ops.aten

#: Integer types eager CUDA's ``histc`` takes (AT_DISPATCH_ALL_TYPES).
INT_HISTC_TYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def int_histc(x: torch.Tensor, bins: int, lo: int, hi: int) -> torch.Tensor:
    """Eager CUDA's ``histc`` of integers over ``[lo, hi]`` (``lo < hi``, integers in ``x``'s
    range): ``x`` in ``[lo, hi]`` falls in bin ``(x - lo) * bins / (hi - lo)``, integer
    arithmetic in int64 (``getBin``), ``x == hi`` in the last bin; counts in ``x``'s type."""
    flat = x.reshape(-1).to(torch.int64)
    inside = (flat >= lo) & (flat <= hi)
    # Non-negative for the elements inside, so floor division is C's truncation. int64 holds
    # (x - lo) * bins unless an int64 input's range nears int64's ends (CUDA overflows there).
    pos = torch.where(inside, (flat - lo) * bins // (hi - lo), 0)
    pos = torch.where(pos == bins, bins - 1, pos)
    hits = (pos.unsqueeze(-1) == torch.arange(bins, device=x.device)) & inside.unsqueeze(-1)
    # Summed in int64 and then cast: the same counts modulo the type's width as CUDA's atomics.
    return hits.to(torch.int64).sum(0).to(x.dtype)


def _histc(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:  # noqa: A002
    if x.dtype in INT_HISTC_TYPES and int(min) < int(max):
        return int_histc(x, bins, int(min), int(max))
    return aten.histc.default(x, bins, min, max)


#: op -> what runs for it on CPU tensors instead of the op (same arguments).
KERNELS: dict[Any, Callable[..., Any]] = {aten.histc.default: _histc}
