"""Negative indices of an ``index_put`` wrapped before the backend sees them.

``x[idx] = v`` with ``idx = [-1, -6, 2]`` (and ``index_put``, ``_unsafe_index_put``, the
backward of an indexing read) writes ``x[-1]`` and ``x[-6]`` eagerly, as Python indexing
does. torch-mlir's lowering of ``index_put`` passes the indices to a scatter unchanged:
IREE dropped the negative ones (iree-cpu and iree-vulkan returned ``x`` with only ``x[2]``
written, or wrote outside the tensor), and the reference backend's scatter wrote before its
buffer ("double free or corruption", the process gone). Found by the fuzzer's ``scatter``
ops (seed 7301). Reads (``aten.index.Tensor``) wrap in torch-mlir already.

Each integer index tensor ``i`` of dimension size ``n`` is replaced by
``where(i < 0, i + n, i)``. An index outside ``[-n, n)`` was replaced by 0 and recorded as an
error when it was traced (``lazy_core.checks``), so every index is in range afterwards.
"""

from __future__ import annotations

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import meta_tensor, set_meta
from .fx_rewrite import call_like, calls_on_tensors

__all__ = ["make_scatter_dims_non_negative", "scatter_into_scalars_as_vectors", "wrap_negative_scatter_indices"]

aten = torch.ops.aten

_INDEX_PUTS = (aten.index_put.default, aten._index_put_impl.default, aten._unsafe_index_put.default)

#: Ops whose second argument is a ``dim`` of ``self`` (the scatter, gather and index families).
_SELF_DIM_OPS = frozenset(getattr(packet, overload) for packet in (
    aten.scatter, aten.scatter_add, aten.scatter_reduce, aten.gather, aten.index_add, aten.index_copy,
    aten.index_fill, aten.index_select, aten.index_reduce) for overload in packet.overloads())


def _call(g: Graph, target: object, args: tuple, val: torch.Tensor, like: FxNode, dtype: torch.dtype) -> FxNode:
    n = g.call_function(target, args)
    set_meta(n, meta_tensor(TensorMeta(tuple(val.shape), dtype, tuple(val.stride()))))
    if "stack_trace" in like.meta:
        n.meta["stack_trace"] = like.meta["stack_trace"]
    return n


def _wrapped(g: Graph, i: FxNode, n: int, like: FxNode) -> FxNode:
    val = i.meta["val"]
    negative = _call(g, aten.lt.Scalar, (i, 0), val, like, torch.bool)
    shifted = _call(g, aten.add.Scalar, (i, n), val, like, val.dtype)
    return _call(g, aten.where.self, (negative, shifted, i), val, like, val.dtype)


def wrap_negative_scatter_indices(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, _x, val in calls_on_tensors(g, _INDEX_PUTS):
        indices = node.args[1] if len(node.args) > 1 else None
        if not isinstance(indices, list | tuple):
            continue
        metas = [i.meta.get("val") if isinstance(i, FxNode) else None for i in indices]
        if any(m is not None and m.dtype in (torch.bool, torch.uint8) for m in metas):
            continue  # a mask (decomposed before, or walks several dims): no integer to wrap
        if len(indices) > val.dim():
            continue
        new = list(indices)
        with g.inserting_before(node):
            for d, (i, m) in enumerate(zip(indices, metas)):
                if m is None or m.dtype.is_floating_point or m.dtype.is_complex:
                    continue
                new[d] = _wrapped(g, i, int(val.shape[d]), node)
        if new != list(indices):
            node.args = (node.args[0], type(indices)(new), *node.args[2:])
            changed = True
    return changed


def make_scatter_dims_non_negative(g: Graph) -> bool:
    """``dim % rank`` for a negative ``dim`` of the scatter, gather and index families.

    torch-mlir 20261001's scatter lowering (TMTensor) takes a negative ``dim`` as an unsigned size
    and the compiler process dies: "LLVM ERROR: out of memory", or a segfault. The lazy ops a user
    calls have their ``dim`` made non-negative when recorded (``decompositions.canonical_args``);
    this pass covers the scatters the decompositions emit with the user's ``dim`` (the
    ``scatter(dim=-1, reduce="add")`` of a float tensor and the bool ``scatter_add`` killed the
    process on reference and iree-cpu: the int64 OpInfo sweep). True if ``g`` changed."""
    changed = False
    for node, _x, val in calls_on_tensors(g, _SELF_DIM_OPS):
        if len(node.args) > 1 and isinstance(node.args[1], int) and node.args[1] < 0 and val.dim():
            node.args = (node.args[0], node.args[1] % val.dim(), *node.args[2:])
            changed = True
        elif isinstance(node.kwargs.get("dim"), int) and node.kwargs["dim"] < 0 and val.dim():
            node.kwargs = {**node.kwargs, "dim": node.kwargs["dim"] % val.dim()}
            changed = True
    return changed


#: Scatters into ``self`` along ``dim``: ``(self, dim, index, src_or_value, ...)``.
_SCATTERS = frozenset(getattr(packet, overload) for packet in (aten.scatter, aten.scatter_add, aten.scatter_reduce)
                      for overload in packet.overloads())


def scatter_into_scalars_as_vectors(g: Graph) -> bool:
    """A scatter into a 0-d tensor as one into its 1-element vector, reshaped back.

    IREE 3.13 rejects every scatter into a 0-d tensor ("'iree_linalg_ext.scatter' op dimension
    map is invalid"), so each graph holding one (``scatter``, ``scatter_add``, every
    ``scatter_reduce`` mode, bools and integers included) failed to compile and ran op by op. The
    index names the one element (eager's checks ran when it was recorded); a source with more
    elements than the index contributes its first. True if ``g`` changed."""
    changed = False
    for node, x, val in calls_on_tensors(g, _SCATTERS):
        if val.dim() != 0 or len(node.args) < 4:
            continue
        index, src = node.args[2], node.args[3]
        index_val = index.meta.get("val") if isinstance(index, FxNode) else None
        if not isinstance(index_val, torch.Tensor) or index_val.numel() != 1:
            continue  # an empty index writes nothing: left as it is
        one = val.reshape(1)
        with g.inserting_before(node):
            x1 = call_like(g, aten.reshape.default, (x, [1]), one, node)
            i1 = call_like(g, aten.reshape.default, (index, [1]), index_val.reshape(1), node)
            if isinstance(src, FxNode) and isinstance(src.meta.get("val"), torch.Tensor):
                src_val = src.meta["val"]
                flat = call_like(g, aten.reshape.default, (src, [-1]), src_val.reshape(-1), node)
                src = call_like(g, aten.slice.Tensor, (flat, 0, 0, 1), src_val.reshape(-1)[:1], node)
            scattered = call_like(g, node.target, (x1, 0, i1, src, *node.args[4:]), one, node)
        scattered.kwargs = dict(node.kwargs)
        with g.inserting_after(scattered):
            out = call_like(g, aten.reshape.default, (scattered, []), val, node)
        node.replace_all_uses_with(out)
        g.erase_node(node)
        changed = True
    return changed
