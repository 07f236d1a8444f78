"""Small helpers shared by the FX rewrites that work around a target's reductions
(``int_extrema``, ``nan_extrema``, ``positive_zero_sums``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import meta_tensor, set_meta

__all__ = ["call_like", "calls_on_tensors", "reroute_uses"]


def calls_on_tensors(g: Graph, targets: object) -> Iterator[tuple[FxNode, FxNode, torch.Tensor]]:
    """``(node, x, val)`` for each call of one of ``targets`` whose first argument ``x`` is a
    tensor value typed ``val`` (a snapshot: the caller may insert nodes meanwhile)."""
    for node in list(g.nodes):
        if node.op != "call_function" or node.target not in targets or not node.args:
            continue
        x = node.args[0]
        val = x.meta.get("val") if isinstance(x, FxNode) else None
        if isinstance(val, torch.Tensor):
            yield node, x, val


def reroute_uses(g: Graph, value: FxNode, make: Callable[[FxNode], FxNode]) -> None:
    """Every use of ``value`` reads ``make(value)`` (a node inserted right after it) instead."""
    with g.inserting_after(value):
        new = make(value)
    value.replace_all_uses_with(new, delete_user_cb=lambda user: user is not new)


def call_like(g: Graph, target: object, args: tuple, val: torch.Tensor, like: FxNode) -> FxNode:
    """A new ``target(*args)`` node typed as ``val`` (shape, dtype, stride), at ``g``'s insertion
    point, carrying ``like``'s source line."""
    n = g.call_function(target, args)
    set_meta(n, meta_tensor(TensorMeta(tuple(val.shape), val.dtype, tuple(val.stride()))))
    if "stack_trace" in like.meta:
        n.meta["stack_trace"] = like.meta["stack_trace"]
    return n
