"""Special functions (``erfc``, ``erfcx``, ``log_ndtr``, ``ndtri``, modified Bessel functions
``I0``, ``I1``, ``K0``, ``K1`` and their scaled forms, ``spherical_bessel_j0``, Bessel functions
``J0``, ``J1``, ``Y0``, ``Y1``) from elementary ops: torch-mlir has no lowering for any of them, so
a graph holding one was cut there and the op ran eagerly (issue 15's OpInfo sweep: 19 OpInfos).

Each function is a Chebyshev series of a smooth piece of it, summed by Clenshaw's recurrence,
on the intervals the classical implementations use (Cephes, and W. J. Cody's rational
approximations): exponential scaling for the Bessel functions, ``x ** 2`` as the variable of
the even parts, ``1 / x`` for the asymptotic ranges (for J and Y, the amplitudes of their
Hankel form in ``25 / x ** 2``, beyond 5 as Cephes splits them), the logarithm of ``K0``/``K1`` split off
near 0, the variable ``sqrt(-2 log p)`` in ``ndtri``'s tails. The coefficients are our own fits
(tools/fit_special.py -> special_tables.py), within 5e-14 relative in float64; float32
results are within a few ulps of eager's, float16/bfloat16 compute in float32 and integers in
the default dtype, as eager's kernels do.

``exp(-x * x)`` in ``erfc`` (and ``exp(x * x)`` in ``erfcx`` of a negative x) is taken as
``exp(-h * h) * exp(-(x - h) * (x + h))`` with ``h`` the multiple of 1/256 nearest ``x``:
``h * h`` is exact, so the rounding of ``x * x`` (relative error ``x ** 2`` ulps of the result,
5e-6 at x = 9 in float32) does not reach the result. Eager's special values are kept: poles
(``K0``/``K1`` at 0), NaN outside the domain, the limits at the infinities.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from . import special_tables as tables

__all__ = [
    "OPS", "TRIG_OPS", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "erfc", "erfcx", "i0", "i0e", "i1", "i1e", "k0", "k0e", "k1", "k1e", "log_ndtr", "ndtri",
    "spherical_bessel_j0",
]

_Table = tuple[tuple[float, ...], tuple[float, float]]


def _computed(x: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """``x`` in the dtype the series run in, and the result's dtype."""
    out = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    work = torch.float32 if out in (torch.float16, torch.bfloat16) else out
    return x.to(work), out


def _elementwise(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fn`` on the working dtype, its result in eager's result dtype."""
    def run(x: torch.Tensor) -> torch.Tensor:
        work, out = _computed(x)
        return fn(work).to(out)
    run.__name__ = run.__qualname__ = fn.__name__
    run.__doc__ = fn.__doc__
    return run


def _series(table: _Table, v: torch.Tensor) -> torch.Tensor:
    """The Chebyshev series ``table`` at ``v`` (its domain mapped onto [-1, 1]), by Clenshaw."""
    coef, (lo, hi) = table
    t = (2 * v - (lo + hi)) / (hi - lo)
    two_t = 2 * t
    # b_k = 2 t b_(k+1) - b_(k+2) + c_k from b_n = c_n (no product with a zero: lavapipe folds
    # x * 0.0 to 0, and the Vulkan backend refuses such a graph).
    b1, b2 = torch.full_like(v, coef[-1]), None
    for c in reversed(coef[1:-1]):
        b1, b2 = (two_t * b1 + c if b2 is None else two_t * b1 - b2 + c), b1
    return t * b1 - b2 + coef[0]


def _exp_square(x: torch.Tensor, sign: float) -> torch.Tensor:
    """``exp(sign * x * x)`` without the rounding of ``x * x`` (see the module docstring)."""
    x = torch.clamp(x, -1e4, 1e4)  # the result is 0 or inf there; x - h is NaN at an infinity
    h = torch.round(x * 256) / 256
    return torch.exp(sign * (h * h)) * torch.exp(sign * ((x - h) * (x + h)))


def _log(x: torch.Tensor) -> torch.Tensor:
    """``log(x)`` for x >= 0, a subnormal x scaled up by 2 ** 64 first: lavapipe's ``log`` reads
    every subnormal as the smallest normal (``log(1e-40)`` gave -87.34, not -92.10)."""
    tiny = torch.finfo(x.dtype).tiny
    scaled = torch.log(torch.where(x < tiny, x, 1.0) * 2.0 ** 64) - 64 * math.log(2)
    return torch.where(x < tiny, scaled, torch.log(x))


def _erfcx_nonnegative(x: torch.Tensor) -> torch.Tensor:
    """erfcx(x) for x >= 0 (inf included: 0)."""
    return _series(tables.ERFCX_SCALED, 1 - 4 / (x + 2)) / (x + 2)


@_elementwise
def erfcx(x: torch.Tensor) -> torch.Tensor:
    """``exp(x ** 2) * erfc(x)``; for x < 0 by ``erfcx(x) = 2 exp(x ** 2) - erfcx(-x)``."""
    ax = x.abs()
    positive = _erfcx_nonnegative(ax)
    negative = 2 * _exp_square(torch.where(x < 0, x, 0.0), 1.0) - positive
    return torch.where(x < 0, negative, positive)


#: erf's Taylor coefficients in x ** 2 (times x), for |x| <= 1/2: the 14th term is below 1e-18.
_ERF_TERMS = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1)) for n in range(14))


def _erf_small(x: torch.Tensor) -> torch.Tensor:
    """erf(x) for |x| <= 1/2 by its Taylor series (signed zeros kept)."""
    x2 = x * x
    acc = torch.full_like(x, _ERF_TERMS[-1])
    for c in reversed(_ERF_TERMS[:-1]):
        acc = acc * x2 + c
    return x * acc


def _erfc_tail(ax: torch.Tensor) -> torch.Tensor:
    """erfc(|x|) for |x| > 1/2 as ``exp(-x ** 2) erfcx(|x|)``; any other element (read only
    where |x| <= 1/2 is not true: NaN included) is computed at 1."""
    tail = torch.where(ax <= 0.5, 1.0, ax)
    return _exp_square(tail, -1.0) * _erfcx_nonnegative(tail)


@_elementwise
def erfc(x: torch.Tensor) -> torch.Tensor:
    """``1 - erf(x)`` by erf's series for |x| <= 1/2, ``exp(-x ** 2) erfcx(x)`` above, and
    ``2 - erfc(-x)`` below -1/2: no cancellation anywhere."""
    tail = _erfc_tail(x.abs())
    return torch.where(x.abs() <= 0.5, 1 - _erf_small(x), torch.where(x > 0, tail, 2 - tail))


@_elementwise
def log_ndtr(x: torch.Tensor) -> torch.Tensor:
    """``log(Phi(x))``: ``log(erfcx(-t) / 2) - t ** 2`` (``t = x / sqrt(2)``) below -1, where the
    cumulative probability underflows long before its logarithm does; ``log1p(-erfc(t) / 2)``
    above, as eager computes it."""
    t = x * math.sqrt(0.5)
    low = torch.where(x < -1, t, -1.0)
    lower = torch.log(_erfcx_nonnegative(-low) / 2) - low * low
    return torch.where(x < -1, lower, torch.log1p(-erfc(t) / 2))


@_elementwise
def ndtri(p: torch.Tensor) -> torch.Tensor:
    """The standard normal quantile: ``q * R(q ** 2)`` for ``q = p - 1/2`` in [-0.425, 0.425],
    otherwise a series in ``r = sqrt(-2 log(min(p, 1 - p)))`` (``1 - p`` is exact for p >= 1/2)."""
    q = p - 0.5
    central = q * _series(tables.NDTRI_CENTRAL, q * q)
    tail_p = torch.where(q < 0, p, 1 - p)
    r = torch.sqrt(-2 * _log(torch.where((tail_p > 0) & (tail_p < 0.075), tail_p, 0.05)))
    near = torch.where(r <= 6, r, 6.0)
    tail = torch.where(r <= 6, _series(tables.NDTRI_TAIL_NEAR, near), _series(tables.NDTRI_TAIL_FAR, r)) - r
    out = torch.where(q.abs() <= 0.425, central, torch.where(q < 0, tail, -tail))
    out = torch.where(p == 0, -math.inf, torch.where(p == 1, math.inf, out))
    return torch.where((p < 0) | (p > 1), math.nan, torch.where(torch.isnan(p), p, out))


def _i0e(x: torch.Tensor) -> torch.Tensor:
    ax = x.abs()
    far = torch.where(ax > 8, ax, 8.0)
    # A NaN takes the first branch's NaN.
    return torch.where(ax > 8, _series(tables.I0E_FAR, 16 / far - 1) / torch.sqrt(far),
                       _series(tables.I0E_NEAR, ax))


def _i1e(x: torch.Tensor) -> torch.Tensor:
    ax = x.abs()
    far = torch.where(ax > 8, ax, 8.0)
    return torch.where(ax > 8, torch.sign(x) * _series(tables.I1E_FAR, 16 / far - 1) / torch.sqrt(far),
                       x * _series(tables.I1E_OVER_X_NEAR, ax))


i0e = _elementwise(_i0e)
i1e = _elementwise(_i1e)


@_elementwise
def i0(x: torch.Tensor) -> torch.Tensor:
    """The modified Bessel function I0 (even): ``i0e(x) * exp(|x|)`` (NaN at the infinities, 0 *
    inf, as eager's Cephes form gives)."""
    return _i0e(x) * torch.exp(x.abs())


@_elementwise
def i1(x: torch.Tensor) -> torch.Tensor:
    """The modified Bessel function I1 (odd): ``i1e(x) * exp(|x|)`` (NaN at the infinities)."""
    return _i1e(x) * torch.exp(x.abs())


def _k(regular: _Table, far_table: _Table, odd: bool, scaled: bool) -> Callable[[torch.Tensor], torch.Tensor]:
    """K0 (``odd`` False) or K1, times ``exp(x)`` if ``scaled``: below 2 the log term plus the
    series of the regular part in ``x ** 2``, above 2 the series in ``4 / x`` of the scaled
    function. NaN below 0, +inf at 0."""
    def k(x: torch.Tensor) -> torch.Tensor:
        near_x = torch.where((x > 0) & (x <= 2), x, 1.0)
        log_half = _log(near_x) - math.log(2)  # x / 2 is subnormal (flushed to 0 on iree-cpu) near 2e-38
        if odd:
            near = log_half * _i1e(near_x) * torch.exp(near_x) + _series(regular, near_x * near_x) / near_x
        else:
            near = -log_half * _i0e(near_x) * torch.exp(near_x) + _series(regular, near_x * near_x)
        if scaled:
            near = near * torch.exp(near_x)
        far_x = torch.where(x > 2, x, 4.0)
        far = _series(far_table, 4 / far_x - 1) / torch.sqrt(far_x)
        if not scaled:
            far = far * torch.exp(-far_x)
        out = torch.where(x <= 2, near, far)
        out = torch.where(x == 0, math.inf, out)
        return torch.where(x < 0, math.nan, torch.where(torch.isnan(x), x, out))
    return k


k0 = _elementwise(_k(tables.K0_REGULAR, tables.K0E_FAR, odd=False, scaled=False))
k0e = _elementwise(_k(tables.K0_REGULAR, tables.K0E_FAR, odd=False, scaled=True))
k1 = _elementwise(_k(tables.K1_REGULAR, tables.K1E_FAR, odd=True, scaled=False))
k1e = _elementwise(_k(tables.K1_REGULAR, tables.K1E_FAR, odd=True, scaled=True))

#: sin(x) / x's Taylor coefficients in x ** 2, for |x| < 1/2 (where the division loses digits).
_SINC_TERMS = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(7))


@_elementwise
def spherical_bessel_j0(x: torch.Tensor) -> torch.Tensor:
    """``sin(x) / x``, its Taylor series below 1/2 and 0 at the infinities, as eager."""
    x2 = x * x
    series = torch.full_like(x, _SINC_TERMS[-1])
    for c in reversed(_SINC_TERMS[:-1]):
        series = series * x2 + c
    far_x = torch.where(x.abs() >= 0.5, x, 1.0)
    out = torch.where(x.abs() >= 0.5, torch.sin(far_x) / far_x, series)  # NaN: the series' NaN
    return torch.where(x.abs() == math.inf, 0.0, out)


def _hankel(x: torch.Tensor, p: _Table, q: _Table, shift: float) -> tuple[torch.Tensor, torch.Tensor]:
    """For x >= 5, ``sqrt(2/(pi x)) (P cos t - Q sin t)`` and ``sqrt(2/(pi x)) (P sin t + Q cos
    t)``: the Bessel functions J and Y of the order whose phase is ``t = x - shift``. P and Q are
    series in ``25 / x ** 2``; t is rounded to x's dtype before its cosine, as eager's kernels do
    (for large x that rounding decides the digits eager returns)."""
    u = 25 / (x * x)
    amp_p = _series(p, u)
    amp_q = 5 / x * _series(q, u)
    t = x - shift
    cos_t, sin_t = torch.cos(t), torch.sin(t)
    scale = math.sqrt(2 / math.pi) / torch.sqrt(x)
    return (amp_p * cos_t - amp_q * sin_t) * scale, (amp_p * sin_t + amp_q * cos_t) * scale


def _far(x: torch.Tensor) -> torch.Tensor:
    """``x`` where x > 5 (NaN included), 5 elsewhere: the asymptotic branch's operand."""
    return torch.where(x <= 5, 5.0, x)


def _j0(ax: torch.Tensor) -> torch.Tensor:
    j_far, _ = _hankel(_far(ax), tables.BESSEL0_P, tables.BESSEL0_Q, math.pi / 4)
    return torch.where(ax <= 5, _series(tables.J0_NEAR, ax * ax), j_far)


def _j1(x: torch.Tensor) -> torch.Tensor:
    ax = x.abs()
    j_far, _ = _hankel(_far(ax), tables.BESSEL1_P, tables.BESSEL1_Q, 3 * math.pi / 4)
    return torch.where(ax <= 5, x * _series(tables.J1_OVER_X_NEAR, x * x), torch.where(x < 0, -j_far, j_far))


@_elementwise
def bessel_j0(x: torch.Tensor) -> torch.Tensor:
    """The Bessel function J0 (even): a series in ``x ** 2`` up to 5, the asymptotic form above
    (NaN at the infinities, as eager's ``cos(inf)`` gives)."""
    return _j0(x.abs())


@_elementwise
def bessel_j1(x: torch.Tensor) -> torch.Tensor:
    """The Bessel function J1 (odd; ``-0.0`` kept): ``x`` times a series in ``x ** 2`` up to 5,
    the asymptotic form above."""
    return _j1(x)


def _y_edges(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Y0's and Y1's values where the series do not hold: -inf at 0 (either sign), NaN below."""
    out = torch.where(x == 0, -math.inf, out)
    return torch.where(x < 0, math.nan, torch.where(torch.isnan(x), x, out))


@_elementwise
def bessel_y0(x: torch.Tensor) -> torch.Tensor:
    """The Bessel function Y0: ``R(x ** 2) + 2/pi log(x) J0(x)`` up to 5, the asymptotic form
    above; -inf at 0, NaN below."""
    near_x = torch.where((x > 0) & (x <= 5), x, 1.0)
    near = _series(tables.Y0_REGULAR, near_x * near_x) + 2 / math.pi * _log(near_x) * _j0(near_x)
    _, y_far = _hankel(_far(x), tables.BESSEL0_P, tables.BESSEL0_Q, math.pi / 4)
    return _y_edges(x, torch.where(x <= 5, near, y_far))


@_elementwise
def bessel_y1(x: torch.Tensor) -> torch.Tensor:
    """The Bessel function Y1: ``x R(x ** 2) + 2/pi (J1(x) log(x) - 1/x)`` up to 5, the
    asymptotic form above; -inf at 0, NaN below."""
    near_x = torch.where((x > 0) & (x <= 5), x, 1.0)
    near = (near_x * _series(tables.Y1_REGULAR, near_x * near_x)
            + 2 / math.pi * (_j1(near_x) * _log(near_x) - 1 / near_x))
    _, y_far = _hankel(_far(x), tables.BESSEL1_P, tables.BESSEL1_Q, 3 * math.pi / 4)
    return _y_edges(x, torch.where(x <= 5, near, y_far))


aten = torch.ops.aten

#: The ATen ops decomposed here, with their decompositions.
OPS: dict[torch._ops.OpOverload, Callable[[torch.Tensor], torch.Tensor]] = {
    aten.erfc.default: erfc,
    aten.special_erfcx.default: erfcx,
    aten.special_log_ndtr.default: log_ndtr,
    aten.special_ndtri.default: ndtri,
    aten.i0.default: i0,
    aten.special_i0e.default: i0e,
    aten.special_i1.default: i1,
    aten.special_i1e.default: i1e,
    aten.special_modified_bessel_i0.default: i0,
    aten.special_modified_bessel_i1.default: i1,
    aten.special_modified_bessel_k0.default: k0,
    aten.special_modified_bessel_k1.default: k1,
    aten.special_scaled_modified_bessel_k0.default: k0e,
    aten.special_scaled_modified_bessel_k1.default: k1e,
    aten.special_spherical_bessel_j0.default: spherical_bessel_j0,
    aten.special_bessel_j0.default: bessel_j0,
    aten.special_bessel_j1.default: bessel_j1,
    aten.special_bessel_y0.default: bessel_y0,
    aten.special_bessel_y1.default: bessel_y1,
}

#: Those of OPS that take a cosine: decomposed for float32 and narrower results only, as ``cos``
#: itself (lowering/trig.py); float64 keeps the ATen op.
TRIG_OPS = (aten.special_bessel_j0.default, aten.special_bessel_j1.default, aten.special_bessel_y0.default,
            aten.special_bessel_y1.default)
