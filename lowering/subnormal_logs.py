"""Logarithms and powers of subnormal numbers, for targets whose ``log`` reads them as the
smallest normal.

Mesa's lavapipe (the Vulkan software driver CI runs IREE's SPIR-V on) computes ``log``,
``log2`` and ``log10`` of a subnormal float as if it were the smallest normal number:
``torch.log(1e-40)`` was -87.34 on iree-vulkan, eager gives -92.10 (and ``log2`` -126 for
every subnormal), while additions and products keep subnormals (test_subnormals.py). For a
backend that asks for it (``LoweringContext(subnormal_logs=True)``), each floating ``log``
of ``x`` becomes ``log(x * 2**k) - k * log(2)`` where ``x`` is below the smallest normal
(``k`` the dtype's significand bits, which makes every subnormal normal) and ``log(x)``
elsewhere. Zeros, negatives and NaN keep their results (-inf, NaN, NaN).

``pow`` goes through the same logarithm on lavapipe (``1e-40 ** (1/3)`` was 2.3e-13, not
4.6e-14). Here, after the decompositions (lowering/pow.py), the backend's ``pow`` sees only a
positive finite base; a subnormal one becomes ``pow(x * 2**k, y) * 2**(-k y)``. The scaled
power is between the true one and 1, so it neither overflows nor underflows where the true one
does not.
"""

from __future__ import annotations

import math

import torch
from torch.fx import Graph

from .fx_rewrite import call_like, calls_on_tensors

__all__ = ["scale_subnormal_logs"]

aten = torch.ops.aten

#: log op -> the logarithm of 2 in its base.
_LOGS = {aten.log.default: math.log(2), aten.log2.default: 1.0, aten.log10.default: math.log10(2)}
_POWS = (aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor)


def _power_of_two(exponent: float) -> float:
    try:
        return 2.0 ** exponent
    except OverflowError:
        return math.inf


def scale_subnormal_logs(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, x, val in calls_on_tensors(g, tuple(_LOGS) + _POWS):
        out = node.meta.get("val")
        if not val.dtype.is_floating_point or not isinstance(out, torch.Tensor):
            continue
        info = torch.finfo(val.dtype)
        k = round(-math.log2(info.eps)) + 1  # significand bits: 2 ** k * a subnormal is normal
        flags = val.to(torch.bool)
        with g.inserting_before(node):
            small = call_like(g, aten.lt.Scalar, (x, info.tiny), flags, node)
            scaled = call_like(g, aten.mul.Scalar, (x, 2.0 ** k), val, node)
            operand = call_like(g, aten.where.self, (small, scaled, x), val, node)
        node.update_arg(0, operand)  # the base only: in ``x ** x`` the exponent is the same node
        with g.inserting_after(node):
            shifted = _undo_scaling(g, node, k, out)
        with g.inserting_after(shifted):
            result = call_like(g, aten.where.self, (small, shifted, node), out, node)
        guard = (shifted, result)
        node.replace_all_uses_with(result, delete_user_cb=lambda user, guard=guard: user not in guard)
        changed = True
    return changed


def _undo_scaling(g: Graph, node, k: int, out: torch.Tensor):  # noqa: ANN001, ANN202 - FX nodes
    """``node``'s result computed from ``x * 2**k``, turned back into the result for ``x``."""
    if node.target in _LOGS:
        return call_like(g, aten.sub.Scalar, (node, k * _LOGS[node.target]), out, node)
    y = node.args[1]
    if node.target is aten.pow.Tensor_Scalar:
        return call_like(g, aten.mul.Scalar, (node, _power_of_two(-k * float(y))), out, node)
    with g.inserting_before(node):  # (at the caller's insertion point they would come in reverse)
        factor_exponent = call_like(g, aten.mul.Scalar, (y, -k), y.meta["val"], node)
    with g.inserting_before(node):
        factor = call_like(g, aten.exp2.default, (factor_exponent,), y.meta["val"], node)
    return call_like(g, aten.mul.Tensor, (node, factor), out, node)
