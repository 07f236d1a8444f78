"""``pow`` in every form, as eager PyTorch computes it, special values included.

torch-mlir lowers a floating ``pow`` to ``math.powf``, and the backends do
not agree with C's ``pow`` on its special cases. IREE (llvm-cpu) computes
``exp(y * log(x))``: ``pow(x, y)`` of a negative base with a tensor exponent
was NaN (``(-2) ** 3``), ``0 ** 0`` NaN, ``2 ** -1`` of a constant base and
``x ** -1`` at ``x = 0`` wrong. Integer ``pow`` with a tensor exponent did not lower
at all ("non-floating point dtype").

So every ``pow`` is decomposed here (``decompositions`` lists the ops): the
backend's ``pow`` only ever sees a positive finite base and a finite
exponent, where all of them agree with libm, and the rest follows the C99
rules (Annex F.10.4.4) that PyTorch's CPU kernels inherit from ``std::pow``:
the sign from an odd integer exponent, NaN for a negative finite base and a
non-integer exponent, zeros and infinities by the base's magnitude, ``1``
whenever the exponent is 0 or the base is 1 (even for NaN). Small integer
constant exponents are what the CPU kernel computes for them (``x ** 2``
is ``x * x``, ``x ** -1`` is ``1 / x``, ``x ** 0.5`` is ``sqrt(x)``, so
``(-inf) ** 0.5`` is NaN as in eager, not C's inf).

An integer-valued exponent up to ``_MAX_PRODUCT_EXPONENT`` in magnitude is
computed by repeated squaring, not by the backend's ``pow``: IREE's is
``exp(y * log(x))``, a few ulps off libm, so ``26.0 ** 1`` was
``26.000000000000004`` in float64 and ``26.0 ** 2`` ``675.9999`` in float32,
and a ``floor`` or ``//`` after it was off by one where eager is exact (fuzz
seed 5201). Products are exact whenever the power is representable, as
libm's correctly rounded ``pow`` is, and within an ulp or two of it
otherwise; every intermediate lies between 1 and the result, so none
overflows or underflows early.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

aten = torch.ops.aten

_INF = float("inf")
_NAN = float("nan")

#: Integer-valued exponents up to this magnitude are computed by products
#: (8 squarings for a tensor exponent); larger ones by the backend's ``pow``.
_MAX_PRODUCT_EXPONENT = 255
_PRODUCT_BITS = _MAX_PRODUCT_EXPONENT.bit_length()


def _result_dtype(*args: Any) -> torch.dtype:
    return elementwise_dtypes(*args, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]


def pow_tensor_scalar(x: torch.Tensor, exponent: Any) -> torch.Tensor:
    """``x ** c`` for a constant ``c`` (exponents are never lifted to parameters)."""
    dtype = _result_dtype(x, exponent)
    if not dtype.is_floating_point:
        return _integer_power(x.to(dtype), int(exponent))
    x = x.to(dtype)
    if exponent == 0:
        return torch.ones_like(x)
    if exponent == 1:
        return x.clone()
    if exponent == 2:
        return x * x
    if exponent == 3:
        return x * x * x
    if exponent == -1:
        return torch.ones_like(x) / x
    if exponent == -2:
        return torch.ones_like(x) / (x * x)
    if exponent == 0.5:  # the CPU kernel's sqrt: (-inf) ** 0.5 is NaN, not C's inf
        return torch.sqrt(x)
    if exponent == -0.5:
        return torch.ones_like(x) / torch.sqrt(x)
    if isinstance(exponent, (int, float)) and float(exponent).is_integer() and 0 < exponent <= _MAX_PRODUCT_EXPONENT:
        # Signed products give C's signs, zeros and infinities by themselves.
        wide = _product_dtype(dtype)
        return _integer_power(x.to(wide), int(exponent)).to(dtype)
    return _float_pow(x, torch.full_like(x, exponent))


def pow_tensor_tensor(x: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    dtype = _result_dtype(x, exponent)
    if dtype.is_floating_point:
        return _float_pow(x.to(dtype), exponent.to(dtype))
    return _integer_tensor_power(x.to(dtype), exponent)


def pow_scalar(base: Any, exponent: torch.Tensor) -> torch.Tensor:
    """``c ** t`` for a constant base ``c``."""
    dtype = _result_dtype(base, exponent)
    x = torch.full_like(exponent, base, dtype=dtype)
    if dtype.is_floating_point:
        return _float_pow(x, exponent.to(dtype))
    return _integer_tensor_power(x, exponent)


def _float_pow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """C's ``pow`` of two floating tensors of one dtype (broadcast)."""
    ax = x.abs()
    finite_y = torch.isfinite(y)
    half_floor = torch.floor(y * 0.5)
    y_integer = (torch.floor(y) == y) & finite_y
    y_odd = y_integer & (y - 2 * half_floor == 1)
    safe = (ax > 0) & torch.isfinite(ax) & finite_y  # False for a NaN base
    one = torch.ones_like(ax)
    safe_ax = torch.where(safe, ax, one)
    magnitude = _plain_pow(safe_ax, torch.where(safe, y, torch.ones_like(y)))
    magnitude = _integer_exponent_magnitude(safe_ax, y, y_integer, magnitude)
    grows = y > 0
    zero_base, inf_base = ax == 0, torch.isinf(ax)
    magnitude = magnitude.masked_fill(zero_base & grows, 0.0).masked_fill(zero_base & ~grows, _INF)
    magnitude = magnitude.masked_fill(inf_base & grows, _INF).masked_fill(inf_base & ~grows, 0.0)
    inf_y = torch.isinf(y)
    away = (ax > 1) == grows  # |x| ** +inf and |x| ** -inf: away from or towards 0
    magnitude = magnitude.masked_fill(inf_y & away, _INF).masked_fill(inf_y & ~away, 0.0)
    magnitude = magnitude.masked_fill(inf_y & (ax == 1), 1.0)
    # -0.0 and -inf are negative bases too: (-0.0) ** 3 is -0.0, (-inf) ** -1 is -0.0.
    negative = (x < 0) | ((x == 0) & (one / x < 0))
    result = torch.where(negative & y_odd, -magnitude, magnitude)
    result = result.masked_fill((x < 0) & torch.isfinite(x) & finite_y & ~y_integer, _NAN)
    result = result.masked_fill(torch.isnan(x) | torch.isnan(y), _NAN)
    return result.masked_fill((y == 0) | (x == 1), 1.0)


def _product_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision products are formed in float32 and rounded once, as
    the CPU kernel computes a half ``pow`` in float."""
    return torch.promote_types(dtype, torch.float32)


def _integer_exponent_magnitude(
    ax: torch.Tensor, y: torch.Tensor, y_integer: torch.Tensor, fallback: torch.Tensor
) -> torch.Tensor:
    """``ax ** y`` by products where ``y`` is a small integer, ``fallback`` elsewhere.

    ``ax`` is positive and finite here. Left-to-right binary exponentiation
    over the bits of ``|y|`` (data, so every bit is visited); the bits are
    read in floating point, exact below ``2 ** 24``. A negative exponent is
    ``1 / ax ** |y|`` except where the power overflows: the true result may
    then be a subnormal, which the backend's ``pow`` keeps.
    """
    wide = _product_dtype(ax.dtype)
    ax, y = ax.to(wide), y.to(wide)
    small = y_integer & (y.abs() <= _MAX_PRODUCT_EXPONENT)
    n = torch.where(small, y.abs(), torch.zeros_like(y))
    power = torch.ones_like(ax) * torch.ones_like(n)  # the broadcast shape
    for bit in reversed(range(_PRODUCT_BITS)):
        power = power * power
        high = torch.floor(n * (0.5 ** bit))
        set_bit = (high - 2 * torch.floor(high * 0.5)) == 1
        power = torch.where(set_bit, power * ax, power)
    negative = y < 0
    by_product = torch.where(negative, torch.ones_like(power) / power, power)
    usable = small & ~(negative & torch.isinf(power))
    return torch.where(usable, by_product.to(fallback.dtype), fallback)


def _plain_pow(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The backend's ``pow`` itself: with the decompositions off, the call
    does not come back here."""
    from torch.fx.experimental.proxy_tensor import decompose

    with decompose({}):
        return aten.pow.Tensor_Tensor(x, y)


def _integer_power(x: torch.Tensor, n: int) -> torch.Tensor:
    """``x ** n`` for a constant ``n >= 0`` by squaring, wrapping on overflow
    like the CPU kernel (which squares too); a negative ``n`` never gets here
    (the tracer raises PyTorch's error)."""
    result = torch.ones_like(x)
    while n > 0:
        if n & 1:
            result = result * x
        n >>= 1
        if n:
            x = x * x
    return result


def _integer_tensor_power(base: torch.Tensor, exponent: torch.Tensor) -> torch.Tensor:
    """Integer ``pow`` with a tensor exponent, as the CPU kernel computes it.

    Left-to-right binary exponentiation over every value bit of the
    exponent's dtype (the exponent is data, so the loop cannot stop early):
    square, then multiply by the base where the bit is set. Products wrap
    modulo 2**bits like the kernel's, and modular products do not depend on
    their order. Each step reads only the base, the exponent and the previous
    step, so IREE fuses the chain into one dispatch of two inputs. The
    right-to-left form (squares of the base carried beside the result) made
    a dispatch read every intermediate square: 50 push constants for int64,
    past Vulkan's 128-byte limit ("push_constant_ranges[0] end offset 200
    exceeds device limit 128" on lavapipe).

    A negative exponent gives 1 for a base of 1, +-1 for -1 (by parity) and 0
    otherwise, the kernel's rule for integers. The exponent's bits are read
    in its own dtype: widening it first (``int32 -> int64``) met an IREE
    Vulkan miscompile (``extsi`` then ``< 0``, see test_iree_correctness.py::
    test_iree_vulkan_compares_a_sign_extended_integer_like_eager).
    """
    if exponent.dtype == torch.bool:
        exponent = exponent.to(torch.uint8)
    negative = exponent < 0
    odd = torch.bitwise_and(exponent, 1).bool()
    e = exponent.masked_fill(negative, 0)
    info = torch.iinfo(exponent.dtype)
    value_bits = info.bits - (1 if info.min < 0 else 0)  # e >= 0: a signed sign bit is 0
    result = torch.ones_like(base) * torch.ones_like(e)  # the broadcast shape
    for bit in reversed(range(value_bits)):
        result = result * result
        set_bit = torch.bitwise_and(torch.div(e, 2 ** bit, rounding_mode="trunc"), 1).bool()
        result = torch.where(set_bit, result * base, result)
    one, zero = torch.ones_like(result), torch.zeros_like(result)
    minus_one_power = torch.where(odd, -one, one)
    at_negative = torch.where(base == 1, one, torch.where(base == -1, minus_one_power, zero))
    return torch.where(negative, at_negative, result)
