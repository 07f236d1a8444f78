"""``searchsorted`` and ``bucketize`` as eager's binary search, step for step.

Eager runs one kernel for both: per value, a lower bound (``!(seq[mid] >= v)`` moves right) or
an upper bound (``!(seq[mid] > v)``) over ``[0, n)``. torch-mlir has no ``searchsorted`` (every
graph holding one ran eagerly), and its ``bucketize`` returned the length of the boundaries
for every value once they held a NaN, which a sorted tensor does at its end (``torch.sort``
puts NaN last): ``bucketize([0, 1.5], [1, 2, 2, nan, nan])`` was ``[5, 5]`` on reference and
iree-cpu, eager ``[0, 1]``. With a NaN the predicate is not monotone, so counting the smaller
boundaries would differ from eager too; this replays the search itself: ``floor(log2 n) + 1``
rounds of a gather at the midpoint and a ``where`` on the two bounds, exact for NaN, ties and
unsorted boundaries alike.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["bucketize", "searchsorted"]


def _search(seq: torch.Tensor, values: torch.Tensor, right: bool, out_int32: bool) -> torch.Tensor:
    n = seq.shape[-1]
    dtype = torch.int32 if out_int32 else torch.int64
    start = torch.zeros(values.shape, dtype=torch.int64, device=values.device)
    if n == 0:
        return start.to(dtype)
    end = torch.full(values.shape, n, dtype=torch.int64, device=values.device)
    # Eager's common dtype, a 0-d ``values`` taking part as a number does: a 0-d int64 -1
    # against uint8 boundaries is 255, bucket 4 (``promote_types`` compared -1, bucket 0;
    # adversarial sweep).
    common = torch.result_type(seq, values)
    seq, values = seq.to(common), values.to(common)
    for _ in range(n.bit_length()):  # floor(log2 n) + 1 rounds: every search has ended
        active = start < end
        mid = (start + end) // 2
        at = mid.clamp(max=n - 1)
        if seq.dim() == 1:
            mid_value = seq[at] if at.dim() else seq[at.reshape(1)].reshape(())
        else:
            mid_value = seq.gather(-1, at)
        right_of = ~(mid_value > values) if right else ~(mid_value >= values)
        start = torch.where(active & right_of, mid + 1, start)
        end = torch.where(active & ~right_of, mid, end)
    return start.to(dtype)


def searchsorted(seq: torch.Tensor, values: Any, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: torch.Tensor | None = None) -> torch.Tensor:
    if sorter is not None:
        seq = seq.gather(-1, sorter)
    if side is not None:
        right = side == "right"
    if not isinstance(values, torch.Tensor):
        values = torch.scalar_tensor(values, dtype=seq.dtype, device=seq.device)
    return _search(seq, values, right, out_int32)


def bucketize(values: Any, boundaries: torch.Tensor, *, out_int32: bool = False, right: bool = False) -> torch.Tensor:
    if not isinstance(values, torch.Tensor):
        values = torch.scalar_tensor(values, dtype=boundaries.dtype, device=boundaries.device)
    return _search(boundaries, values, right, out_int32)
