"""A training step's first graph as its later steps see it: state fills lifted to inputs.

An optimizer makes its state in its first step: AdamW's moments are
``zeros_like(p)``, Adagrad's sums ``full_like(p, v)``. That step's graph holds
a fill where every later step reads an input, and it lists its results in
another order (the executor orders them by when each tensor was made, and
the gradients are made anew each step, after the state then but before it
in the first step). So the two are different families
(``LazyGraph.family_key``), and with dynamic shapes a loop paid a compile
more: the first step compiled statically, the second (a new family)
statically too, and only the third generalized, although the second already
had other sizes than the first.

``FirstStep.of`` keeps such a graph with each fill of a leaf's shape (a
``*_like`` of an input) turned into an input, and every input without its
buffer (nothing is kept alive). ``FirstStep.as_later`` puts its results in
the order of a later step's graph and gives the rewritten graph when it is
then that later step's family, for ``lazy_core.dynamic_shapes`` to
generalize the later step with. The rewritten graph is never run: ``admits``
still decides every reuse of what is compiled from it.
"""

from __future__ import annotations

import copy
from typing import Any

from .graph import LazyGraph, build_graph
from .ir import DeviceData, Node, Output, op_name

__all__ = ["FirstStep", "order_free_key"]

#: Fills whose only tensor operand gives the shape (and dtype): the optimizers' state makers.
_FILLS = frozenset({"aten.zeros_like", "aten.ones_like", "aten.full_like"})


class FirstStep:
    """A graph that made state, rewritten as its later steps would be (module doc)."""

    __slots__ = ("key", "_outputs")

    def __init__(self, key: str, outputs: list[Output]) -> None:
        #: ``order_free_key`` of the rewritten graph.
        self.key = key
        #: Its results in ``_order``'s order, over nodes that hold no buffer.
        self._outputs = outputs

    @staticmethod
    def of(graph: LazyGraph) -> FirstStep | None:
        """``graph`` with its state fills lifted, or None when it has none."""
        replaced: dict[int, Node] = {}
        lifted = False
        for node in graph.inputs:
            if isinstance(node, DeviceData):
                replaced[id(node)] = DeviceData(None, node.metas[0], node.location)
        for node in graph.nodes:
            if _is_state_fill(node):
                replaced[id(node)] = DeviceData(None, node.metas[0], node.location)
                lifted = True
            elif any(id(o.node) in replaced for o in node.operands):
                twin = copy.copy(node)
                twin.operands = tuple(_redirect(o, replaced) for o in node.operands)
                twin.args = _redirect(node.args, replaced)
                twin.kwargs = _redirect(node.kwargs, replaced)
                replaced[id(node)] = twin
        if not lifted:
            return None
        outputs = _order([_redirect(o, replaced) for o in graph.outputs])
        return FirstStep(build_graph(outputs).family_key, outputs)

    def as_later(self, graph: LazyGraph) -> LazyGraph | None:
        """This first step with its results in ``graph``'s order, if it is then
        ``graph``'s family; else None."""
        if len(graph.outputs) != len(self._outputs):
            return None
        ranks = sorted(range(len(graph.outputs)), key=lambda i: _rank(graph.outputs[i]))
        outputs: list[Output] = [None] * len(ranks)  # type: ignore[list-item]
        for mine, theirs in zip(self._outputs, ranks):
            outputs[theirs] = mine
        rewritten = build_graph(outputs)
        return rewritten if rewritten.family_key == graph.family_key else None


def order_free_key(graph: LazyGraph) -> str:
    """``graph``'s family key with its results in ``_order``'s order."""
    return build_graph(_order(list(graph.outputs))).family_key


def _rank(out: Output) -> tuple:
    """What orders results independently of when their tensors were made: where
    and by which op the value was computed (ties keep their order, which the
    steps of one loop share)."""
    loc = out.node.location
    return ("", 0, "") if loc is None else tuple(loc), op_name(out.node.op), out.index


def _order(outputs: list[Output]) -> list[Output]:
    return sorted(outputs, key=_rank)


def _is_state_fill(node: Node) -> bool:
    # Operands: the tensor whose shape it takes, and a fill value lifted to a parameter.
    return op_name(node.op).rsplit(".", 1)[0] in _FILLS and all(o.node.is_leaf() for o in node.operands)


def _redirect(x: Any, replaced: dict[int, Node]) -> Any:
    if isinstance(x, Output):
        twin = replaced.get(id(x.node))
        return x if twin is None else Output(twin, x.index)
    if isinstance(x, list | tuple):
        return type(x)(_redirect(v, replaced) for v in x)
    if isinstance(x, dict):
        return {k: _redirect(v, replaced) for k, v in x.items()}
    return x
