"""``as_strided`` views that select a contiguous chunk become ``view(-1)``, ``slice``, ``view``.

DDP's reducer lays every gradient out in a flat bucket and takes each
parameter's slot as ``bucket.as_strided(param.shape, contiguous strides,
offset)``; ``copy_`` into the slot and ``gradient_as_bucket_view`` write
through it. Recorded as is, the graph holds ``as_strided`` and
``as_strided_scatter``, which torch-mlir's importer and IREE reject (the
step then ran op by op on the CPU). The same chunk as a reshape, a slice
and a reshape is made of view ops every backend lowers, and their inverses
are ``view`` and ``slice_scatter``.

Only the unambiguous case is rewritten: a contiguous base and contiguous
target strides, where ``as_strided`` means "elements ``[offset, offset +
numel)`` of the flattened base" whatever the storage layout. Any other
``as_strided`` is recorded as before.
"""

from __future__ import annotations

from typing import Any

import torch

from . import tensor as _t

aten = torch.ops.aten

__all__ = ["HANDLERS", "as_strided"]


def _contiguous_strides(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(d, 1)
    return strides[::-1]


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def as_strided(func: Any, args: tuple, kwargs: dict) -> Any:
    """``aten.as_strided`` on a lazy tensor (special handler)."""
    bound = dict(zip(("self", "size", "stride", "storage_offset"), args))
    bound.update(kwargs)
    base = bound["self"]
    size = [int(s) for s in bound["size"]]
    stride = [int(s) for s in bound["stride"]]
    offset = int(bound.get("storage_offset") or 0)
    n = _numel(size)
    chunk = (
        isinstance(base, _t.LazyTensor)
        and base.is_contiguous()
        and all(st == c for st, c, d in zip(stride, _contiguous_strides(size), size) if d > 1)
        and len(stride) == len(size)
        and 0 <= offset
        and offset + n <= base.numel()
    )
    if not chunk:
        return _t._view(func, _t.plan(func), args, kwargs)
    flat = _t.dispatch(aten.view.default, (base, [-1]), {})
    part = _t.dispatch(aten.slice.Tensor, (flat, 0, offset, offset + n), {})
    return _t.dispatch(aten.view.default, (part, size), {})


HANDLERS: dict[Any, Any] = {aten.as_strided.default: as_strided}
