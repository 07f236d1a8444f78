"""``torch.histc`` over a given range, as eager's bin arithmetic and a one-hot sum.

``aten.histc`` has no torch-dialect op, so every call ran eagerly (the OpInfo ``histc``).
Eager's kernel (``histogramdd_cpu_contiguous`` with ``LINEAR_INTERPOLATION``) skips elements
outside ``[min, max]`` (NaN included: ``!(x >= min && x <= max)``), puts element ``x`` in bin
``trunc((x - min) * bins / (max - min))`` computed in the input's dtype, in that order, and
moves ``x == max`` (bin ``bins``) into the last bin. The same arithmetic here, then each bin's
count is a sum of a comparison with the bin index (exact: at most 2**24 elements per bin for
float32, as eager's float counters).

Integer inputs follow eager CUDA (lazy_core/device_semantics.py: eager's CPU kernel has none,
and transformers' MoE routing takes ``histc`` of an int tensor on every device but cpu and mps):
``min`` and ``max`` truncated to integers, ``lazy_core.device_semantics.int_histc``.

Only a range given as ``min < max`` (finite Python numbers, constants of the graph: see
lazy_core/op_schema.py). With ``min == max`` (the default 0, 0) eager takes the data's own
range, and raises for an infinite one: that call runs eagerly (supported_ops.CALL_CONDITIONS; for
an integer input, eager CPU's "not implemented" error), as do calls whose one-hot table
(elements x bins) exceeds ``MAX_TABLE``.
"""

from __future__ import annotations

import math
import struct

import torch

from lazy_core.device_semantics import INT_HISTC_TYPES, int_histc

__all__ = ["MAX_TABLE", "applies_call", "histc"]

#: The most elements x bins compared.
MAX_TABLE = 1 << 24


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: object) -> object:
    return kwargs.get(name, args[i] if len(args) > i else default)


def applies_call(args: tuple, kwargs: dict) -> bool:
    x = _arg(args, kwargs, 0, "self", None)
    bins = _arg(args, kwargs, 1, "bins", 100)
    lo, hi = _arg(args, kwargs, 2, "min", 0), _arg(args, kwargs, 3, "max", 0)
    if not isinstance(x, torch.Tensor) or x.dtype not in (torch.float32, torch.float64, *INT_HISTC_TYPES):
        return False
    if not isinstance(bins, int) or bins < 1 or type(lo) not in (int, float) or type(hi) not in (int, float):
        return False
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    if x.dtype in INT_HISTC_TYPES:
        ends = _int_edges(lo, hi, x.dtype)
        return ends is not None and ends[0] < ends[1] and x.numel() * bins <= MAX_TABLE
    # Edges as eager casts them: min < max in the input's dtype (a range that rounds to one point
    # is widened by eager).
    edges = torch.tensor([lo, hi], dtype=x.dtype)
    return bool(edges[0] < edges[1]) and bool(torch.isfinite(edges).all()) and x.numel() * bins <= MAX_TABLE


def _int_edges(lo: float, hi: float, dtype: torch.dtype) -> tuple[int, int] | None:
    """``min`` and ``max`` as eager CUDA holds them for an integer input: truncated toward zero
    (``Scalar.to<int64_t>``). ``None`` outside the input type's range: eager CPU raises there
    (lazy_core's ``_check_numbers_fit`` raises that error first), CUDA would wrap."""
    info = torch.iinfo(dtype)
    ends = int(lo), int(hi)
    return ends if all(info.min <= v <= info.max for v in ends) else None


def _rounded(v: float, dtype: torch.dtype) -> float:
    """``v`` rounded to ``dtype`` (plain Python: this runs while tracing, on no tensor)."""
    return struct.unpack("f", struct.pack("f", v))[0] if dtype == torch.float32 else float(v)


def histc(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:  # noqa: A002
    if x.dtype in INT_HISTC_TYPES:
        return int_histc(x, bins, *_int_edges(min, max, x.dtype))
    flat = x.reshape(-1)
    lo, hi = _rounded(min, x.dtype), _rounded(max, x.dtype)
    width = _rounded(hi - lo, x.dtype)  # the difference of the edges in x's dtype, as eager's
    inside = (flat >= lo) & (flat <= hi)
    scaled = (flat - lo) * float(bins) / width
    # C's truncation, of the elements inside only (a NaN or a huge value is no integer).
    pos = torch.where(inside, scaled, 0.0).to(torch.int64)
    pos = torch.where(pos == bins, bins - 1, pos)
    hits = (pos.unsqueeze(-1) == torch.arange(bins, device=x.device)) & inside.unsqueeze(-1)
    return hits.to(x.dtype).sum(0)

