"""``sin``, ``cos``, ``tan`` and ``atan`` of float32 (and narrower) tensors, to within an ulp.

IREE lowers ``math.sin``/``math.cos`` to MLIR's polynomial approximation,
whose range reduction is ``k = floor(x * 2/pi); y = x - k * pi/2`` in
float32 with one constant for pi/2. Measured on iree-cpu against eager:
``sin(-1e-8)`` gave 6.2e-08 (``floor`` makes ``k = -1`` for every small
negative ``x``, so ``y`` is pi/2 rounded), ``sin(1316.3)`` -3.4e-05 (eager
-7.1e-05) and ``sin(980619.9)`` 0.0248 (eager -0.0025): errors of 10^4 to
10^9 ulps, and ``tan`` near its poles off by thousands. Vulkan (lavapipe)
was as wrong. Sinusoidal position encodings take ``sin`` of values in the
thousands, so these were wrong values in ordinary models.

So these ops never reach the backend's ``sin``: the argument is reduced
here exactly and the result comes from polynomials, in float64 arithmetic
(multiplication, addition and ``floor`` only, which every backend
computes exactly as IEEE says):

* Payne and Hanek's reduction with the bits of 2/pi cut into 24-bit
  pieces (the table fdlibm's ``__kernel_rem_pio2`` uses): a float32 has 24
  significant bits, so each product ``|x| * piece`` is exact in float64, and
  so is each product modulo 4. Their sum, kept as an unevaluated pair
  (Knuth's TwoSum), is ``|x| * 2/pi`` modulo 4 to about 2**-100: the
  quadrant ``q`` and the reduced argument ``r = (y - q) * pi/2`` in
  [-pi/4, pi/4], for every finite float32, the largest included.
* Taylor polynomials of ``sin`` and ``cos`` on [-pi/4, pi/4], to a
  truncation error under 1e-17; ``tan`` is their quotient.

The float64 result rounded to the input's dtype is within one float32 ulp
of eager (which is within one of the true value). Signs of zeros, NaN and
infinities (NaN) are eager's. ``atan`` (and ``atan2``'s first-quadrant
angle), 40 ulps off on IREE, is a table of atan(k/8) plus a short series.
float64 inputs are not decomposed (their
reduction would need more than float64 products; their ``sin`` is a libm
call on IREE, which does not link there, so they run op by op).
"""

from __future__ import annotations

import math

import torch

from .opmath import compute_dtype

#: 2/pi in 24-bit pieces, most significant first: piece i is
#: ``_TWO_OVER_PI_BITS[i] * 2**(-24 * (i + 1))``. Ten pieces reach 2**-240,
#: past the last bit the largest float32 (2**128) can bring above 2**-100.
_TWO_OVER_PI_BITS = (
    0xA2F983, 0x6E4E44, 0x1529FC, 0x2757D1, 0xF534DD,
    0xC0DB62, 0x95993C, 0x439041, 0xFE5163, 0xABDEBB,
)
_PIECES = tuple(bits * 2.0 ** (-24 * (i + 1)) for i, bits in enumerate(_TWO_OVER_PI_BITS))
_PI_OVER_2_HI = 1.5707963267948966  # the float64 nearest pi/2
_PI_OVER_2_LO = 6.123233995736766e-17  # pi/2 minus it
_PI_HI, _PI_LO = 2 * _PI_OVER_2_HI, 2 * _PI_OVER_2_LO

#: 1/n! for the Taylor series (coefficients of r**n).
_SIN_TERMS = 9  # r, r**3, ..., r**17: (pi/4)**19 / 19! < 1e-18
_COS_TERMS = 9  # 1, r**2, ..., r**16


def _factorial(n: int) -> float:
    out = 1
    for k in range(2, n + 1):
        out *= k
    return float(out)


#: atan(k/8) for k = 0..8, and the Taylor coefficients of atan(u) (u, u**3, ..., u**15).
_ATAN_EIGHTHS = tuple(math.atan(k / 8) for k in range(9))
_ATAN_COEFFS = tuple((-1) ** k / (2 * k + 1) for k in range(8))
_SIN_COEFFS = tuple((-1) ** k / _factorial(2 * k + 1) for k in range(_SIN_TERMS))
_COS_COEFFS = tuple((-1) ** k / _factorial(2 * k) for k in range(_COS_TERMS))


def reduced_dtype(dtype: torch.dtype) -> bool:
    """Whether ``sin``/``cos``/``tan`` with this result dtype are decomposed here."""
    return dtype in (torch.float32, torch.float16, torch.bfloat16)


def sin(x: torch.Tensor) -> torch.Tensor:
    return _evaluate(x, "sin")


def cos(x: torch.Tensor) -> torch.Tensor:
    return _evaluate(x, "cos")


def tan(x: torch.Tensor) -> torch.Tensor:
    return _evaluate(x, "tan")


def atan(x: torch.Tensor) -> torch.Tensor:
    """``atan`` to within one float32 ulp (IREE's approximation was 40 ulps off near 0.66)."""
    dtype = _float_dtype(x)
    x64 = x.to(dtype).to(torch.float64)
    a = x64.abs()
    small = a <= 1
    value = _atan_unit(torch.where(small, a, torch.reciprocal(a)))  # 1/inf = 0: pi/2
    value = torch.where(small, value, _PI_OVER_2_HI - value)
    return torch.where(_negative(x64), -value, value).to(dtype)


def atan2(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """C99's ``atan2`` of two float32 (or narrower) tensors of one dtype, in
    float64 and rounded once: the angle of the smaller magnitude over the
    larger, then the quadrant and the sign (``atan2(+-0, -0) = +-pi``,
    ``atan2(+-inf, +-inf) = +-pi/4`` or ``+-3pi/4``)."""
    dtype = y.dtype
    y, x = y.to(torch.float64), x.to(torch.float64)
    ay, ax = y.abs(), x.abs()
    steep = ay > ax
    angle = _atan_unit(torch.where(steep, ax / ay, ay / ax))
    angle = torch.where(steep, _PI_OVER_2_HI - angle, angle)
    angle = angle.masked_fill((ay == 0) & (ax == 0), 0.0)
    angle = angle.masked_fill(torch.isinf(ay) & torch.isinf(ax), math.pi / 4)
    angle = torch.where(_negative(x), (_PI_HI - angle) + _PI_LO, angle)
    return torch.where(_negative(y), -angle, angle).to(dtype)


def _atan_unit(t: torch.Tensor) -> torch.Tensor:
    """``atan(t)`` for ``t`` in [0, 1] (float64): from the nearest eighth ``c``,
    ``atan(t) = atan(c) + atan(u)`` with ``u = (t - c) / (1 + t c)``, ``|u| <= 1/16``,
    and ``atan(u)`` by its Taylor series (error under 1e-17)."""
    k = torch.floor(t * 8.0 + 0.5)
    c = k * 0.125
    u = (t - c) / (1.0 + t * c)
    base = torch.zeros_like(t)
    for i, angle in enumerate(_ATAN_EIGHTHS):
        if i:
            base = torch.where(k == i, torch.full_like(t, angle), base)  # a 0-d f64 literal fails on reference
    return base + u * _horner(u * u, _ATAN_COEFFS)


def _negative(x: torch.Tensor) -> torch.Tensor:
    """Below zero, -0.0 included."""
    return (x < 0) | ((x == 0) & (torch.reciprocal(x) < 0))


def _float_dtype(x: torch.Tensor) -> torch.dtype:
    """The result dtype of a unary float op: an integer input gives the default dtype."""
    return compute_dtype(x)[0]


def _evaluate(x: torch.Tensor, fn: str) -> torch.Tensor:
    dtype = _float_dtype(x)
    x64 = x.to(dtype).to(torch.float64)  # an integer input is first rounded as eager does
    a = x64.abs()
    quadrant, r = _reduce(a)
    r2 = r * r
    s = r * _horner(r2, _SIN_COEFFS)
    c = _horner(r2, _COS_COEFFS)
    odd = (quadrant == 1) | (quadrant == 3)  # an exact integer in [0, 4); no float remainder (Vulkan's is inexact)
    upper = quadrant >= 2  # quadrants 2 and 3 negate sin and cos
    if fn == "sin":
        value = torch.where(odd, c, s)
        value = torch.where(upper, -value, value)
    elif fn == "cos":
        value = torch.where(odd, s, c)
        value = torch.where(odd != upper, -value, value)
    else:
        value = torch.where(odd, -c / s, s / c)
    if fn != "cos":  # sin and tan are odd: sin(-x) = -sin(x), and -0.0 stays -0.0
        value = torch.where(_negative(x64), -value, value)
    return value.to(dtype)


def _reduce(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``a * 2/pi = q + f`` for ``a >= 0`` (float64 holding a float32 value):
    the quadrant ``q mod 4`` and ``r = f * pi/2`` with ``|f| <= 1/2``. NaN
    and inf give NaN in both."""
    hi = lo = None  # not zeros: an addition of a constant 0.0 gets a graph refused on lavapipe
    for piece in _PIECES:
        t = a * piece  # exact: 24 by 24 significant bits
        t = t - 4.0 * torch.floor(t * 0.25)  # exact: t modulo 4
        if hi is None:
            hi = t
            continue
        hi, err = _two_sum(hi, t)
        lo = err if lo is None else lo + err
    whole = torch.floor(hi + 0.5)  # hi in [0, 40): an exact integer
    f = (hi - whole) + lo  # hi - whole is exact
    # lo may carry f past +-1/2 by a hair: the quadrant follows it.
    whole = torch.where(f > 0.5, whole + 1, torch.where(f < -0.5, whole - 1, whole))
    f = torch.where(f > 0.5, f - 1, torch.where(f < -0.5, f + 1, f))
    quadrant = whole - 4.0 * torch.floor(whole * 0.25)
    r = f * _PI_OVER_2_HI + f * _PI_OVER_2_LO
    return quadrant, r


def _two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``a + b`` and its rounding error, exactly (Knuth)."""
    s = a + b
    bb = s - a
    err = (a - (s - bb)) + (b - bb)
    return s, err


def _horner(r2: torch.Tensor, coeffs: tuple[float, ...]) -> torch.Tensor:
    out = torch.full_like(r2, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        out = out * r2 + c
    return out
