"""Eager's memory-overlap verdict for in-place and ``out=`` writes on lazy tensors.

A functional graph has no memory, so an in-place op reading a view of the
tensor it writes (``b.add_(b.t())``, ``torch.maximum(b[1], b, out=b)``) would
compute a clean answer where eager raises "some elements of the input tensor
and the written-to tensor refer to a single memory location". Eager's
TensorIterator asks ATen's ``get_overlap_status`` for each input against the
output and refuses a partial overlap; this module answers the same question
from the lazy views' layouts (their view chains replayed on a meta tensor give
the storage offsets and strides eager's tensors would have).
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import (
    is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense,
)

PARTIAL_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
    "single memory location. Please clone() the tensor before performing the operation."
)


def _layout(t: Any) -> torch.Tensor:
    """A meta tensor with ``t``'s sizes, strides and storage offset in its base storage."""
    base = t._lz_storage.value.meta
    m = torch.empty_strided(base.shape, base.stride, dtype=base.dtype, device="meta")
    for step in t._lz_view:
        m = step.op(m, *step.rest, **step.kwargs)
    return m


def partially_overlaps(out: Any, other: Any) -> bool:
    """ATen's ``get_overlap_status(out, other) == PARTIAL`` for two lazy tensors."""
    if out is other or out._lz_storage is not other._lz_storage or out.numel() == 0 or other.numel() == 0:
        return False
    a, b = _layout(out), _layout(other)
    if not is_non_overlapping_and_dense(a) or not is_non_overlapping_and_dense(b):
        return False  # TOO_HARD: eager does not check, and neither is it checked here
    size = a.element_size()
    a0, b0 = a.storage_offset() * size, b.storage_offset() * size
    a1, b1 = a0 + a.numel() * size, b0 + b.numel() * size
    if (a0, a1) == (b0, b1):
        return a.stride() != b.stride()
    return a0 < b1 and b0 < a1


def check_no_partial_overlap(targets: list[Any], inputs: list[Any]) -> None:
    """Raise eager's RuntimeError when an input partially overlaps a written tensor."""
    for out in targets:
        for other in inputs:
            if partially_overlaps(out, other):
                raise RuntimeError(PARTIAL_OVERLAP)
