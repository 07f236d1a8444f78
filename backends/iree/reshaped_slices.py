"""Slices of a reshaped value read the value from memory, so iree-compile does not loop forever.

IREE 3.13 never finished compiling a graph that takes a slice of a computed value through a
reshape, when the value's producer lands in the slice's consumer's dispatch:

    m = mask.float()                   # any producer IREE fuses, here a conversion
    z = m.flatten() - m.flatten()[0]   # or m + m.reshape(-1)[:1], m + m.unsqueeze(0).flatten()[0]

Its dispatch formation cannot move the ``tensor.extract_slice`` above the producer through the
``tensor.collapse_shape`` (it does so without a reshape: ``m - m[0, 0]`` compiles), and clones
the slice into the consumer's dispatch next to the producer. There
``TileAndDistributeToWorkgroupsUsingForallOp`` fuses the producer into the slice again and again:
iree-compile ran at full CPU past any timeout, its memory growing by about 100 MB a second
(llvm-cpu and vulkan-spirv alike; found by the fuzzer, seed 9713, and reduced by hand). The same
class of upstream loop is iree-org/iree#18875 and #19404 (producer fusion of a slice of an op
already in the tiled loop).

The value under such a slice is read through ``util.optimization_barrier``: behind it the
producer is computed by a dispatch of its own and the slice reads its result from memory, as it
reads a graph argument (those compile). The slice gets a copy of its view chain on top of the barrier; the other readers of the
value and of its views keep the producer fused.
``backend.IreeBackend.source_text`` applies it after ``materialize_self_updates``, whose view
chains must still see through to their roots; a slice that a scatter writes into, directly or
through more views, is left alone (a barrier's buffer must not be written in place). ``compiler.compile_vmfb``'s time and memory bounds stop what this misses.
"""

from __future__ import annotations

from typing import Any

from .donation import _builtin_type, _is_block_argument
from .rewrites import _RESHAPES, _SCATTERS, _UPDATES, _VIEWS, _barrier, _rewrite_each_op, _shape

#: The slicing ops whose operand is checked.
_SLICES = ("torch.aten.select.int", "torch.aten.slice.Tensor", "torch.aten.narrow")
#: Producers that are already in memory: no dispatch computes them.
_IN_MEMORY = ("torch.vtensor.literal", "torch_c.from_builtin_tensor")


def separate_reshaped_slices(mlir: str) -> str:
    """``mlir`` (torch dialect) with the computed value under each slice-through-a-reshape read
    through a barrier (see the module's docstring)."""
    if not any(op in mlir for op in _SLICES):
        return mlir
    from torch_mlir import ir

    def separate(block: Any, op: Any) -> bool:
        op = op.operation
        if op.name not in _SLICES or _written_in_place(op):
            return False
        chain, value = [], op.operands[0]
        while not _is_block_argument(value) and _VIEWS.match(value.owner.operation.name):
            chain.append(value.owner.operation)
            value = chain[-1].operands[0]
        if not any(_reshapes(v) for v in chain) or _is_block_argument(value) \
                or value.owner.operation.name in _IN_MEMORY or _builtin_type(str(value.type)) is None:
            return False
        with ir.InsertionPoint(op), op.location:
            read = _barrier(value)
            for view in reversed(chain):  # a chain of its own: other readers of the views keep theirs
                copy = view.clone(ip=ir.InsertionPoint(op))
                copy.operands[0] = read
                read = copy.results[0]
        op.operands[0] = read
        return True

    return _rewrite_each_op(mlir, separate)


def _reshapes(view: Any) -> bool:
    """Whether ``view`` gives its operand's elements another shape (not the same one)."""
    return bool(_RESHAPES.match(view.name)) and _shape(view.operands[0]) != _shape(view.results[0])


def _written_in_place(op: Any) -> bool:
    """Whether a scatter or an update takes ``op``'s result, or a view of it, as the tensor it
    writes into (IREE may write into that buffer in place: behind the barrier, the value's own)."""
    pending, seen = [op], set()
    while pending:
        current = pending.pop()
        for use in current.results[0].uses:
            user = use.owner
            if use.operand_number == 0 and (_SCATTERS.match(user.name) or user.name in _UPDATES):
                return True
            if use.operand_number == 0 and _VIEWS.match(user.name) and id(user) not in seen:
                seen.add(id(user))
                pending.append(user)
    return False
