"""Float-to-integer casts with eager's result for NaN, infinities and values out of range.

LLVM defines ``fptosi`` only for values that fit the integer type; any other
value gives poison. At run time x86 returns the "integer indefinite" value
(``INT_MIN``), which is what eager PyTorch shows: ``tensor(nan).long()`` is
-2**63, ``.int()`` -2**31, and int16/int8/uint8 get that int32 value
truncated (0; ``300.0`` as int8 is 44). But a value LLVM knows at compile time
folds: a NaN or infinite literal (``torch.clamp(mask, nan, nan).int()``,
``full(1e10)``) turned the cast into poison, the store of its result was
deleted, and the graph returned whatever the output buffer held before
(``[0, 1041385765, 1049774373]`` for ``-2147483648``), on reference and
iree-cpu alike.

``guard_float_to_int_casts`` writes each cast from a floating type to an
integer as ``where(-L <= x < L, x, -L)`` first, with ``L = 2**63`` for int64
and ``2**31`` otherwise (NaN fails both comparisons), then the cast; narrower
integers go through int32, whose wrap is defined. ``-L`` converts exactly, so
every value, folded or not, gets eager's x86 result. Half inputs are widened
to float32 first (``2**31`` is infinite in float16). The guard fuses into the
cast's loop.
"""

from __future__ import annotations

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import meta_tensor, set_meta

__all__ = ["guard_float_to_int_casts"]

aten = torch.ops.aten
prims = torch.ops.prims

_CASTS = (aten._to_copy.default, prims.convert_element_type.default, aten.to.dtype)
_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_HALF = (torch.float16, torch.bfloat16)


def _target_dtype(node: FxNode) -> torch.dtype | None:
    if node.target is aten._to_copy.default:
        return node.kwargs.get("dtype")
    if len(node.args) > 1 and isinstance(node.args[1], torch.dtype):
        return node.args[1]
    return node.kwargs.get("dtype")


def _call(g: Graph, target: object, args: tuple, kwargs: dict, like: torch.Tensor, dtype: torch.dtype,
          trace: str | None) -> FxNode:
    n = g.call_function(target, args, kwargs)
    set_meta(n, meta_tensor(TensorMeta(tuple(like.shape), dtype, tuple(like.stride()))))
    if trace is not None:
        n.meta["stack_trace"] = trace
    return n


def guard_float_to_int_casts(g: Graph) -> bool:
    """Rewrite ``g`` in place (the module docstring); True if it changed."""
    changed = False
    for node in list(g.nodes):
        if node.op != "call_function" or node.target not in _CASTS or not node.args:
            continue
        x = node.args[0]
        val = x.meta.get("val") if isinstance(x, FxNode) else None
        out = _target_dtype(node)
        if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point or out not in _INTS:
            continue
        trace = node.meta.get("stack_trace")
        limit = 2.0 ** 63 if out is torch.int64 else 2.0 ** 31
        with g.inserting_before(node):
            src = x
            if val.dtype in _HALF:
                src = _call(g, aten._to_copy.default, (x,), {"dtype": torch.float32}, val, torch.float32, trace)
            ftype = src.meta["val"].dtype
            low = _call(g, aten.ge.Scalar, (src, -limit), {}, val, torch.bool, trace)
            high = _call(g, aten.lt.Scalar, (src, limit), {}, val, torch.bool, trace)
            ok = _call(g, aten.logical_and.default, (low, high), {}, val, torch.bool, trace)
            guarded = _call(g, aten.where.ScalarOther, (ok, src, -limit), {}, val, ftype, trace)
            if out not in (torch.int64, torch.int32):
                guarded = _call(g, aten._to_copy.default, (guarded,), {"dtype": torch.int32}, val,
                                torch.int32, trace)
        node.args = (guarded, *node.args[1:])
        changed = True
    return changed
