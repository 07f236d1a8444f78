"""Scatters and indexed writes through an empty index, written as a copy of ``self``.

``x.index_put((idx,), v)``, ``index_add``/``index_copy``/``index_fill``/``index_reduce`` and the
``scatter`` family write nothing when their index has no elements, and eager returns ``self``
unchanged. Lowered as they are, such a graph killed the process with SIGFPE on ``reference`` and
``iree-cpu`` (an integer division by the index's zero size: ``index_put``, ``index_add``,
``index_copy``, ``index_fill``, ``index_reduce``), or crashed ``iree-compile`` in
``AnnotateDispatchesPass`` (``scatter``, ``scatter_add``, ``scatter_reduce``). Found from fuzz
seed 9512 (``int_t.scatter(0, empty, inf)``). Only shapes known at trace time decide
(``applies``); the op's other decomposition, if any, handles the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lazy_core.ir import Node, Output

aten = torch.ops.aten

#: op -> the position of its index argument (a tensor, or ``index_put``'s list of them).
_INDEX_ARG = {
    aten.scatter.value: 2, aten.scatter.src: 2, aten.scatter.reduce: 2, aten.scatter.value_reduce: 2,
    aten.scatter_add.default: 2, aten.scatter_reduce.two: 2,
    aten.index_add.default: 2, aten.index_copy.default: 2, aten.index_fill.int_Scalar: 2,
    aten.index_fill.int_Tensor: 2, aten.index_reduce.default: 2,
    aten.index_put.default: 1, aten._index_put_impl.default: 1, aten._unsafe_index_put.default: 1,
}

OPS = tuple(_INDEX_ARG)


def _empty(x: Any) -> bool:
    return isinstance(x, Output) and x.meta is not None and 0 in x.meta.shape


def applies(node: Node) -> bool:
    """Whether ``node`` is one of ``OPS`` whose index has no elements."""
    i = _INDEX_ARG[node.op]
    index = node.args[i] if len(node.args) > i else None
    if isinstance(index, list | tuple):
        return any(_empty(t) for t in index)  # the indices broadcast to no elements
    return _empty(index)


def _index_is_empty(op: Any, args: tuple, kwargs: dict) -> bool:
    i = _INDEX_ARG[op]
    index = args[i] if len(args) > i else kwargs.get("indices" if i == 1 else "index")
    if index is None:
        return False
    if isinstance(index, list | tuple):
        return any(t is not None and t.numel() == 0 for t in index)
    return index.numel() == 0


def decomposition(op: Any, otherwise: Callable | None) -> Callable:
    """``op``'s decomposition: a copy of ``self`` when its index is empty, else ``otherwise``
    (the op's other decomposition, where it has one)."""
    def decomposed(*args: Any, **kwargs: Any) -> Any:
        if _index_is_empty(op, args, kwargs):
            return args[0].clone()
        return otherwise(*args, **kwargs) if otherwise is not None else NotImplemented
    return decomposed
