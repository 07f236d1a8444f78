"""A one-element slice given more dimensions than its source is reshaped behind a barrier.

IREE 3.13 fails to compile a graph that reshapes a one-element slice to a rank above the
slice's source rank and also computes with the result:

    a = x[:, -1:].unsqueeze(-1)   # x: [1, 12] -> [1, 1] -> [1, 1, 1]
    return a, a.exp()             # (or x.view(-1)[4:5].view(1, 1), x.as_strided((1, 1), ...))

"expected rank to be smaller or equal to the other rank" (fuzz seed 4200, an ``as_strided``
of size (1, 1) read before ``mark_step``). Its dispatch creation
(``BubbleUpExpandShapesPass``) moves the ``tensor.expand_shape`` above the
``tensor.extract_slice`` and makes a slice whose result has more dimensions than its source,
which the verifier refuses; larger slices, or a reshape to the source's rank or less, compile.

The reshape here reads the slice through ``util.optimization_barrier``: the expand_shape then
has no slice to move above, and one element is copied where IREE would have read it in place.
A slice that a scatter writes into, directly or through views, is left alone (a barrier's
buffer must not be written in place; ``reshaped_slices._written_in_place``).
``backend.IreeBackend.source_text`` applies it with the other torch-dialect rewrites.
"""

from __future__ import annotations

import math
from typing import Any

from .donation import _is_block_argument
from .reshaped_slices import _SLICES, _written_in_place
from .rewrites import _RESHAPES, _barrier, _rewrite_each_op, _shape


def separate_unit_slice_expansions(mlir: str) -> str:
    """``mlir`` (torch dialect) with each reshape of a one-element slice to more dimensions
    than the slice's source read through a barrier (see the module's docstring)."""
    if not any(op in mlir for op in _SLICES):
        return mlir
    from torch_mlir import ir

    def separate(block: Any, op: Any) -> bool:
        op = op.operation
        if not _RESHAPES.match(op.name) or _written_in_place(op):
            return False
        out = _shape(op.results[0])
        if out is None or math.prod(out) != 1:
            return False
        value = producer = op.operands[0]
        while not _is_block_argument(producer) and _RESHAPES.match(producer.owner.operation.name):
            producer = producer.owner.operation.operands[0]  # a chain of reshapes of the slice
        if _is_block_argument(producer) or producer.owner.operation.name not in _SLICES:
            return False
        source = _shape(producer.owner.operation.operands[0])
        if source is None or len(out) <= len(source):
            return False
        with ir.InsertionPoint(op), op.location:
            op.operands[0] = _barrier(value)
        return True

    return _rewrite_each_op(mlir, separate)
