"""Reductions over more than 65,535 elements are staged: llvmpipe stops longer shader loops.

Mesa's lavapipe (the Vulkan driver CI and machines without a GPU run
iree-vulkan on) compiles shaders with llvmpipe, which ends every loop after
65,535 iterations, its guard against a shader that never returns. Nothing
reports it: the loop just stops. IREE's SPIR-V code for a reduction loops
over the reduced elements, so on iree-vulkan ``ones(65536).sum()`` was 65535,
``ones(2**20).sum()`` 524,280 (8 invocations of 65,535), ``ones(n, 4).sum(0)``
65535 per column for every n past it, and ``arange(65536).amax()`` 65534.

With ``short_loops`` (the Vulkan target), a ``sum``, ``mean``, ``amax``,
``amin``, ``max()``, ``min()``, ``any`` or ``all`` over more than ``LOOP_LIMIT`` elements is
rewritten as a chain of reductions over groups of its reduced dims, innermost
first, each group at most ``STAGE`` elements; a reduced dim longer than
``STAGE`` is first split in two (a reshape) at a divisor near its square
root. No loop then gets near the limit. A ``mean`` is the staged sum divided
by the count. Integer sums and extrema are exact in any order; a floating sum
in stages is closer to the exact sum than one running total (about the sum
of the stage lengths times ``eps`` instead of ``n * eps``).

Only the Vulkan target takes it. On iree-cpu and reference it would make
long float32 sums 20-60x closer to eager's (16,384 values: 3.7e-8 of the sum
of magnitudes instead of 6.6e-7; eager 8.6e-9), but its stages depend on the
sizes, so a graph seen at two sizes lowered to two structures and automatic
dynamic dimensions refused it (a loop over 8 sequence lengths compiled 6
graphs instead of 2).

A reduced dim of more than 65,535 elements with no divisor between 8 and its
square root (a prime length) cannot be staged, nor can other ops that loop
(``argmax``, ``cumsum``, ``sort``, a softmax or a matmul over a longer dim):
``long_loop`` names every such call (``lowering.loop_extents``) and the Vulkan
target runs it eagerly.
"""

from __future__ import annotations

import math

import torch
from torch.fx import Graph

from . import loop_extents
from .fx_rewrite import call_like, calls_on_tensors

__all__ = ["stage_long_reductions"]

aten = torch.ops.aten

_MEANS = (aten.mean.default, aten.mean.dim)
#: Longest loop llvmpipe runs to its end.
LOOP_LIMIT = 65535
#: The op reducing each stage.
_STAGED = {
    aten.sum.default: aten.sum.dim_IntList, aten.sum.dim_IntList: aten.sum.dim_IntList,
    aten.mean.default: aten.sum.dim_IntList, aten.mean.dim: aten.sum.dim_IntList,
    aten.amax.default: aten.amax.default, aten.amin.default: aten.amin.default,
    aten.max.default: aten.amax.default, aten.min.default: aten.amin.default,
    # ``any``/``all``: the user's, and the device checks of indices (``lazy_core.checks``).
    aten.any.default: aten.any.dims, aten.any.dim: aten.any.dims, aten.any.dims: aten.any.dims,
    # torch-mlir has no ``all.dims``: ``all`` is staged as ``not any(not x)``.
    aten.all.default: aten.any.dims, aten.all.dim: aten.any.dims, aten.all.dims: aten.any.dims,
}
_ALLS = (aten.all.default, aten.all.dim, aten.all.dims)
#: Staged for bool inputs only (the device checks' and comparisons'), as IREE compiled them.
_BOOL_ONLY = (aten.any.default, aten.any.dim, aten.any.dims, *_ALLS)
_FULL = (aten.sum.default, aten.mean.default, aten.max.default, aten.min.default, aten.any.default,
         aten.all.default)
#: Longest running total of a stage.
STAGE = 256


def _split(n: int) -> tuple[int, int] | None:
    """``(a, b)`` with ``a * b == n`` and ``b`` the divisor of ``n`` closest below its square root
    (at least 8); None when ``n`` has none."""
    for b in range(math.isqrt(n), 7, -1):
        if n % b == 0:
            return n // b, b
    return None


def _staged_dims(shape: list[int], dims: list[int]) -> tuple[list[int], list[list[int]]] | None:
    """The shape with every long reduced dim split in two, and the stages (lists of dims of that
    shape, innermost first) that reduce it; None when nothing would be gained."""
    new_shape: list[int] = []
    reduced: list[int] = []
    for i, s in enumerate(shape):
        parts = _split(s) if i in dims and s > STAGE else None
        for p in parts or (s,):
            if i in dims:
                reduced.append(len(new_shape))
            new_shape.append(p)
    stages: list[list[int]] = []
    group: list[int] = []
    size = 1
    for d in reversed(reduced):
        if group and size * new_shape[d] > STAGE:
            stages.append(group)
            group, size = [], 1
        group.append(d)
        size *= new_shape[d]
    stages.append(group)
    if any(math.prod(new_shape[d] for d in stage) > LOOP_LIMIT for stage in stages):
        return None  # a dim with no divisor to split it at (65,537) still loops past the limit
    return (new_shape, stages) if len(stages) > 1 else None


def _typed(shape: list[int], like: torch.Tensor) -> torch.Tensor:
    return torch.empty(shape, dtype=like.dtype, device="meta")


def _dims(op: object, args: tuple, kwargs: dict, rank: int) -> list[int]:
    """The dims a call of a ``_STAGED`` op reduces."""
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if isinstance(dims, int):
        dims = [dims]
    if rank == 0:
        return []  # a 0-d tensor: its one element (``dim=0`` and ``-1`` name it)
    if op in _FULL or dims is None or list(dims) == []:
        return list(range(rank))
    return sorted({d % rank for d in dims})


def stage_long_reductions(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, x, val in calls_on_tensors(g, tuple(_STAGED)):
        out = node.meta.get("val")
        stage_op = _STAGED[node.target]
        if (not isinstance(out, torch.Tensor) or not all(isinstance(s, int) for s in val.shape)
                or node.target in _MEANS and out.dtype != val.dtype
                or node.kwargs.get("dtype") not in (None, val.dtype)
                or node.target in _BOOL_ONLY and val.dtype != torch.bool):
            continue
        shape = list(val.shape)
        dims = _dims(node.target, node.args, node.kwargs, len(shape))
        count = math.prod(shape[d] for d in dims)
        if count <= LOOP_LIMIT:
            continue
        staged = _staged_dims(shape, dims)
        if staged is None:
            continue
        new_shape, stages = staged
        with g.inserting_before(node):
            value = x
            if node.target in _ALLS:
                value = call_like(g, aten.logical_not.default, (x,), val, node)
            if new_shape != shape:
                value = call_like(g, aten.view.default, (value, new_shape), _typed(new_shape, val), node)
            current = list(new_shape)
            for stage in stages:
                current = [1 if i in stage else s for i, s in enumerate(current)]
                value = call_like(g, stage_op, (value, sorted(stage), True), _typed(current, out), node)
            value = call_like(g, aten.view.default, (value, list(out.shape)), out, node)
            if node.target in _MEANS:
                value = call_like(g, aten.div.Scalar, (value, count), out, node)
            if node.target in _ALLS:
                value = call_like(g, aten.logical_not.default, (value,), out, node)
        node.replace_all_uses_with(value)
        g.erase_node(node)
        changed = True
    return changed


# -- Calls the staging above does not cover: run eagerly on the Vulkan target -----------------

#: IREE's SPIR-V scan (``cumsum``/``cumprod``) came out wrong from 32,768 elements along the
#: scanned dim (``cumsum`` of 32,768 ones ended ``..., 32766, 0, 0``): half the loop limit.
SCAN_LIMIT = 32767


def may_loop_long(op: object) -> bool:
    """Whether some call of ``op`` could loop past lavapipe's limit (``long_loop`` must then
    be asked per call); False for elementwise ops, views, copies and gathers."""
    return loop_extents.may_loop(op)


def long_loop(op: object, args: tuple, kwargs: dict) -> str | None:
    """Why this call of ``op`` could run a loop past lavapipe's limit in IREE's SPIR-V code, or
    None. A reduction ``stage_long_reductions`` stages is None; a scan is measured wrong past
    ``SCAN_LIMIT``; any other call whose ``loop_extents.loop_extent`` passes ``LOOP_LIMIT``
    (a contraction, a softmax, a norm, an accumulating scatter, a convolution summing that many
    products per output, ...). Such a call runs eagerly: a right value, not a short loop's."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    n = loop_extents.scan_extent(op, args, kwargs)
    if n > SCAN_LIMIT:
        return f"scans {n} elements (lavapipe: wrong past {SCAN_LIMIT})"
    if op is aten.convolution.default:
        n = _products_per_output(args)
    elif op in _STAGED:
        n = _unstaged_count(op, args, kwargs)
    else:
        n = loop_extents.loop_extent(op, args, kwargs)
    return f"loops over {n} elements (lavapipe: loops stop at {LOOP_LIMIT})" if n > LOOP_LIMIT else None


def _unstaged_count(op: object, args: tuple, kwargs: dict) -> int:
    """The elements a reduction ``stage_long_reductions`` would leave in one loop: 0 when it
    stages the call, else the reduced count (a long dim with no divisor to split it at, a
    ``mean`` computing in another dtype)."""
    x = args[0]
    dims = _dims(op, args, kwargs, x.dim())
    count = math.prod(x.shape[d] for d in dims)
    if count <= LOOP_LIMIT:
        return 0
    if kwargs.get("dtype") not in (None, x.dtype) or op in _BOOL_ONLY and x.dtype != torch.bool:
        return count  # staging keeps the input's dtype: a sum with another ``dtype`` is not staged
    return 0 if _staged_dims(list(x.shape), dims) is not None else count


def _products_per_output(args: tuple) -> int:
    weight = args[1] if len(args) > 1 else None
    if not isinstance(weight, torch.Tensor) or weight.dim() < 3:
        return 0
    transposed = bool(args[6]) if len(args) > 6 else False
    groups = int(args[8]) if len(args) > 8 else 1
    return (weight.shape[0] // max(groups, 1) if transposed else weight.shape[1]) * math.prod(weight.shape[2:])
