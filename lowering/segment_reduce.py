"""``segment_reduce`` over the first axis, as masked reductions of every segment at once.

No torch-dialect op, so every call ran eagerly (the OpInfos ``_segment_reduce.lengths`` and
``.offsets``). The segments are data (``lengths``, or ``offsets`` with one more entry); the
result has one row per segment, a shape known when tracing. Segment ``s`` covers the rows
``start_s <= k < end_s`` (``end = cumsum(lengths)``, or ``offsets[1:]``), and a mask of them
selects what eager's loop reads, starting from ``initial`` (if given) as eager does:

* ``max``/``min``: the extreme of ``initial`` (else -inf/+inf) and the segment, NaN if a NaN is
  read (eager's ``isnan(x) ? x : max(acc, x)``);
* ``sum``/``prod``: ``initial`` (else 0/1) combined with the segment;
* ``mean``: ``(initial + sum) / length``; an empty segment is ``initial`` (else 0 / 0, NaN).

Eager's argument checks on the data (lengths negative or not adding up to the axis when not
``unsafe``; a negative offsets step) are lazy_core/checks.py's device-side checks. Offsets past
the data read memory out of bounds in eager (undefined); here only rows that exist.
"""

from __future__ import annotations

import math

import torch

__all__ = ["applies_call", "segment_reduce"]

_REDUCTIONS = ("max", "min", "sum", "prod", "mean")


def applies_call(args: tuple, kwargs: dict) -> bool:
    data = args[0] if args else kwargs.get("data")
    reduce = args[1] if len(args) > 1 else kwargs.get("reduce")
    lengths, offsets = kwargs.get("lengths"), kwargs.get("offsets")
    segments = lengths if lengths is not None else offsets
    return (isinstance(data, torch.Tensor) and data.dtype in (torch.float32, torch.float64) and data.dim() >= 1
            and reduce in _REDUCTIONS and kwargs.get("indices") is None and kwargs.get("axis", 0) in (0, -data.dim())
            and isinstance(segments, torch.Tensor) and segments.dim() == 1 and (lengths is None) != (offsets is None)
            and not segments.dtype.is_floating_point and (lengths is not None or segments.numel() >= 1)
            and segments.numel() * max(data.numel(), 1) <= 1 << 24)


def segment_reduce(data: torch.Tensor, reduce: str, *, lengths: torch.Tensor | None = None,
                   indices: torch.Tensor | None = None, offsets: torch.Tensor | None = None, axis: int = 0,
                   unsafe: bool = False, initial: float | None = None) -> torch.Tensor:
    if lengths is not None:
        end = torch.cumsum(lengths, 0)
        start = end - lengths
    else:
        start, end = offsets[:-1], offsets[1:]
    count = (end - start).to(data.dtype)
    k = torch.arange(data.shape[0], device=data.device)
    mask = (start.unsqueeze(1) <= k) & (k < end.unsqueeze(1))  # [S, K]
    mask = mask.reshape(*mask.shape, *([1] * (data.dim() - 1)))  # [S, K, ...]
    x = data.unsqueeze(0)  # [1, K, ...]
    if reduce in ("max", "min"):
        fill = (-math.inf if reduce == "max" else math.inf) if initial is None else float(initial)
        nan = (mask & torch.isnan(x)).any(1)
        picked = torch.where(mask & ~torch.isnan(x), x, fill)
        value = picked.amax(1) if reduce == "max" else picked.amin(1)
        if x.shape[1] == 0:
            value = torch.full_like(nan, fill, dtype=data.dtype)
        value = torch.maximum(value, torch.full_like(value, fill)) if reduce == "max" else torch.minimum(
            value, torch.full_like(value, fill))
        return torch.where(nan, torch.nan, value)
    if reduce == "prod":
        start_value = 1.0 if initial is None else float(initial)
        return torch.where(mask, x, 1.0).prod(1) * start_value
    total = torch.where(mask, x, 0.0).sum(1) + (0.0 if initial is None else float(initial))
    if reduce == "sum":
        return total
    count = count.reshape(-1, *([1] * (data.dim() - 1)))
    mean = total / count
    return mean if initial is None else torch.where(count == 0, float(initial), mean)
