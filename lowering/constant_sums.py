"""Sums of a filled tensor are computed as one element times the count.

``torch.full(shape, v)`` or ``empty(shape).fill_(v)`` with a ``v`` the graph
reads at run time (a lifted Python number, an ``item()`` of a tensor) is a
broadcast of a runtime scalar. Summed, it reaches IREE 3.13 as a reduction
whose body adds that scalar and never reads its input, and IREE's vectorizer
combines such a loop-invariant value once instead of once per element
(``backends/iree/miscompiles.py`` refuses the graph, which then ran op by op).
``torch.masked.var(x)`` with no mask counts its elements that way, so every
masked reduction without a mask fell back on the IREE backends.

A reduction of a constant needs no loop: the sum over the reduced dims of a
tensor whose elements are all ``v`` is the sum over those dims of a one-element
slice (``v``) times the number of elements reduced. Integer sums are exact
either way (eager's too, with wrap-around); a floating sum of equal values is
the product up to rounding, as a sum in another order is. A mean of it is the
one-element mean. The rewrite leaves every other reduction alone and needs no
target: it holds for every backend.
"""

from __future__ import annotations

import math

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from .fx_rewrite import call_like, calls_on_tensors

__all__ = ["reduce_constant_sums"]

aten = torch.ops.aten

_SUMS = (aten.sum.default, aten.sum.dim_IntList)
_MEANS = (aten.mean.default, aten.mean.dim)
#: Ops whose every result element is one scalar argument (the fill value).
_FILLS = (aten.fill.Scalar, aten.full.default, aten.full_like.default, aten.new_full.default,
          aten.zero.default, aten.zeros.default, aten.zeros_like.default, aten.new_zeros.default)
#: Ops that only repeat their input's elements: a fill seen through them is still one value.
_REPEATS = (aten.expand.default, aten.view.default, aten.reshape.default, aten.clone.default,
            aten.unsqueeze.default, aten.squeeze.dim, aten.permute.default)


def _is_filled(x: object, depth: int = 0) -> bool:
    """Whether every element of ``x`` is one value: a fill, seen through ops that repeat
    elements and through elementwise ops of such values and scalars (``cross_entropy``'s
    count of targets that are not ``ignore_index``, ``(t != -100).sum()``, of a constant
    target: with label smoothing its graph was refused on iree-cpu)."""
    while isinstance(x, FxNode) and x.op == "call_function" and x.target in _REPEATS:
        x = x.args[0]
    if not (isinstance(x, FxNode) and x.op == "call_function"):
        return False
    if x.target in _FILLS:
        return True
    tags = getattr(x.target, "tags", ())
    if depth >= 8 or torch.Tag.pointwise not in tags or torch.Tag.nondeterministic_seeded in tags:
        return False
    tensors = [a for a in x.args if isinstance(a, FxNode) and isinstance(a.meta.get("val"), torch.Tensor)]
    return bool(tensors) and all(_is_filled(a, depth + 1) for a in tensors)


def _reduced_dims(node: FxNode, rank: int) -> list[int]:
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if node.target in (aten.sum.default, aten.mean.default) or dims is None or list(dims) == []:
        return list(range(rank))
    return sorted({d % rank for d in dims})


def reduce_constant_sums(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, x, val in calls_on_tensors(g, _SUMS + _MEANS):
        out = node.meta.get("val")
        if not isinstance(out, torch.Tensor) or val.dim() == 0 or val.numel() == 0 or not _is_filled(x):
            continue
        dims = _reduced_dims(node, val.dim())
        count = math.prod(val.shape[d] for d in dims)
        if count <= 1:
            continue
        with g.inserting_before(node):
            one = x
            for d in dims:
                one = call_like(g, aten.slice.Tensor, (one, d, 0, 1), torch.empty(
                    [1 if i == d else s for i, s in enumerate(one.meta["val"].shape)], dtype=val.dtype), node)
            new = g.call_function(node.target, (one, *node.args[1:]), dict(node.kwargs))
            new.meta = dict(node.meta)
            if node.target in _SUMS:
                new = call_like(g, aten.mul.Tensor, (new, count), out, node)
        node.replace_all_uses_with(new)
        g.erase_node(node)
        changed = True
    return changed
