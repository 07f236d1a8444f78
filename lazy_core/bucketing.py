"""Padding a varying dimension up to a few fixed sizes ("buckets").

Automatic dynamic dimensions (docs/dynamic-shapes.md) make most loops over
varying sizes compile two or three graphs. Bucketing is the other answer, for
a backend that takes static shapes only (``supports_dynamic_shapes`` false),
for ``LAZY_DYNAMIC=0``, or where static code is measurably faster: pad the
varying dimension up to the next bucket, so the program only ever sees as
many shapes as there are buckets, and each compiles once.

The trade-off, which is the caller's to weigh:

* Padding is only correct where the op's semantics let the padded positions
  be ignored: an attention mask, a loss with ``ignore_index`` or a masked
  mean, a sum of zeros. Anything that mixes positions (a mean over the padded
  dimension, a softmax without a mask, batch norm's statistics) changes its
  values. This module cannot know which; it pads and returns the mask.
* Padded positions are computed and thrown away: a length just past a bucket
  costs up to the bucket's size (about 2x in the worst case with powers of
  two; finer buckets mean more compiles).

Used this way (the labels' padding is ignored by the loss)::

    ids, mask = bucketing.pad_to_bucket(ids, dim=1, value=pad_id)
    labels, _ = bucketing.pad_to_bucket(labels, dim=1, value=-100)
    out = model(ids.to("lazy"), attention_mask=mask.to("lazy"))

PyTorch/XLA's guidance for TPUs is the same idea (pad to a few sizes); this
helper only makes the mask and the sizes explicit.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["bucket_size", "pad_to_bucket"]

#: Smallest bucket of the default (power-of-two) ladder.
MIN_BUCKET = 8


def bucket_size(n: int, buckets: Sequence[int] | None = None) -> int:
    """The smallest bucket that holds ``n``: from ``buckets`` (sorted or not),
    or the next power of two no smaller than ``MIN_BUCKET`` by default.

    Raises ValueError if ``n`` is negative or larger than every bucket (a
    silently truncated sequence would be a wrong value).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"bucket_size: the size must be a non-negative int, got {n!r}")
    if buckets is None:
        size = MIN_BUCKET
        while size < n:
            size *= 2
        return size
    ladder = sorted(int(b) for b in buckets)
    if not ladder or ladder[0] < 1:
        raise ValueError(f"bucket_size: buckets must be positive sizes, got {list(buckets)!r}")
    for b in ladder:
        if b >= n:
            return b
    raise ValueError(f"bucket_size: {n} is larger than the largest bucket ({ladder[-1]}); add a bucket")


def pad_to_bucket(x: torch.Tensor, dim: int, buckets: Sequence[int] | None = None, *,
                  value: float | int | bool = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` padded with ``value`` at the end of ``dim`` up to ``bucket_size``,
    and a bool mask of ``x``'s length along that dim (True: a real position),
    shaped ``(x.shape[:dim+1])`` so it broadcasts as an attention mask.

    Runs wherever ``x`` lives (pad it on the CPU before ``.to("lazy")`` to
    keep the varying size out of the lazy graph entirely).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"pad_to_bucket: expected a tensor, got {type(x).__name__}")
    if x.dim() == 0:
        raise ValueError("pad_to_bucket: a 0-d tensor has no dimension to pad")
    d = dim + x.dim() if dim < 0 else dim
    if not 0 <= d < x.dim():
        raise IndexError(f"pad_to_bucket: dim {dim} is out of range for a {x.dim()}-d tensor")
    n = x.shape[d]
    size = bucket_size(n, buckets)
    mask = torch.zeros(*x.shape[:d], size, dtype=torch.bool, device=x.device)
    mask.narrow(d, 0, n).fill_(True)
    if size == n:
        return x, mask
    pad_shape = list(x.shape)
    pad_shape[d] = size - n
    pad = torch.full(pad_shape, value, dtype=x.dtype, device=x.device)
    return torch.cat([x, pad], d), mask
