"""Small integer tensors (uint8, int8, int16) computed in int32, with PyTorch's results.

torch-mlir (20261001) cannot lower most ops on 8-bit integers, and some it
lowers wrong; the compilers below it get some 16-bit ops wrong:

* Converting any value *to* an 8-bit type inside an op's lowering
  (``convertScalarToDtype``: the scalar of ``x * 3``, the fill value of
  ``torch.ones(5, dtype=torch.uint8)``, the initial value of ``x.max()``)
  needs the original torch dtype, which most patterns do not pass: the
  conversion reports "unimplemented: ... dstOriginalDtype has to be passed"
  and returns a null value. Where the pattern does not check for it the
  process dies (``(u8 * 0 + 1)`` was a segfault on the reference backend).
* ``ui8`` becomes a signless ``i8``, and a conversion *from* it that is not
  told its torch dtype sign-extends: ``u8.sum()``, ``u8 * 0.5``, ``u8 / 255``,
  ``sort`` and comparisons read 200 as -56.
* int16 (IREE 3.13): ``-x`` of -32768 gave 32767 on llvm-cpu, and ``%`` of
  -32768 read it as 32768 on Vulkan (lavapipe).
* Only ``aten.to.dtype`` (``_to_copy``) is lowered with both dtypes known:
  zero- or sign-extension, truncation and float conversion are all exact.

So before import, every op that computes on small integers is rewritten to
compute on int32 values between explicit casts: its small operands are cast
up (exact), it runs in int32, and its small results are cast back down
(truncation). For ``+ - *``, bitwise ops, negation and sums this is exact by
modular arithmetic. For the ops whose result depends on more than the low
bits (``//``, ``%``, comparisons, min/max, shifts) the operands must first be
what PyTorch computes with: every operand of an elementwise op is converted
to the op's common dtype, so a Python scalar wraps (``u8 > 300`` compares
with 44, ``u8 // -1`` divides by 255), and a shift by the width or more (or
by a negative amount) gives 0 or the sign; those conversions are made
explicit here too. Ops that only move values (views, ``cat``,
``index_select``, ``where``) stay small: their lowering converts nothing.
bool lowers correctly and is left alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import fake_tensor, meta_tensor, set_meta

__all__ = ["SMALL", "WIDE", "widen_small_ints"]

aten = torch.ops.aten

#: The dtypes computed in ``WIDE``.
SMALL = frozenset({torch.uint8, torch.int8, torch.int16})
#: Wide enough for every exact intermediate (a product of two int16 values)
#: and native on every target (Vulkan included); int64 would double the traffic.
WIDE = torch.int32

#: Conversions: lowered through ``aten.to.dtype``, which knows both dtypes.
#: ``view.dtype`` reinterprets bits and must keep its input's width.
_CASTS = frozenset({
    aten._to_copy.default, aten.to.dtype, aten.to.dtype_layout, aten.to.other,
    aten.view.dtype, torch.ops.prims.convert_element_type.default,
})

#: Ops that only move values (by ``OpOverloadPacket`` name): no conversion
#: inside their lowering, so small values stay small (an image permuted on the
#: device moves a quarter of the bytes). Operands of another dtype than the
#: result (``cat([u8, i64])`` promotes) are cast to it first, explicitly.
_MOVES = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "permute", "transpose", "t", "expand",
    "slice", "select", "narrow", "squeeze", "unsqueeze", "clone", "alias", "detach", "cat",
    "stack", "flip", "roll", "repeat", "unfold", "as_strided", "movedim", "split",
    "split_with_sizes", "unbind", "chunk", "index_select", "gather", "select_scatter",
    "slice_scatter", "view_copy", "permute_copy", "expand_copy", "slice_copy", "select_copy",
    "unsqueeze_copy", "squeeze_copy", "transpose_copy", "t_copy",
})
#: ... and these overloads of otherwise computing op packets.
_MOVE_OVERLOADS = frozenset({aten.where.self, aten.index.Tensor})

#: Elementwise ops not tagged ``pointwise`` that still promote their operands
#: to one common dtype (the other ``where`` forms take a scalar operand).
_PROMOTING = frozenset({
    aten.floor_divide.default, aten.floor_divide.Scalar, aten.where.ScalarOther,
    aten.where.ScalarSelf, aten.where.Scalar,
})

#: Ops whose Scalar argument is converted to the result's dtype (a fill
#: value): it wraps like ``(uint8)v`` does.
_FILLS = frozenset({
    aten.fill.Scalar, aten.full.default, aten.full_like.default, aten.new_full.default,
    aten.constant_pad_nd.default, aten.index_fill.int_Scalar, aten.scatter.value,
})

#: Shifts: an amount outside [0, bits) shifts everything out (the sign
#: remains for a signed right shift), as PyTorch's kernels define it; in
#: int32 such an amount is made ``bits``, which gives the same result. (The
#: Tensor forms arrive decomposed, range-safe for every width: decompositions.py.)
_SHIFTS = frozenset({
    aten.__lshift__.Scalar, aten.__lshift__.Tensor, aten.__rshift__.Scalar, aten.__rshift__.Tensor,
    aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
    aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
})

#: Tensor arguments that select or index rather than carry values.
_NOT_VALUES = frozenset({"condition", "mask", "index", "indices"})


def _dtype(x: Any) -> torch.dtype | None:
    val = x.meta.get("val") if isinstance(x, FxNode) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _number(x: Any) -> Any:
    """A number argument's value: the constant, or a scalar parameter's example value."""
    if isinstance(x, FxNode):
        val = x.meta.get("val")
        return val if isinstance(val, bool | int | float) else None
    return x if isinstance(x, bool | int | float) else None


def _wrap(value: bool | int | float, dtype: torch.dtype) -> bool | int | float:
    """``value`` converted to ``dtype`` the way PyTorch's kernels convert a scalar operand."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return value  # PyTorch refuses it before any graph is built
        value = int(value)  # C's float -> integer conversion truncates
    info = torch.iinfo(dtype)
    span = info.max - info.min + 1
    return (value - info.min) % span + info.min


def _promoted(values: list[Any]) -> torch.dtype | None:
    """The common dtype PyTorch converts these operands to (tensor nodes and numbers)."""
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    args = []
    for v in values:
        dtype = _dtype(v)
        if dtype is not None:
            args.append(v.meta["val"])
        elif _number(v) is not None:
            args.append(_number(v))
    if not args:
        return None
    try:
        return elementwise_dtypes(*args, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    except Exception:  # a form the promotion helper does not know: no rewrite
        return None


class _Args:
    """A node's arguments by schema position, to read and replace them by name."""

    def __init__(self, node: FxNode) -> None:
        self.node = node
        self.schema = node.target._schema
        self.args = list(node.args)
        self.kwargs = dict(node.kwargs)

    def items(self) -> list[tuple[Any, Any]]:
        out = []
        for i, arg in enumerate(self.schema.arguments):
            if not arg.kwarg_only and i < len(self.args):
                out.append((arg, self.args[i]))
            elif arg.name in self.kwargs:
                out.append((arg, self.kwargs[arg.name]))
        return out

    def set(self, arg: Any, value: Any) -> None:
        i = self.schema.arguments.index(arg)
        if not arg.kwarg_only and i < len(self.args):
            self.args[i] = value
        else:
            self.kwargs[arg.name] = value

    def commit(self) -> None:
        self.node.args = tuple(self.args)
        self.node.kwargs = self.kwargs


def _kind(arg: Any) -> str:
    t = str(arg.type)
    if t in ("Tensor", "Optional[Tensor]"):
        return "tensor"
    if t.startswith("List[") and "Tensor" in t:
        return "tensors"
    if t in ("number", "Optional[number]"):
        return "number"
    return "other"


class _Widener:
    """The rewrite of one graph: conversions it made (reused per value and
    dtype) and scalar parameters it read wrapped."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self._params: dict[tuple, FxNode] = {}
        self.created: list[FxNode] = []
        self._casts: dict[tuple[FxNode, torch.dtype], FxNode] = {}

    # -- new nodes ---------------------------------------------------------------------
    def _call(self, target: Any, args: tuple, kwargs: dict, val: Any, like: FxNode) -> FxNode:
        n = self.g.call_function(target, args, kwargs)
        self.created.append(n)
        set_meta(n, val)
        if "stack_trace" in like.meta:
            n.meta["stack_trace"] = like.meta["stack_trace"]
        return n

    def cast(self, x: FxNode, dtype: torch.dtype, like: FxNode) -> FxNode:
        """``x`` converted to ``dtype``; once per value (nodes are visited in
        order, so the first conversion precedes every later use)."""
        hit = self._casts.get((x, dtype))
        if hit is not None:
            return hit
        val = x.meta["val"]
        m = TensorMeta(tuple(val.shape), dtype, tuple(val.stride()))
        self._casts[x, dtype] = n = self._call(*_cast_call(x, dtype), meta_tensor(m), like)
        return n

    def _clamp_shift(self, x: FxNode, bits: int, like: FxNode) -> FxNode:
        """Amounts below 0 or above ``bits`` become ``bits``."""
        val = x.meta["val"]
        flags = meta_tensor(TensorMeta(tuple(val.shape), torch.bool, tuple(val.stride())))
        low = self._call(aten.lt.Scalar, (x, 0), {}, flags, like)
        high = self._call(aten.gt.Scalar, (x, bits), {}, flags, like)
        bad = self._call(aten.logical_or.default, (low, high), {}, flags, like)
        return self._call(aten.masked_fill.Scalar, (x, bad, bits), {}, val, like)

    def wrapped_param(self, item: FxNode, dtype: torch.dtype, shift_bits: int | None) -> FxNode:
        """A scalar parameter (``item`` of a 0-d tensor) converted to ``dtype`` in the graph."""
        key = (item, dtype, shift_bits)
        hit = self._params.get(key)
        if hit is not None:
            return hit
        if item.target is not aten.item.default:
            return item  # not a scalar parameter we know how to convert
        source = item.args[0]
        with self.g.inserting_before(item.next):  # in order, after the parameter's read
            t = source
            if _dtype(t) is not None and (_dtype(t).is_floating_point or _dtype(t).is_complex):
                t = self.cast(t, torch.int64, item)
            t = self.cast(self.cast(t, dtype, item), torch.int64, item)
            if shift_bits is not None:
                t = self._clamp_shift(t, shift_bits, item)
            value = _wrap(item.meta["val"], dtype)
            if shift_bits is not None and not 0 <= value <= shift_bits:
                value = shift_bits
            new = self._call(aten.item.default, (t,), {}, value, item)
        self._params[key] = new
        return new

    def wrapped(self, x: Any, dtype: torch.dtype, shift_bits: int | None = None) -> Any:
        if isinstance(x, FxNode):
            return self.wrapped_param(x, dtype, shift_bits)
        if isinstance(x, bool | int | float):
            value = _wrap(x, dtype)
            if shift_bits is not None and not isinstance(value, float) and not 0 <= value <= shift_bits:
                value = shift_bits
            return value
        return x

    # -- the rewrite of one node ---------------------------------------------------------------
    def rewrite(self, node: FxNode) -> None:
        op = node.target
        if op in _CASTS:
            self._cast_down(node)
            return
        a = _Args(node)
        items = a.items()
        outputs = self._outputs(node)
        out = outputs[0] if outputs else None
        small_out = any(d in SMALL for d in outputs)
        values = [(arg, v) for arg, v in items if _kind(arg) == "tensor" and arg.name not in _NOT_VALUES
                  and _dtype(v) is not None]
        small_in = any(_dtype(v) in SMALL for _, v in values)
        small_dtype_arg = any(isinstance(v, torch.dtype) and v in SMALL for _, v in items)
        lists = [(arg, v) for arg, v in items if _kind(arg) == "tensors" and arg.name not in _NOT_VALUES]
        small_list = any(_dtype(x) in SMALL for _, v in lists for x in (v or ()))
        if not (small_in or small_out or small_dtype_arg or small_list):
            return
        if op.overloadpacket.__name__ in _MOVES or op in _MOVE_OVERLOADS:
            self._match_dtypes(node, a, values, lists, out)
            return
        with self.g.inserting_before(node):
            if (torch.Tag.pointwise in op.tags or op in _PROMOTING) and self._promote(node, a, items, values, out):
                self._retype_outputs(node, outputs)
                return
            # Everything else (reductions, creation, fills, indexing): small
            # operands and dtype arguments become int32; fill values wrap.
            changed = False
            for arg, v in items:
                kind = _kind(arg)
                if kind == "tensor" and arg.name not in _NOT_VALUES and _dtype(v) in SMALL:
                    a.set(arg, self.cast(v, WIDE, node))
                elif isinstance(v, torch.dtype) and v in SMALL:
                    a.set(arg, WIDE)
                elif kind == "number" and op in _FILLS and out in SMALL:
                    a.set(arg, self.wrapped(v, out))
                    continue
                else:
                    continue
                changed = True
        if changed:  # else its small result is not of its operands' making: nothing to widen
            a.commit()
            self._retype_outputs(node, outputs)

    def _cast_down(self, node: FxNode) -> None:
        """A conversion to a small dtype: from a float through int32 (``fptosi``
        to 8 bits is poison above 127: iree-cpu saturated ``200.0`` to 127,
        where PyTorch's CPU kernels convert through int32 and wrap), and to
        uint8 in the form that never folds (Note [No uint8 constants])."""
        target, source = _dtype(node), node.args[0] if node.args else None
        if node.target is aten.view.dtype or target not in SMALL or _dtype(source) is None:
            return
        if _dtype(source).is_floating_point or _dtype(source).is_complex:
            with self.g.inserting_before(node):
                source = self.cast(source, WIDE, node)
        elif target != torch.uint8:
            return
        node.target, node.args, node.kwargs = _cast_call(source, target)

    def _promote(self, node: FxNode, a: _Args, items: list, values: list, out: torch.dtype | None) -> bool:
        """An elementwise op: operands converted to their common dtype as PyTorch
        does, in int32 where that is a small dtype. False if the op does not follow the
        default promotion (``masked_fill.Tensor`` keeps ``self``'s dtype)."""
        # A Python number can also stand in a Tensor argument (``x // 300``
        # is recorded as ``floor_divide(x, 300)``).
        numbers = [(arg, v) for arg, v in items if _kind(arg) in ("number", "tensor") and _number(v) is not None]
        common = _promoted([v for _, v in values] + [v for _, v in numbers])
        if common is None:
            return False
        if common in SMALL and out in (common, torch.bool):
            bits = torch.iinfo(common).bits if node.target in _SHIFTS else None
            for arg, v in values:
                d = _dtype(v)
                if d != common and d != torch.bool:
                    v = self.cast(v, common, node)  # wraps, as the kernel's conversion does
                v = self.cast(v, WIDE, node)
                if bits is not None and arg.name == "other":
                    v = self._clamp_shift(v, bits, node)
                a.set(arg, v)
            for arg, v in numbers:
                if isinstance(_number(v), bool):
                    continue
                a.set(arg, self.wrapped(v, common, bits if arg.name == "other" else None))
        elif common in SMALL and out is not None and (out.is_floating_point or out.is_complex):
            # Integer to float (true division, sqrt): the operands' exact values, no wrap.
            for arg, v in values:
                if _dtype(v) in SMALL:
                    a.set(arg, self.cast(v, WIDE, node))
        elif common not in SMALL and out in (common, torch.bool):
            # u8 * f32, u8 + i32: each small operand converted explicitly (exact).
            for arg, v in values:
                if _dtype(v) in SMALL:
                    a.set(arg, self.cast(v, common, node))
        else:
            return False
        a.commit()
        return True

    def _match_dtypes(self, node: FxNode, a: _Args, values: list, lists: list, out: torch.dtype | None) -> None:
        """A move op whose small operands differ from its result's dtype: cast them first."""
        if out is None:
            return
        with self.g.inserting_before(node):
            for arg, v in values:
                d = _dtype(v)
                if d != out and (d in SMALL or out in SMALL):
                    a.set(arg, self.cast(v, out, node))
            for arg, v in lists:
                if v and any(_dtype(x) not in (None, out) and (_dtype(x) in SMALL or out in SMALL) for x in v):
                    a.set(arg, [self.cast(x, out, node) if _dtype(x) not in (None, out) else x for x in v])
        a.commit()

    # -- results ---------------------------------------------------------------------------
    @staticmethod
    def _outputs(node: FxNode) -> list[torch.dtype]:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            return [val.dtype]
        if isinstance(val, list | tuple):
            return [v.dtype for v in val if isinstance(v, torch.Tensor)]
        return []

    def _retype_outputs(self, node: FxNode, outputs: list[torch.dtype]) -> None:
        """Small results are computed as int32 and cast back down (truncation)."""
        if not any(d in SMALL for d in outputs):
            return
        val = node.meta["val"]
        if isinstance(val, torch.Tensor):
            self._narrow_after(node, val)
            return
        wide = tuple(self._widened(v, fake=True) if isinstance(v, torch.Tensor) else v for v in val)
        node.meta["val"] = wide
        for user in list(node.users):
            old = user.meta.get("val")
            if isinstance(old, torch.Tensor) and old.dtype in SMALL:
                self._narrow_after(user, old)

    @staticmethod
    def _widened(val: torch.Tensor, fake: bool = False) -> torch.Tensor:
        m = TensorMeta(tuple(val.shape), WIDE if val.dtype in SMALL else val.dtype, tuple(val.stride()))
        return fake_tensor(m) if fake else meta_tensor(m)

    def _narrow_after(self, node: FxNode, old: torch.Tensor) -> None:
        if old.dtype not in SMALL:
            return
        set_meta(node, self._widened(old))
        with self.g.inserting_after(node):
            narrow = self._call(*_cast_call(node, old.dtype), old, node)
        node.replace_all_uses_with(narrow, delete_user_cb=lambda user: user is not narrow)


def _cast_call(x: FxNode, dtype: torch.dtype) -> tuple[Any, tuple, dict]:
    """The op and arguments that convert ``x`` to ``dtype``.

    Note [No uint8 constants]: torch-mlir folds a conversion of a constant
    into a constant of the result type, and a ``ui8`` constant is invalid
    (``torch.vtensor.literal`` infers ``si8`` for it, and the module no
    longer verifies: ``torch.ones_like(u8)`` failed so). ``aten.to.dtype``
    with ``copy=True`` is never folded and lowers to the same conversion, so
    every value converted to uint8 is made with it.
    """
    if dtype == torch.uint8:
        return aten.to.dtype, (x, dtype, False, True), {}
    return aten._to_copy.default, (x,), {"dtype": dtype}


def _has_small(g: Graph) -> bool:
    for n in g.nodes:
        val = n.meta.get("val")
        vals = val if isinstance(val, list | tuple) else (val,)
        if any(isinstance(v, torch.Tensor) and v.dtype in SMALL for v in vals):
            return True
        if any(isinstance(v, torch.dtype) and v in SMALL for v in (*n.args, *n.kwargs.values())):
            return True
    return False


def widen_small_ints(g: Graph) -> bool:
    """Rewrite ``g`` in place so that no op computes on small integers; True if it changed.

    Function arguments and results keep their dtypes: the casts are inside.
    """
    if not _has_small(g):
        return False
    w = _Widener(g)
    for node in list(g.nodes):
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            w.rewrite(node)
    # Unused now: a scalar parameter's plain read (every use reads it wrapped),
    # and conversions made for an op that then kept its operands.
    for n in [*reversed(w.created), *{key[0] for key in w._params}]:
        if not n.users:
            g.erase_node(n)
    return True

