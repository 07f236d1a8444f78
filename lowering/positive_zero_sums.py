"""Floating sums that are zero come out as +0.0, for targets that keep a -0.0.

Eager PyTorch starts a floating sum at +0.0, so a sum that comes to zero is
+0.0 whatever the signs of the zeros added (``-0.0 + +0.0`` is ``+0.0`` under
round-to-nearest), and a mean of it too. Mesa's lavapipe shortcuts ``x +
0.0`` to ``x`` (its shader compiler folds an addition of a literal zero), so
on Vulkan a sum or mean of -0.0 values came back -0.0: ``torch.mean(-0.0)``,
``torch.where(x > 0, -0.0, 1).sum().item()`` as a factor (fuzz seed 2102
programs 65, 342 and 543; a factor of -0.0 then flips the sign of every zero
it multiplies). For a backend that asks for it
(``LoweringContext(positive_zero_sums=True)``), each floating ``sum``/``mean``
value ``v`` becomes ``where(v == 0, 0.0, v)``: a select of a literal, which
lavapipe keeps.

The same shortcut drops the one effect of adding a literal +0.0 itself:
``x += 0.0`` kept -0.0 (fuzz seed 2500 program 52). ``add``/``sub`` with a
literal number whose scaled value (``alpha * c``, negated for ``sub``) is
+0.0 get the same select, and so does ``c - x`` (``rsub``) with a literal +0.0,
which lavapipe shortcuts to ``-x`` (-0.0 for ``x = +0.0``, where IEEE gives
+0.0). The IREE backend refuses such an addition anywhere else on lavapipe
(``backends/iree/miscompiles.py``) and recognizes this select.
"""

from __future__ import annotations

import math

import torch
from torch.fx import Graph

from .fx_rewrite import call_like, calls_on_tensors

__all__ = ["make_zero_sums_positive"]

aten = torch.ops.aten

_SUMS = (aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim)
_ADDS = (aten.add.Scalar, aten.add.Tensor)
_SUBS = (aten.sub.Scalar, aten.sub.Tensor)
_RSUBS = (aten.rsub.Scalar,)


def _adds_positive_zero(node) -> bool:  # noqa: ANN001 - an FX node
    """``x + c`` or ``x - c`` (times ``alpha``) with a literal number that adds +0.0, or
    ``c - x`` (``rsub``) with a literal +0.0."""
    if node.target not in _ADDS + _SUBS + _RSUBS or len(node.args) < 2 or not isinstance(node.args[1], int | float):
        return False
    if node.target in _RSUBS:
        added = float(node.args[1])
        return added == 0 and math.copysign(1.0, added) > 0
    alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
    if not isinstance(alpha, int | float):
        return False
    added = float(node.args[1]) * alpha * (-1 if node.target in _SUBS else 1)
    return added == 0 and math.copysign(1.0, added) > 0


def make_zero_sums_positive(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, _x, _val in calls_on_tensors(g, _SUMS + _ADDS + _SUBS + _RSUBS):
        out = node.meta.get("val")
        if not isinstance(out, torch.Tensor) or not out.dtype.is_floating_point:
            continue
        if node.target not in _SUMS and not _adds_positive_zero(node):
            continue
        with g.inserting_after(node):
            is_zero = call_like(g, aten.eq.Scalar, (node, 0.0), out.to(torch.bool), node)
        with g.inserting_after(is_zero):
            positive = call_like(g, aten.where.ScalarSelf, (is_zero, 0.0, node), out, node)
        guard = (is_zero, positive)
        node.replace_all_uses_with(positive, delete_user_cb=lambda user, guard=guard: user not in guard)
        changed = True
    return changed
