"""``addcmul`` and ``addcdiv`` in the CPU kernel's order of operations.

torch-mlir's decomposition of ``aten.addcmul`` / ``aten.addcdiv`` gives the
intermediate ``tensor1 * tensor2`` (or ``/``) the *result's* type, so when the
two operands broadcast to fewer elements than ``self`` (``p.addcmul_(a0, b0)``
with 0-d ``a0, b0``; ``torch.addcdiv(p, a.reshape(1), b.reshape(1, 1))``) the
graph failed to lower on every backend ("'tensor.cast' op operand type
'tensor<f32>' and result type 'tensor<3x4xf32>' are cast incompatible") and
ran op by op. Found by the stateful fuzzer (``tools/fuzz/stateful.py``).

The order of operations is the CPU kernel's: ``self + value * t1 * t2`` and
``self + value * t1 / t2``, evaluated left to right, in the promoted dtype.
torch-mlir's decomposition takes the product first (``self + (t1 * t2) * value``),
so every floating ``addcmul``/``addcdiv`` is decomposed here too (``applies``): where
``t1 * t2`` overflows, ``value * t1`` may not (``v0.addcmul_(a, b, value=0.0)`` with
``a * b`` beyond float32's range was NaN where eager keeps ``v0``; stateful fuzz seed
4211), and the two orders round differently (of 1,000 random float32 elements, 312
``addcdiv`` and 150 ``addcmul`` results were an ulp off eager's). Integer results lower
as they are.

Eager's float32 ``addcmul`` kernel computes ``fma(value * t1, t2, self)`` (checked: 0 of
2**20 random elements differ from that, 170,000 from the unfused form), so on targets with
native float64 (``wide`` in ``decompositions.inline``: reference and iree-cpu) the sum is
taken in float64 and rounded once. Unfused, about 16% of elements were an ulp off, and
centered RMSprop with a gradient of 1e38 went NaN on reference (``g*g`` overflowed to inf
before ``inf - inf``) where eager keeps a number. float64 ``addcmul`` (an FMA too) and
Vulkan, which has no float64, keep the unfused form.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from lazy_core.ir import Node, Output

from .embedding_renorm import bfloat16_in_float64

aten = torch.ops.aten

OPS = (aten.addcmul.default, aten.addcdiv.default)
#: Of those, the ops eager's CPU kernel ends in a fused multiply-add (``addcdiv`` rounds its
#: quotient and its sum apart: no FMA).
FUSED = frozenset({aten.addcmul.default})


def applies(node: Node) -> bool:
    """Whether the result is floating, or the operands' broadcast product has another shape
    than the result (integer results lower as they are: their products wrap the same in any
    order)."""
    metas = [a.meta if isinstance(a, Output) else None for a in node.args[1:3]]
    if len(metas) < 2 or any(m is None for m in metas) or node.metas[0] is None:
        return False
    if node.metas[0].dtype.is_floating_point:
        return True
    product = torch.broadcast_shapes(tuple(metas[0].shape), tuple(metas[1].shape))
    return tuple(product) != tuple(node.metas[0].shape)


def _operands(x: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor,
              logical_dtype: torch.dtype | None) -> tuple[torch.Tensor, ...]:
    """The operands in the promoted dtype, then in float32 when that is half precision: the
    kernel rounds each operand to the result dtype and computes in float32 (``_result``).
    Under bf16 emulation (``logical_dtype`` bfloat16, float32 stand-ins) each operand is
    rounded to a bfloat16 value in float32: a 0-d float32 ``t2`` is bf16(0.3) in eager."""
    dtype = elementwise_dtypes(x, t1, t2, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    if logical_dtype == torch.bfloat16 and dtype != torch.bfloat16:
        return tuple(bfloat16_in_float64(t.double()).to(dtype) for t in (x, t1, t2))
    compute = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    return x.to(dtype).to(compute), t1.to(dtype).to(compute), t2.to(dtype).to(compute)


def _result(out: torch.Tensor, x: torch.Tensor, t1: torch.Tensor, t2: torch.Tensor) -> torch.Tensor:
    dtype = elementwise_dtypes(x, t1, t2, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    return out.to(dtype)


def _scaled(t1: torch.Tensor, value: Any) -> torch.Tensor:
    """``value * t1`` with ``value`` first converted to ``t1``'s dtype, as the kernel converts
    it (``addcmul`` of int64 tensors with ``value=0.5`` scales by 0, not 0.5). ``value`` is a
    number or, lifted to a graph argument, a 0-d tensor (``SCALAR_PARAMS_AS_TENSORS``)."""
    if isinstance(value, torch.Tensor):
        return t1 * value.to(t1.dtype)
    if not t1.dtype.is_floating_point and not t1.dtype.is_complex:
        value = int(value)
    return t1 if value == 1 else t1 * value


def addcmul(x: torch.Tensor, tensor1: torch.Tensor, tensor2: torch.Tensor, *, value: Any = 1,
            logical_dtype: torch.dtype | None = None, fma_in_float64: bool = False) -> torch.Tensor:
    a, t1, t2 = _operands(x, tensor1, tensor2, logical_dtype)
    scaled = _scaled(t1, value)
    if fma_in_float64 and scaled.dtype == torch.float32 and t2.dtype == torch.float32 and a.dtype == torch.float32:
        # Eager's kernel is fma(value * t1, t2, self): one rounding of the exact sum. The
        # product of two float32 values is exact in float64 (48 significant bits), so the
        # float64 sum rounded to float32 is the FMA's result (a double rounding can differ
        # only where the float64 sum lies exactly halfway between two float32 values: none
        # in 2**20 random elements), and a product past float32's range does not overflow
        # on the way (``m + g*g - g*g`` stays finite).
        return _result((a.double() + scaled.double() * t2.double()).float(), x, tensor1, tensor2)
    return _result(a + scaled * t2, x, tensor1, tensor2)


def addcdiv(x: torch.Tensor, tensor1: torch.Tensor, tensor2: torch.Tensor, *, value: Any = 1,
            logical_dtype: torch.dtype | None = None) -> torch.Tensor:
    a, t1, t2 = _operands(x, tensor1, tensor2, logical_dtype)
    return _result(a + _scaled(t1, value) / t2, x, tensor1, tensor2)
