"""Small helpers shared by the FX rewrites that work around a target's reductions
(``int_extrema``, ``nan_extrema``, ``positive_zero_sums``) and by those that splice a traced
function in place of an op (``wide_sums``, ``conv_matmuls``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import meta_tensor, set_meta

__all__ = ["TRACED_CACHE_LIMIT", "call_like", "calls_on_tensors", "reroute_uses", "splice_traced"]


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


#: Most traced rewrites one cache keeps (``splice_traced``'s ``cache``).
TRACED_CACHE_LIMIT = 256


def splice_traced(g: Graph, node: FxNode, operands: list, cache: dict, key: tuple,
                  make: Callable[[], Callable]) -> Any:
    """The result(s) of ``make()``'s function of ``operands`` (nodes of ``g``), traced with
    ``make_fx`` on meta tensors typed as the operands and copied into ``g`` before ``node``,
    each new node carrying ``node``'s source line. The trace is kept in ``cache`` under ``key``
    plus the operands' types: tracing costs tens of ms, and a model repeats the same few
    shapes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    vals = [o.meta["val"] for o in operands]
    key = (*key, *((tuple(v.shape), tuple(v.stride()), v.dtype) for v in vals))
    traced = cache.get(key)
    if traced is None:
        examples = [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") for v in vals]
        traced = make_fx(make(), tracing_mode="fake")(*examples)
        if len(cache) < TRACED_CACHE_LIMIT:
            cache[key] = traced
    placeholders = [n for n in traced.graph.nodes if n.op == "placeholder"]
    before = set(g.nodes)
    with g.inserting_before(node):
        result = g.graph_copy(traced.graph, dict(zip(placeholders, operands, strict=True)))
    if "stack_trace" in node.meta:
        for n in g.nodes:
            if n not in before:
                n.meta["stack_trace"] = node.meta["stack_trace"]
    return result
