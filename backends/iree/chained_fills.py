"""Constants written into neighbouring slices of one tensor are read from memory, so IREE compiles them.

IREE 3.13 turns a ``slice_scatter`` of a splat constant into a ``stream.async.fill`` of the
slice, and merges two such fills in a row into one whose offset it adds up twice: "'stream.async.fill'
op has invalid Write access range [920 to 620 for 288] of resource ... with size 620", and the
graph failed to compile on iree-cpu (and iree-vulkan). DistributedDataParallel with
``find_unused_parameters=True`` is one: its reducer zero-fills the unused parameters' slices of a
bucket, so every training step ran op by op (found by an adversarial DDP run). Reduced:

    b = torch.empty(20); b = b.slice_scatter(zeros(5), 0, 15, 20); b = b.slice_scatter(zeros(10), 0, 5, 15)

Where a ``slice_scatter`` of a splat constant writes into the result of another one, both
constants are read through ``util.optimization_barrier``: IREE then copies them from a buffer it
filled once, and forms no fill of the slice. A barrier's result is only read here (the scatter's
source), never written in place.
"""

from __future__ import annotations

from typing import Any

from .donation import _builtin_type, _is_block_argument
from .rewrites import _RESHAPES, _barrier, _rewrite_each_op

_SCATTER = "torch.aten.slice_scatter"


def separate_chained_fills(mlir: str) -> str:
    """``mlir`` (torch dialect) with the constant sources of chained slice scatters behind barriers."""
    if mlir.count(_SCATTER) < 2 or "torch.vtensor.literal" not in mlir:
        return mlir
    from torch_mlir import ir

    def separate(block: Any, op: Any) -> bool:
        op = op.operation
        if op.name != _SCATTER or _is_block_argument(op.operands[0]):
            return False
        before = op.operands[0].owner.operation
        if before.name != _SCATTER or not (_constant(op.operands[1]) and _constant(before.operands[1])):
            return False
        if any(_builtin_type(str(scatter.operands[1].type)) is None for scatter in (before, op)):
            return False
        for scatter in (before, op):
            with ir.InsertionPoint(scatter), scatter.location:
                scatter.operands[1] = _barrier(scatter.operands[1])
        return True

    return _rewrite_each_op(mlir, separate)


def _constant(value: Any) -> bool:
    """Whether ``value`` is a ``torch.vtensor.literal``, possibly reshaped."""
    while not _is_block_argument(value):
        owner = value.owner.operation
        if owner.name == "torch.vtensor.literal":
            return True
        if not _RESHAPES.match(owner.name):
            return False
        value = owner.operands[0]
    return False
