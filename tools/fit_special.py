"""Generate ``lowering/special_tables.py``: Chebyshev series of the special functions
``lowering/special.py`` evaluates from elementary ops.

Each table is the Chebyshev interpolant, at ``degree + 1`` Chebyshev points, of a smooth
function built from the special function on an interval (the piecewise forms are the classical
ones, as in Cephes and in W. J. Cody's and J. M. Blair's papers: exponential scaling, ``x**2``
or ``1/x`` as the variable, the logarithmic singularity of ``K0``/``K1`` split off). The
reference values come from SciPy (double precision; mpmath where SciPy's values cancel); trailing coefficients below
``TRIM`` relative to the largest are dropped. Each fit's largest error on a dense grid, relative to
the function's largest value there, is printed and asserted to stay below ``MAX_ERROR`` (SciPy's
own values are noisy, about 3e-16, so a higher degree only fits the noise; the largest errors, 4e-14,
are at the ends of the intervals). The functions'
end-to-end accuracy is tested against eager in test/test_special_functions.py.

Run: ``.venv/bin/python tools/fit_special.py > lowering/special_tables.py`` (development time
only; SciPy is not a runtime dependency).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import mpmath
import numpy as np
from numpy.polynomial import chebyshev
from scipy import special

TRIM = 1e-16
MAX_ERROR = 1e-13


def _erfcx_scaled(u: np.ndarray) -> np.ndarray:
    """``erfcx(x) * (x + 2)`` at ``x = 2 (1 + u) / (1 - u)``: smooth on [-1, 1] (1/sqrt(pi) at u = 1)."""
    with np.errstate(divide="ignore"):
        x = 2 * (1 + u) / (1 - u)
        out = special.erfcx(x) * (x + 2)
    return np.where(u >= 1, 1 / math.sqrt(math.pi), out)


def _i0e_far(u: np.ndarray) -> np.ndarray:
    """``i0e(x) * sqrt(x)`` at ``x = 16 / (u + 1)`` (x >= 8)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = 16 / (u + 1)
        out = special.i0e(x) * np.sqrt(x)
    return np.where(u <= -1, 1 / math.sqrt(2 * math.pi), out)


def _i1e_far(u: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        x = 16 / (u + 1)
        out = special.i1e(x) * np.sqrt(x)
    return np.where(u <= -1, 1 / math.sqrt(2 * math.pi), out)


def _i1e_over_x(x: np.ndarray) -> np.ndarray:
    """``i1e(x) / x`` (even, 1/2 at 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.i1e(x) / x
    return np.where(x == 0, 0.5, out)


def _k0_regular(t: np.ndarray) -> np.ndarray:
    """``k0(x) + log(x / 2) * i0(x)`` at ``x = sqrt(t)``: the part of K0 without its log (x <= 2)."""
    x = np.sqrt(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.k0(x) + np.log(x / 2) * special.i0(x)
    return np.where(t == 0, -np.euler_gamma, out)


def _k1_regular(t: np.ndarray) -> np.ndarray:
    """``x * (k1(x) - log(x / 2) * i1(x))`` at ``x = sqrt(t)`` (1 at 0)."""
    x = np.sqrt(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = x * (special.k1(x) - np.log(x / 2) * special.i1(x))
    return np.where(t == 0, 1.0, out)


def _k0e_far(u: np.ndarray) -> np.ndarray:
    """``k0e(x) * sqrt(x)`` at ``x = 4 / (u + 1)`` (x >= 2)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        x = 4 / (u + 1)
        out = special.k0e(x) * np.sqrt(x)
    return np.where(u <= -1, math.sqrt(math.pi / 2), out)


def _k1e_far(u: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        x = 4 / (u + 1)
        out = special.k1e(x) * np.sqrt(x)
    return np.where(u <= -1, math.sqrt(math.pi / 2), out)


def _ndtri_central(s: np.ndarray) -> np.ndarray:
    """``ndtri(1/2 + q) / q`` at ``q = sqrt(s)`` (odd about 1/2, so even in q; sqrt(2 pi) at 0)."""
    q = np.sqrt(s)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.ndtri(0.5 + q) / q
    return np.where(s == 0, math.sqrt(2 * math.pi), out)


def _ndtri_tail(r: np.ndarray) -> np.ndarray:
    """``ndtri(p) + r`` at ``p = exp(-r**2 / 2)``, the lower tail's variable."""
    return special.ndtri(np.exp(-r * r / 2)) + r


def _j0_near(z: np.ndarray) -> np.ndarray:
    """``j0(x)`` at ``x = sqrt(z)`` (even, so smooth in z; x <= 5)."""
    return special.j0(np.sqrt(z))


def _y0_regular(z: np.ndarray) -> np.ndarray:
    """``y0(x) - 2/pi log(x) j0(x)`` at ``x = sqrt(z)``: Y0 without its logarithm (x <= 5)."""
    x = np.sqrt(z)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.y0(x) - 2 / math.pi * np.log(x) * special.j0(x)
    return np.where(z == 0, 2 / math.pi * (np.euler_gamma - math.log(2)), out)


def _j1_over_x(z: np.ndarray) -> np.ndarray:
    """``j1(x) / x`` at ``x = sqrt(z)`` (1/2 at 0)."""
    x = np.sqrt(z)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = special.j1(x) / x
    return np.where(z == 0, 0.5, out)


def _y1_regular(z: np.ndarray) -> np.ndarray:
    """``(y1(x) - 2/pi (j1(x) log(x) - 1/x)) / x`` at ``x = sqrt(z)``: Y1 without its pole and
    logarithm (x <= 5). From mpmath: in double precision the pole cancels digits near 0."""
    def one(v: float):
        if v == 0:
            return -(mpmath.log(2) + mpmath.mpf(1) / 2 - mpmath.euler) / mpmath.pi
        x = mpmath.sqrt(mpmath.mpf(v))
        return (mpmath.bessely(1, x) - 2 / mpmath.pi * (mpmath.besselj(1, x) * mpmath.log(x) - 1 / x)) / x
    with mpmath.workdps(40):
        return np.array([float(one(float(v))) for v in np.atleast_1d(z)])


def _hankel_part(order: int, part: str) -> Callable[[np.ndarray], np.ndarray]:
    """The amplitudes of the Bessel functions' asymptotic form, ``J(x) = sqrt(2/(pi x)) (P cos t
    - Q sin t)`` and ``Y(x) = sqrt(2/(pi x)) (P sin t + Q cos t)`` with ``t = x - (2 order + 1)
    pi/4``, at ``x = 5 / sqrt(q)`` (x >= 5): ``P`` (1 at q = 0), or ``Q * x / 5`` (even in 1/x).
    SciPy's J and Y cancel in these sums at large x, so they come from mpmath at 40 digits."""
    def one(q: float):
        if q == 0:
            return mpmath.mpf(1) if part == "P" else mpmath.mpf(4 * order * order - 1) / 40
        x = 5 / mpmath.sqrt(mpmath.mpf(q))
        t = x - (2 * order + 1) * mpmath.pi / 4
        j, y = mpmath.besselj(order, x), mpmath.bessely(order, x)
        scale = mpmath.sqrt(mpmath.pi * x / 2)
        if part == "P":
            return scale * (j * mpmath.cos(t) + y * mpmath.sin(t))
        return scale * (y * mpmath.cos(t) - j * mpmath.sin(t)) * x / 5

    def fn(q: np.ndarray) -> np.ndarray:
        with mpmath.workdps(40):
            return np.array([float(one(float(v))) for v in np.atleast_1d(q)])
    return fn


#: name -> (function, domain, degree[, points of the error grid]). The domain is that of the
#: table's variable.
FITS: dict[str, tuple] = {
    "ERFCX_SCALED": (_erfcx_scaled, (-1.0, 1.0), 34),
    "I0E_NEAR": (special.i0e, (0.0, 8.0), 30),
    "I0E_FAR": (_i0e_far, (-1.0, 1.0), 24),
    "I1E_OVER_X_NEAR": (_i1e_over_x, (0.0, 8.0), 30),
    "I1E_FAR": (_i1e_far, (-1.0, 1.0), 24),
    "K0_REGULAR": (_k0_regular, (0.0, 4.0), 18),
    "K1_REGULAR": (_k1_regular, (0.0, 4.0), 18),
    "K0E_FAR": (_k0e_far, (-1.0, 1.0), 24),
    "K1E_FAR": (_k1e_far, (-1.0, 1.0), 24),
    "NDTRI_CENTRAL": (_ndtri_central, (0.0, 0.425 ** 2), 32),
    "NDTRI_TAIL_NEAR": (_ndtri_tail, (math.sqrt(-2 * math.log(0.075)), 6.0), 28),
    "NDTRI_TAIL_FAR": (_ndtri_tail, (6.0, 37.5), 44),
    "J0_NEAR": (_j0_near, (0.0, 25.0), 22),
    "Y0_REGULAR": (_y0_regular, (0.0, 25.0), 22),
    "J1_OVER_X_NEAR": (_j1_over_x, (0.0, 25.0), 22),
    "Y1_REGULAR": (_y1_regular, (0.0, 25.0), 22, 2001),
    "BESSEL0_P": (_hankel_part(0, "P"), (0.0, 1.0), 18, 2001),
    "BESSEL0_Q": (_hankel_part(0, "Q"), (0.0, 1.0), 18, 2001),
    "BESSEL1_P": (_hankel_part(1, "P"), (0.0, 1.0), 18, 2001),
    "BESSEL1_Q": (_hankel_part(1, "Q"), (0.0, 1.0), 18, 2001),
}


def fit(name: str) -> tuple[list[float], tuple[float, float], float]:
    fn, domain, degree, *points = FITS[name]
    series = chebyshev.Chebyshev.interpolate(fn, degree, domain=list(domain))
    coef = list(series.coef)
    scale = max(abs(c) for c in coef)
    while len(coef) > 1 and abs(coef[-1]) < TRIM * scale:
        coef.pop()
    grid = np.linspace(domain[0], domain[1], points[0] if points else 20001)[1:-1]
    want = fn(grid)
    got = chebyshev.Chebyshev(coef, domain=list(domain))(grid)
    err = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    return coef, domain, err


def main() -> None:
    print('"""Chebyshev series for lowering/special.py. Generated by tools/fit_special.py: do not edit."""')
    print()
    print("# name: (coefficients of T_0, T_1, ..., the domain mapped onto [-1, 1]); the fit's max error")
    for name in FITS:
        coef, domain, err = fit(name)
        assert err < MAX_ERROR, (name, err)
        print(f"# {name}: {len(coef)} terms, max error {err:.1e}", file=sys.stderr)
        print(f"{name} = (  # {len(coef)} terms, max error {err:.1e}")
        print("    (" + ",\n     ".join(repr(float(c)) for c in coef) + "),")
        print(f"    {domain!r},")
        print(")")


if __name__ == "__main__":
    main()
