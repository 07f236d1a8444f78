"""Eager's memory-overlap verdict for in-place and ``out=`` writes on lazy tensors.

A functional graph has no memory, so an in-place op reading a view of the
tensor it writes (``b.add_(b.t())``, ``torch.maximum(b[1], b, out=b)``) would
compute a clean answer where eager raises "some elements of the input tensor
and the written-to tensor refer to a single memory location". Eager's
TensorIterator asks ATen's ``get_overlap_status`` for each input against the
output and refuses a partial overlap; this module answers the same question
from the lazy views' layouts (their view chains replayed on a meta tensor give
the storage offsets and strides eager's tensors would have).

Kernels outside TensorIterator make their own checks (``gather``, ``take``,
``cat``, ``index_select``, ``kthvalue``, ... refuse an ``out=`` that overlaps an
input at all, ``torch.gather(x, 0, i, out=x)``); for those the CPU kernel is
asked, on stand-ins that share memory as the lazy tensors do.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._prims_common import (
    is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense,
)

from .op_schema import INDEX_ARGS as _INDEX_ARGS

PARTIAL_OVERLAP = (
    "unsupported operation: some elements of the input tensor and the written-to tensor refer to a "
    "single memory location. Please clone() the tensor before performing the operation."
)


def _layout(t: Any) -> torch.Tensor:
    """A meta tensor with ``t``'s sizes, strides and storage offset in its base storage."""
    base = t._lz_storage.meta
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


#: Stand-in storages of more elements than this are not made (the write goes unchecked).
_MAX_ELEMENTS = 1 << 20


def _lazy_tensors(x: Any) -> list[Any]:
    if hasattr(x, "_lz_storage"):
        return [x]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _lazy_tensors(v)]
    return []


def shares_memory(targets: list[Any], args: tuple, kwargs: dict) -> bool:
    """Whether a written tensor shares its storage with another tensor argument."""
    written = {id(t) for t in targets}
    storages = {id(t._lz_storage) for t in targets}
    return any(id(t) not in written and id(t._lz_storage) in storages
               for t in _lazy_tensors(list(args) + list(kwargs.values())))


def check_on_cpu(op: Any, args: tuple, kwargs: dict) -> None:
    """Raise the overlap error ``op``'s CPU kernel raises for these arguments' memory layout.

    Every lazy storage gets one CPU stand-in (ones; zeros where an index reads it) and each
    tensor is its view chain replayed on that stand-in, so aliasing is as eager's would be.
    Only an "unsupported operation" error is raised from here; the stand-in values may make
    the kernel fail otherwise, which decides nothing.
    """
    bases: dict[int, torch.Tensor] = {}
    total = 0

    def stand_in(x: Any, name: str | None) -> Any:
        nonlocal total
        if hasattr(x, "_lz_storage"):
            storage = x._lz_storage
            base = bases.get(id(storage))
            if base is None:
                meta = storage.meta
                total += math.prod(meta.shape)
                if total > _MAX_ELEMENTS:
                    raise _TooLarge
                zero = name in _INDEX_ARGS and meta.dtype != torch.bool
                base = bases[id(storage)] = torch.empty_strided(
                    meta.shape, meta.stride, dtype=meta.dtype).fill_(0 if zero else 1)
            for step in x._lz_view:
                base = step.op(base, *step.rest, **step.kwargs)
            return base
        if isinstance(x, list | tuple):
            return type(x)(stand_in(v, name) for v in x)
        return x

    names = [a.name for a in op._schema.arguments]
    try:
        cargs = [stand_in(a, names[i] if i < len(names) else None) for i, a in enumerate(args)]
        ckwargs = {k: stand_in(v, k) for k, v in kwargs.items()}
    except Exception:  # noqa: BLE001 - too large, or a view the CPU cannot replay: unchecked
        return
    try:
        op(*cargs, **ckwargs)
    except RuntimeError as e:
        if str(e).startswith("unsupported operation"):
            raise RuntimeError(str(e)) from None
    except Exception:  # noqa: BLE001, S110 - the stand-ins' values, not the layout
        pass


class _TooLarge(Exception):
    pass
