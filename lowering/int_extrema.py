"""Integer min/max reductions computed in int64, for targets that get narrower ones wrong.

On iree-vulkan (IREE 3.13 on Mesa's lavapipe) a min/max-family reduction of
an int32 (so also int8, int16, uint8, which ``small_ints`` computes in int32)
or bool tensor read past its data for some sizes (24, 40, 48, 56, 80, 96
elements, full or along a dim): ``x.amax()`` of 24 negative int32 values was
0, ``x.amin()`` of non-negative ones -1, ``argmax`` returned 24, an index
outside the tensor, and ``torch.stack([bools, ints]).min()`` gave -1 where
eager gives 0 (fuzz seed 1400 program 79). The same reductions of int64 and
of floats are right at every size. So, for a backend that asks for it
(``LoweringContext(int64_extrema=True)``), the operand of each such reduction
is converted to int64 first (exact) and the values come back in the original
dtype (exact: each is one of the operand's values); indices are int64 anyway.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import fake_tensor, meta_tensor, set_meta
from .fx_rewrite import calls_on_tensors, reroute_uses

__all__ = ["widen_int_extrema"]

aten = torch.ops.aten

#: The reductions, with which of their results are values (the others are int64 indices).
_EXTREMA: dict[object, tuple[int, ...] | None] = {
    aten.amax.default: None, aten.amin.default: None, aten.max.default: None, aten.min.default: None,
    aten.argmax.default: (), aten.argmin.default: (),
    aten.max.dim: (0,), aten.min.dim: (0,), aten.aminmax.default: (0, 1),
}
#: Operand dtypes widened (after ``small_ints``, no 8- or 16-bit integer computes).
_NARROW = frozenset({torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool})


def _meta(val: torch.Tensor, dtype: torch.dtype) -> TensorMeta:
    return TensorMeta(tuple(val.shape), dtype, tuple(val.stride()))


def _cast(g: Graph, x: FxNode, dtype: torch.dtype, like: FxNode) -> FxNode:
    n = g.call_function(aten._to_copy.default, (x,), {"dtype": dtype})
    set_meta(n, meta_tensor(_meta(x.meta["val"], dtype)))
    if "stack_trace" in like.meta:
        n.meta["stack_trace"] = like.meta["stack_trace"]
    return n


def _narrow_back(g: Graph, value: FxNode, dtype: torch.dtype) -> None:
    """Every use of ``value`` (now int64) reads it converted back to ``dtype``."""
    reroute_uses(g, value, lambda v: _cast(g, v, dtype, v))


def widen_int_extrema(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, x, val in calls_on_tensors(g, _EXTREMA):
        if val.dtype not in _NARROW:
            continue
        changed = True
        dtype = val.dtype
        with g.inserting_before(node):
            node.args = (_cast(g, x, torch.int64, node), *node.args[1:])
        values = _EXTREMA[node.target]
        if values is None:  # one result, a value
            set_meta(node, meta_tensor(_meta(node.meta["val"], torch.int64)))
            _narrow_back(g, node, dtype)
            continue
        if not values:
            continue
        results = list(node.meta["val"])
        for i in values:
            results[i] = fake_tensor(_meta(results[i], torch.int64))
        node.meta["val"] = tuple(results)
        for user in list(node.users):
            if user.target is operator.getitem and user.args[1] in values:
                set_meta(user, meta_tensor(_meta(user.meta["val"], torch.int64)))
                _narrow_back(g, user, dtype)
    return changed
