"""Floating min/max reductions with an explicit NaN check, for targets that drop the NaN.

PyTorch's ``amax``/``amin``/``max()``/``min()``/``aminmax`` return NaN where
the reduced values hold one. torch-mlir lowers them to ``arith.maximumf``
(NaN-propagating) and IREE 3.13 writes that for SPIR-V as ``GL.FMax`` guarded
by two ``IsNan`` selects, which is right; yet on Mesa's lavapipe the reduction
came out without the NaN for almost every shape: ``x.amax()`` of 5 floats
holding a NaN gave the largest number, ``x.max(0).values`` (whose
decomposition reads ``amax``) too, and ``v0 * v1.min().item()`` then
multiplied by -inf instead of NaN (fuzz seed 1403 programs 90 and 96). The
elementwise forms (``maximum``, ``clamp``: lowering/decompositions.py writes
their NaN rule with comparisons and ``where``) and ``isnan(x).any()`` are
right there. So, for a backend that asks for it
(``LoweringContext(nan_checked_extrema=True)``), each such reduction's value
becomes ``where(any(isnan(x)) over the reduced dims, nan, value)``.
"""

from __future__ import annotations

import operator

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from .fx_rewrite import call_like, calls_on_tensors, reroute_uses

__all__ = ["check_nan_extrema"]

aten = torch.ops.aten

#: The reductions, with which of their results are values (None: the single result).
_EXTREMA: dict[object, tuple[int, ...] | None] = {
    aten.amax.default: None, aten.amin.default: None, aten.max.default: None, aten.min.default: None,
    aten.aminmax.default: (0, 1),
}


def _reduced_dims(node: FxNode, ndim: int) -> tuple[list[int], bool]:
    """The dims ``node`` reduces (non-negative, ascending) and its keepdim."""
    if node.target in (aten.max.default, aten.min.default):
        return list(range(ndim)), False
    if node.target is aten.aminmax.default:
        dim, keepdim = node.kwargs.get("dim"), node.kwargs.get("keepdim", False)
        dims = list(range(ndim)) if dim is None else [dim % ndim]
        return dims, bool(keepdim)
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", [])
    keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
    dims = [dim] if isinstance(dim, int) else list(dim)
    dims = sorted({d % ndim for d in dims}) if dims else list(range(ndim))
    return dims, bool(keepdim)


def _nan_any(g: Graph, x: FxNode, dims: list[int], keepdim: bool, like: FxNode) -> FxNode:
    """``isnan(x).any(dims, keepdim)``, one ``any.dim`` per dim (highest first)."""
    val = x.meta["val"]
    cur = call_like(g, aten.isnan.default, (x,), torch.empty(val.shape, dtype=torch.bool, device="meta"), like)
    shape = list(val.shape)
    for d in sorted(dims, reverse=True):
        if keepdim:
            shape[d] = 1
        else:
            del shape[d]
        cur = call_like(g, aten.any.dim, (cur, d, keepdim), torch.empty(shape, dtype=torch.bool, device="meta"), like)
    return cur


def _guard(g: Graph, value: FxNode, nan_any: FxNode) -> None:
    """Every use of ``value`` reads ``where(nan_any, nan, value)``."""
    reroute_uses(g, value, lambda v: call_like(g, aten.where.ScalarSelf, (nan_any, float("nan"), v), v.meta["val"], v))


def check_nan_extrema(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, x, val in calls_on_tensors(g, _EXTREMA):
        if not val.dtype.is_floating_point or val.dim() == 0:
            continue
        if val.numel() == 0:
            continue  # eager raises (or returns no element): nothing to guard
        dims, keepdim = _reduced_dims(node, val.dim())
        values = _EXTREMA[node.target]
        with g.inserting_before(node):
            nan_any = _nan_any(g, x, dims, keepdim, node)
        changed = True
        if values is None:
            _guard(g, node, nan_any)
            continue
        for user in list(node.users):
            if user.target is operator.getitem and user.args[1] in values:
                _guard(g, user, nan_any)
    return changed
