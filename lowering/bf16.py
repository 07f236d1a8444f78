"""bfloat16 emulation: every bf16 value computed in f32 and rounded to bf16 after each op.

Why: no compiler we target computes bf16 as PyTorch does. PyTorch (on the
CPU) computes each bf16 op in f32 and rounds its result to bf16,
round-to-nearest-even; reductions and matmuls accumulate in f32 and round
once. Given bf16 IR as it is:

* MLIR's JIT (the ``reference`` backend) lowers bf16 arithmetic by rounding
  every step, accumulators included: a bf16 ``sum`` of 32000 ones stops
  growing at 256, and LLVM's own bf16 conversions call compiler-rt's
  ``__truncsfbf2``, which the JIT does not link.
* IREE 3.13 folds ``extf(truncf(x))`` to ``x`` when it widens bf16 arithmetic
  to f32 (``iree-convert-bf16-arith-to-f32``), so intermediate roundings
  vanish (``x.to(torch.bfloat16) + 1`` rounds once, not twice); its bf16
  reductions accumulate in bf16 (a 64000-element sum came out 4096 instead of
  32000 on llvm-cpu); and vulkan-spirv cannot compile a bf16 reduction at all
  (``'spirv.Bitcast' op mismatch in result type bitwidth 32 and operand type
  bitwidth 16``). ``--iree-input-promote-bf16-to-f32`` computes in f32 but
  drops every rounding (``x.bfloat16().float()`` is ``x``) and leaves f32
  bytes in buffer views tagged bf16.

So a backend may ask the lowering (``LoweringContext(emulate_bf16=...)``) to
write bf16 out of the computation: each op whose result is bf16 runs on f32
operands (bf16 dtype arguments become f32) and its result is rounded to the
nearest bf16 (ties to even), kept in an f32 tensor. The values are then
PyTorch's, up to f32 rounding inside composite ops. Two ways to round, as
the compiler allows (``MODES``):

``"bits"``
    Integer arithmetic on the f32 bit pattern (``aten.view.dtype`` to int32,
    add ``0x7FFF`` plus the kept part's lowest bit, clear the low 16 bits;
    NaN stays NaN): no compiler can fold it away, and no bf16 type is left in
    the module. bf16 arguments and results cross the function boundary as
    int16 tensors holding the same bits (``ArgInfo.dtype`` int16,
    ``logical_dtype`` bf16), so device buffers stay two bytes per element.
    Needs ``aten.view.dtype``: IREE lowers it, torch-mlir's linalg
    conversion does not.
``"casts"``
    A round trip through bf16 (``_to_copy`` to bf16 and back to f32), for
    compilers that keep both conversions (MLIR's ``arith-expand`` turns them
    into integer code). bf16 arguments and results cross the boundary as f32
    tensors holding the same values.

Ops whose results are elements of their first operand (views, copies,
gathers) skip the rounding when that operand was bf16: it is exact already.
Operands that PyTorch rounds to bf16 before an op (``ROUNDS_OPERANDS``:
scalars of ``add``/``sub``, tensors of another dtype) are rounded first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph

from lazy_core.ir import TensorMeta

from .errors import LoweringError

aten = torch.ops.aten

MODES = ("bits", "casts")

#: Where the emulated values live, and what crosses the function boundary in each mode.
COMPUTE_DTYPE = torch.float32
_CARRIERS = {"bits": torch.int16, "casts": torch.float32}

#: f32 bits of the quiet NaN a rounded NaN becomes (PyTorch's bf16 NaN is 0x7FC0).
_NAN_BITS = 0x7FC00000

#: Ops whose every result element is an element of the first operand: a
#: bf16 operand gives an exactly representable result, no rounding needed.
PRESERVES_VALUES = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.alias.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.expand.default,
    aten.slice.Tensor, aten.select.int, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
    aten.unsqueeze.default, aten.clone.default, aten.detach.default, aten.as_strided.default,
    aten.diagonal.default, aten.flip.default, aten.roll.default, aten.repeat.default,
    aten.index_select.default, aten.gather.default, aten.index.Tensor, aten.unfold.default,
    aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int, aten.lift_fresh_copy.default,
    aten.neg.default, aten.abs.default, aten.relu.default,
})

#: Elementwise ops whose operands PyTorch's CPU kernels round to bf16 before
#: computing in f32, when the result is bf16: TensorIterator casts every
#: input to the common dtype, and these kernels read Python scalars (``other``,
#: ``alpha``, an exponent) in it too. ``x - 1.3`` is ``x - bf16(1.3)``.
ROUNDS_OPERANDS = frozenset({
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.rsub.Tensor, aten.rsub.Scalar,
    aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar, aten.where.self, aten.maximum.default,
    aten.minimum.default,
    # ``fmod(x, 0.3)`` divides by bf16(0.3) = 0.30078125: 15% off at x = 2.14 when it did not.
    aten.fmod.Scalar, aten.fmod.Tensor, aten.remainder.Scalar, aten.remainder.Tensor,
    aten.remainder.Scalar_Tensor,
    # ``tanh_backward(g_bf16, y_f16)`` casts ``y`` to bf16 first; its decomposition (operands of
    # two shapes), traced on f32 stand-ins, computed with the unrounded float16 (adversary round 41).
    aten.tanh_backward.default,
    # ``clamp(x, -1.5, -3e-42)`` bounds by bf16(-3e-42) = -0.0: 0.0 stays 0.0, where the
    # float32 bound made it -0.0 (fuzz seed 2 program 17 under a bf16 default dtype).
    aten.clamp.default, aten.clamp.Tensor, aten.clamp_min.default, aten.clamp_min.Tensor,
    aten.clamp_max.default, aten.clamp_max.Tensor,
    # ``hardtanh`` is ``clamp``; ``hardshrink`` reads ``lambd`` in bf16: bf16(0.30001) = 0.30078125
    # is zeroed (an adversarial sweep of numbers through activations).
    aten.hardtanh.default, aten.hardshrink.default,
})
#: Ops that round tensor operands but read Python scalars and 0-d tensors
#: unrounded (``mul`` and ``div`` use TensorIterator's original scalar value).
ROUNDS_TENSOR_OPERANDS = frozenset({aten.mul.Tensor, aten.div.Tensor, aten.div.Tensor_mode})
#: Ops that round every tensor operand, 0-d ones included, but read their Python
#: ``value`` in f32: ``addcmul(x, y, torch.tensor(0.3))`` multiplies by bf16(0.3).
ROUNDS_ALL_TENSOR_OPERANDS = frozenset({aten.addcmul.default, aten.addcdiv.default})

#: Comparisons: a bool result, computed in the operands' common dtype. When that is bf16 (a bf16
#: tensor against a Python number, a 0-d float32 tensor or an integer tensor), TensorIterator
#: converts the other operand to bf16 first: ``x_bf16 >= 1.002`` compares with 1.0, and
#: ``x_bf16 > -3e-42`` with -0.0.
COMPARISONS = frozenset({
    aten.eq.Scalar, aten.ne.Scalar, aten.lt.Scalar, aten.le.Scalar, aten.gt.Scalar, aten.ge.Scalar,
    aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor, aten.ge.Tensor,
})

#: emit(op, args, kwargs, meta) appends one FX call typed by ``meta`` and returns it.
Emit = Callable[[Any, tuple, dict, TensorMeta], Any]


def check_mode(mode: str | None) -> str | None:
    """``mode`` if it is one of ``MODES`` (or None: no emulation); else ValueError naming them."""
    if mode is not None and mode not in MODES:
        raise ValueError(f"bf16 emulation mode {mode!r}: choose one of {', '.join(MODES)} (or None)")
    return mode


def carrier_dtype(mode: str) -> torch.dtype:
    """The dtype bf16 arguments and results have at the function boundary in ``mode``."""
    return _CARRIERS[mode]


def emulated(meta: TensorMeta) -> TensorMeta:
    """``meta`` as the emulation computes it: bf16 becomes f32, other dtypes stay."""
    return meta._replace(dtype=COMPUTE_DTYPE) if meta.dtype == torch.bfloat16 else meta


def swap_dtype(x: Any) -> Any:
    """A constant argument as the emulation passes it: ``torch.bfloat16`` becomes f32."""
    return COMPUTE_DTYPE if x is torch.bfloat16 else x


def _like(meta: TensorMeta, dtype: torch.dtype) -> TensorMeta:
    return meta._replace(dtype=dtype)


def check_none_left(g: Graph, subgraphs: list[Graph]) -> None:
    """Raise LoweringError if a value of ``g`` (or of its loop bodies) is still typed bf16.

    In "bits" mode the compiled code must hold no bf16 value: a compiler that asked for it
    cannot compute bf16 as PyTorch does, and IREE's CPU code converts to bf16 through the
    compiler-rt routine ``__truncsfbf2``, which its runtime loader cannot resolve: the process
    exits at the call ("symbol lookup error", exit status 127). A rewrite that leaves one is a
    bug; the graph then runs op by op with PyTorch's kernels instead of killing the process."""
    for graph in (g, *subgraphs):
        for n in graph.nodes:
            val = n.meta.get("val")
            vals = val if isinstance(val, tuple | list) else (val,)
            if any(isinstance(v, torch.Tensor) and v.dtype == torch.bfloat16 for v in vals):
                where = n.meta.get("stack_trace") or "(no user line)"
                raise LoweringError(f"bf16 emulation left a bfloat16 value: {n.format_node()} at {where.strip()}")


def bitcast(emit: Emit, x: Any, meta: TensorMeta, dtype: torch.dtype) -> Any:
    """``x`` (shaped ``meta``) reinterpreted as ``dtype`` of the same width (a 0-d one goes
    through shape [1] later: ``tensor_bitcasts.route_zero_dim_bitcasts``)."""
    return emit(aten.view.dtype, (x, dtype), {}, _like(meta, dtype))


def round_value(emit: Emit, x: Any, meta: TensorMeta, mode: str) -> Any:
    """``x`` (f32, shaped ``meta``) rounded to the nearest bf16, ties to even, still f32."""
    f32, i32 = _like(meta, torch.float32), _like(meta, torch.int32)
    if mode == "casts":
        narrow = emit(aten._to_copy.default, (x,), {"dtype": torch.bfloat16}, _like(meta, torch.bfloat16))
        return emit(aten._to_copy.default, (narrow,), {"dtype": torch.float32}, f32)
    bits = bitcast(emit, x, f32, torch.int32)
    high = emit(aten.__rshift__.Scalar, (bits, 16), {}, i32)
    lsb = emit(aten.bitwise_and.Scalar, (high, 1), {}, i32)
    biased = emit(aten.add.Tensor, (bits, lsb), {}, i32)
    biased = emit(aten.add.Scalar, (biased, 0x7FFF), {}, i32)
    kept = emit(aten.bitwise_and.Scalar, (biased, -0x10000), {}, i32)  # 0xFFFF0000 as int32
    # A NaN's bits plus the bias may carry into the exponent or the sign: keep it a NaN.
    nan = emit(aten.isnan.default, (x,), {}, _like(meta, torch.bool))
    kept = emit(aten.masked_fill.Scalar, (kept, nan, _NAN_BITS), {}, i32)
    return bitcast(emit, kept, i32, torch.float32)


def from_bits(emit: Emit, h: Any, meta: TensorMeta) -> Any:
    """int16 bf16 bit patterns ``h`` as f32 values (exact): the bits become the f32's high half."""
    i32 = _like(meta, torch.int32)
    wide = emit(aten._to_copy.default, (h,), {"dtype": torch.int32}, i32)
    wide = emit(aten.__lshift__.Scalar, (wide, 16), {}, i32)
    return bitcast(emit, wide, i32, torch.float32)


def to_bits(emit: Emit, y: Any, meta: TensorMeta) -> Any:
    """f32 values ``y`` already rounded to bf16, as int16 bf16 bit patterns (their high half)."""
    i32 = _like(meta, torch.int32)
    bits = bitcast(emit, y, _like(meta, torch.float32), torch.int32)
    high = emit(aten.__rshift__.Scalar, (bits, 16), {}, i32)
    return emit(aten._to_copy.default, (high,), {"dtype": torch.int16}, _like(meta, torch.int16))


def round_literal(x: float | int) -> float | int:
    """Python number ``x`` rounded to bf16 (``x`` itself when it is exact)."""
    r = float(torch.tensor(x, dtype=torch.float32).to(torch.bfloat16))
    return x if r == x else r
