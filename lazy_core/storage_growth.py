"""Growing a storage that other tensors still view, as eager's ``resize_`` does.

Eager resizes an ``out=`` tensor that is too small by growing its storage in place
(``StorageImpl`` keeps its identity; only its buffer is reallocated, old elements first).
Every tensor that shares that storage keeps its sizes, strides and offset and from then on
reads the grown buffer: ``v = x.view(2); torch.add(ones(5), 1, out=x)`` leaves ``v`` reading
``x``'s first two new elements. A lazy storage has a fixed layout, so the grown value is a
new ``Storage``, and the tensors on the old one are moved onto it with two leading view
steps that carve the old layout out of the new one (``slice`` of the first elements, then
``view`` as the old shape). Both steps invert, so writes through those tensors reach the
grown storage too.

Note [Finding the tensors that share a storage]: a ``Storage`` does not know its tensors
(registering every view on the tracing hot path would cost every program for a case eager
itself deprecates). Growth is that rare case, so it asks the garbage collector for the
referrers of the storage: each live lazy tensor holds it in its instance ``__dict__``
(a container the collector tracks, since a ``Storage`` is a tracked object), and rewriting
``_lz_storage``/``_lz_view`` there is what an attribute assignment does.
"""

from __future__ import annotations

import gc
import math
from typing import Any

import torch

from .strided import _contiguous_strides
from .views import Storage, ViewStep

aten = torch.ops.aten


def tensors_sharing(storage: Storage, exclude: Any) -> list[dict]:
    """The instance dicts of the live lazy tensors on ``storage``, ``exclude`` left out."""
    mine = getattr(exclude, "__dict__", None)
    return [d for d in gc.get_referrers(storage)
            if type(d) is dict and d.get("_lz_storage") is storage and d is not mine]


def can_rebase(layout: Any, dtype: torch.dtype) -> bool:
    """Whether the old layout is the first elements of a grown contiguous storage, in the
    same order: a contiguous layout of the tensors' own dtype (not a ``view(dtype)``)."""
    return list(layout.stride) == _contiguous_strides(list(layout.shape)) and layout.dtype == dtype


def old_layout_steps(old_shape: tuple[int, ...], new_shape: tuple[int, ...]) -> tuple[ViewStep, ...]:
    """View steps from a grown contiguous storage of ``new_shape`` to the old layout
    ``old_shape`` it extends (its first elements, in row-major order)."""
    new_numel, old_numel = math.prod(new_shape), math.prod(old_shape)
    steps = []
    if len(new_shape) != 1:
        steps.append(ViewStep(aten.view.default, ([new_numel],), {}, tuple(new_shape)))
    steps.append(ViewStep(aten.slice.Tensor, (0, 0, old_numel, 1), {}, (new_numel,)))
    steps.append(ViewStep(aten.view.default, (list(old_shape),), {}, (old_numel,)))
    return tuple(steps)


def move_onto(sharers: list[dict], grown: Storage, steps: tuple[ViewStep, ...]) -> None:
    """Move the tensors (instance dicts) onto the grown storage, behind ``steps``."""
    for d in sharers:
        d["_lz_storage"] = grown
        d["_lz_view"] = steps + tuple(d.get("_lz_view", ()))
        d["_lz_cache"] = None
