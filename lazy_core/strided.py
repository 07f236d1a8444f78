"""``as_strided`` on lazy tensors with eager's storage semantics.

Eager ``as_strided(size, stride, offset)`` addresses the *storage* of its
input: the input's own shape, strides and view chain do not matter, except
that a missing ``storage_offset`` means the input's. The IR is functional
(values, no storage), and torch-mlir's importer reads an ``as_strided``
relative to the layout its FX metadata shows, which for an intermediate is
not eager's: ``x[1:].as_strided(...)``, ``x.t().as_strided(...)`` or an
``as_strided`` of a channels-last parameter compiled into wrong values
(torch-mlir e2e ``AtenAsStrided*``). So every ``as_strided`` is rebuilt on the
storage itself: the storage's whole value, permuted into memory order and
flattened (a 1-d tensor whose element ``a`` is storage address ``a``), then
``as_strided`` of that contiguous 1-d tensor, where values and storage agree.
The missing offset and eager's bounds check come from replaying the input's
view chain on a meta tensor laid out as the storage.

DDP's reducer lays every gradient out in a flat bucket and takes each
parameter's slot as ``bucket.as_strided(param.shape, contiguous strides,
offset)``; ``copy_`` into the slot and ``gradient_as_bucket_view`` write
through it. That case (contiguous target strides) becomes a ``slice`` and a
``view`` of the flat storage, view ops every backend lowers with inverses
(``slice_scatter``, ``view``), instead of ``as_strided``/``as_strided_scatter``,
which torch-mlir's importer and IREE reject. A storage that is not dense (its
value has overlapping or gapped strides) keeps the ``as_strided`` as recorded.
"""

from __future__ import annotations

from typing import Any

import torch

from . import fallback
from . import tensor as _t
from .ir import TensorMeta
from .views import ViewStep

aten = torch.ops.aten

__all__ = ["HANDLERS", "as_strided", "as_strided_copy", "dense", "memory_order"]


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


def memory_order(stride: tuple[int, ...], shape: tuple[int, ...]) -> list[int]:
    """The dims from the outermost in memory to the innermost (size-1 dims in place)."""
    return sorted(range(len(shape)), key=lambda d: (-stride[d] if shape[d] > 1 else 0, d))


def dense(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Whether a layout covers its storage exactly once (a permutation of contiguous strides)."""
    expected = 1
    for d in reversed(memory_order(stride, shape)):
        if shape[d] == 0:
            return False
        if shape[d] > 1:
            if stride[d] != expected:
                return False
            expected *= shape[d]
    return True


def _check_bounds(size: list[int], stride: list[int], offset: int, root: TensorMeta) -> None:
    """Eager's error for a view reaching past the end of the storage (meta tensors do not check)."""
    if _numel(size) == 0:
        return
    itemsize = torch.empty((), dtype=root.dtype).element_size()
    needed = (offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1) * itemsize
    have = root.numel() * itemsize
    if needed > have:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and "
                           f"itemsize {itemsize} requiring a storage size of {needed} are out of bounds for "
                           f"storage of size {have}")


def as_strided(func: Any, args: tuple, kwargs: dict) -> Any:
    """``aten.as_strided`` on a lazy tensor (special handler)."""
    bound = dict(zip(("self", "size", "stride", "storage_offset"), args))
    bound.update(kwargs)
    base = bound["self"]
    if not isinstance(base, _t.LazyTensor):
        return _t._view(func, _t.plan(func), args, kwargs)
    size = [int(s) for s in bound["size"]]
    stride = [int(s) for s in bound["stride"]]
    root = base._lz_storage.meta
    if _numel(root.shape) == 0:  # an empty storage (``x[False]``): any element is out of bounds
        _check_bounds(size, stride, int(bound.get("storage_offset") or 0), root)
    if not dense(root.shape, root.stride) or root.dtype in fallback.refused_dtypes():
        # (A dtype no backend compiles runs eagerly on the input's values.)
        return _t._view(func, _t.plan(func), args, kwargs)
    layout = torch.empty_strided(root.shape, root.stride, dtype=root.dtype, device="meta")
    for step in base._lz_view:  # where the input lies in the storage, as eager has it
        layout = step.op(layout, *step.rest, **step.kwargs)
    offset = bound.get("storage_offset")
    offset = layout.storage_offset() if offset is None else int(offset)
    _check_bounds(size, stride, offset, root)
    flat = _flat_storage(base._lz_storage, root)
    n = _numel(size)
    chunk = all(st == c for st, c, d in zip(stride, _contiguous_strides(size), size) if d > 1)
    if not chunk:
        return _t._view(func, _t.plan(func), (flat, size, stride, offset), {})
    part = _t.dispatch(aten.slice.Tensor, (flat, 0, offset, offset + n), {})
    return _t.dispatch(aten.view.default, (part, size), {})


def _flat_storage(storage: Any, root: TensorMeta) -> Any:
    """The storage as a lazy 1-d view in memory order (element ``a`` at address ``a``)."""
    n = root.numel()
    order = memory_order(root.stride, root.shape)
    steps: list[ViewStep] = []
    shape = tuple(root.shape)
    if order != list(range(len(shape))):
        steps.append(ViewStep(aten.permute.default, (order,), {}, shape))
        shape = tuple(shape[d] for d in order)
    if len(shape) != 1:
        steps.append(ViewStep(aten.reshape.default, ([n],), {}, shape))
    if not steps:
        return _t._new_tensor(storage, (), root)
    return _t._new_tensor(storage, tuple(steps), TensorMeta((n,), root.dtype, (1,)))


def as_strided_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    """``aten.as_strided_copy`` (special handler): a copy of ``as_strided`` above, so that it
    reads the storage as eager's does. Recorded as is, torch-mlir read its input's value as
    the storage (other elements for a view) and IREE failed to compile it (the OpInfo sweep)."""
    view = as_strided(aten.as_strided.default, args, kwargs)
    return _t.dispatch(aten.clone.default, (view,), {})


HANDLERS: dict[Any, Any] = {aten.as_strided.default: as_strided, aten.as_strided_copy.default: as_strided_copy}
