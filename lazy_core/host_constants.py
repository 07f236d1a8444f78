"""Graph results that are constant fills are made on the host, not by the compiled graph.

``torch.zeros(..., device="lazy")`` and ``torch.full`` are recorded as
``empty`` + ``zero_``/``fill_``. When such a tensor is still alive at a
barrier it is one of the graph's results, and IREE 3.13 miscompiles a graph
that returns a constant next to an in-place-capable write (a sort or topk,
``select_scatter``, a fill through a view): the written value came back in
another result's buffer, swapped or clobbered (fuzz seed 1101, reproduced
with iree-compile alone; test_fuzz_regressions.py). The same graph without
the constant result is right. A constant needs no compiler: its value is made
here exactly as eager makes it (``empty(...).fill_(value)``) and uploaded,
so no backend ever returns one. The graph still computes with the constant
wherever its other results use it.
"""

from __future__ import annotations

from typing import Any

import torch

from . import metrics
from .ir import Output, ScalarParam

aten = torch.ops.aten

_FILLS = (aten.zero.default, aten.fill.Scalar)


def _fill_value(out: Output) -> tuple[bool, Any]:
    """(True, value) when ``out`` is a fill of a fresh ``empty`` with a known value."""
    node = out.node
    if node.op not in _FILLS or not node.args or not isinstance(node.args[0], Output):
        return False, None
    if node.args[0].node.op is not aten.empty.memory_format or node.args[0].node.operands:
        return False, None
    if node.op is aten.zero.default:
        return True, 0
    value = node.args[1] if len(node.args) > 1 else node.kwargs.get("value")
    if isinstance(value, Output):
        if not isinstance(value.node, ScalarParam):
            return False, None
        value = value.node.value
    return type(value) in (bool, int, float), value


def split(roots: list[Output]) -> tuple[list[int], list[int]]:
    """Indices of the roots the graph computes, and of those that are constant fills."""
    computed, constant = [], []
    for i, out in enumerate(roots):
        (constant if _fill_value(out)[0] else computed).append(i)
    return computed, constant


def make(out: Output) -> torch.Tensor:
    """The constant's value on the host, converted to its dtype as eager's ``fill_`` does."""
    meta = out.meta
    metrics.counter_add("host_constant_results")
    return torch.empty(tuple(meta.shape), dtype=meta.dtype).fill_(_fill_value(out)[1])
