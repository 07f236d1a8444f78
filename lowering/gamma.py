"""``lgamma``, ``digamma`` and ``mvlgamma`` from elementary ops: no torch-mlir lowering exists.

Without these, every graph holding one (``torch.distributions`` ``Gamma``, ``Beta``,
``Dirichlet``, ``StudentT`` log-probabilities, and ``lgamma``'s gradient, which is
``digamma``) was cut there and the op ran eagerly. The formulas are the textbook ones
(Abramowitz and Stegun 6.1.40-41 and 6.3.18, with the recurrences 6.1.15, 6.3.5 and the
reflections 6.1.17, 6.3.7):

* the argument is moved up by ``_SHIFT`` (``lgamma(x) = lgamma(x + n) - sum log(x + k)``,
  ``digamma(x) = digamma(x + n) - sum 1 / (x + k)``), where Stirling's asymptotic series,
  taken to the ``z ** -13`` term, is exact to float64's precision;
* a negative argument is reflected (``lgamma(x) = log(pi / |sin(pi x)|) - lgamma(1 - x)``,
  ``digamma(x) = digamma(1 - x) - pi / tan(pi x)``), with ``sin`` and ``tan`` of ``pi`` times
  ``x - round(x)``: exact reduction, so huge arguments keep their sign pattern.

Eager's special values are kept: ``lgamma`` is +inf at 0, -0 and the negative integers (every
float32 beyond 2 ** 23 is one), 0 at 1 and 2; ``digamma`` is -inf at 0, +inf at -0, NaN at the
negative integers and at -inf. Near ``lgamma``'s zeros at 1 and 2 (other than at them) the
shifted sum cancels: the error there is a few float32 ulps of ``lgamma(x + 10)`` (about 2e-6
absolute), within float32 kernels' tolerance but not libm's correctly rounded answer. Half
precision computes in float32, as eager's kernels do.
"""

from __future__ import annotations

import math

import torch

from . import zeta

__all__ = ["digamma", "lgamma", "mvlgamma", "polygamma"]

#: How far the argument moves up before the asymptotic series (z >= 10: its first omitted
#: term is below 1e-16 relative).
_SHIFT = 10

#: Stirling's series for lgamma: B_2k / (2k (2k - 1)) for k = 1..7.
_LGAMMA_TERMS = (1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156)
#: The series for digamma: B_2k / (2k) for k = 1..7.
_DIGAMMA_TERMS = (1 / 12, -1 / 120, 1 / 252, -1 / 240, 1 / 132, -691 / 32760, 1 / 12)


def _computed(x: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """``x`` in the dtype the series runs in, and the result's dtype."""
    out = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    work = torch.float32 if out in (torch.float16, torch.bfloat16) else out
    return x.to(work), out


def _series(z: torch.Tensor, terms: tuple[float, ...], first_power: int) -> torch.Tensor:
    """``sum(c_k * z ** -(first_power + 2k))`` by Horner's rule in ``1 / z ** 2``."""
    w = 1 / (z * z)
    acc = torch.full_like(z, terms[-1])
    for c in reversed(terms[:-1]):
        acc = acc * w + c
    return acc / z ** first_power


def _sinpi_reduced(x: torch.Tensor) -> torch.Tensor:
    """``pi * (x - round(x))``: the angle whose sine and tangent are those of ``pi * x``."""
    return math.pi * (x - torch.round(x))


def _lgamma_positive(x: torch.Tensor) -> torch.Tensor:
    z = x + _SHIFT
    stirling = (z - 0.5) * torch.log(z) - z + 0.5 * math.log(2 * math.pi) + _series(z, _LGAMMA_TERMS, 1)
    logs = torch.log(x)
    for k in range(1, _SHIFT):
        logs = logs + torch.log(x + k)
    return stirling - logs


def lgamma(x: torch.Tensor) -> torch.Tensor:
    x, out = _computed(x)
    positive = x >= 0  # -0.0 too: log(-0.0) is -inf, so lgamma is +inf as in eager
    up = _lgamma_positive(torch.where(positive, x, 1 - x))
    reflected = math.log(math.pi) - torch.log(torch.abs(torch.sin(_sinpi_reduced(x)))) - up
    r = torch.where(positive, up, reflected)
    r = torch.where((x == 1) | (x == 2), torch.zeros_like(r), r)
    r = torch.where(torch.isinf(x), torch.full_like(r, math.inf), r)
    return r.to(out)


def _digamma_positive(x: torch.Tensor) -> torch.Tensor:
    z = x + _SHIFT
    asymptotic = torch.log(z) - 0.5 / z - _series(z, _DIGAMMA_TERMS, 2)
    recip = 1 / x
    for k in range(1, _SHIFT):
        recip = recip + 1 / (x + k)
    return asymptotic - recip


def digamma(x: torch.Tensor) -> torch.Tensor:
    x, out = _computed(x)
    positive = x >= 0  # +0.0 gives -1/x = -inf, -0.0 gives +inf: eager's values
    up = _digamma_positive(torch.where(positive, x, 1 - x))
    reflected = up - math.pi / torch.tan(_sinpi_reduced(x))
    r = torch.where(positive, up, reflected)
    nan = (x < 0) & (x == torch.round(x))  # the negative integers, and -inf
    r = torch.where(nan | (x == -math.inf), torch.full_like(r, math.nan), r)
    return r.to(out)


def mvlgamma(x: torch.Tensor, p: int) -> torch.Tensor:
    """The multivariate log-gamma: ``p (p - 1) / 4 log(pi) + sum lgamma(x - i / 2)``, summed as
    eager's kernel does (its ``arange`` of offsets, ``-(p - 1) / 2`` first, added along a new last
    dim). ``p < 1`` is refused at the call (the op's own argument check)."""
    x, out = _computed(x)
    offsets = torch.arange(p, dtype=x.dtype, device=x.device) * 0.5 - (p - 1) * 0.5
    terms = lgamma(x.unsqueeze(-1) + offsets)
    return (terms.sum(-1) + p * (p - 1) / 4 * math.log(math.pi)).to(out)


def _trigamma(x: torch.Tensor) -> torch.Tensor:
    """Eager's ``calc_trigamma`` step for step (Math.h): reflected below 0.5 with ``sin(pi x)``
    unreduced (its huge values at the negative integers included), six recurrence steps, then
    three terms of the asymptotic series."""
    small = x < 0.5
    s = torch.sin(math.pi * x)
    z = torch.where(small, 1 - x, x)
    acc = 1 / (z * z)  # not 0 + ...: lavapipe drops additions of a literal zero (miscompiles.py)
    for _ in range(5):
        z = z + 1
        acc = acc + 1 / (z * z)
    z = z + 1
    ixx = 1 / (z * z)
    acc = acc + (1 + 1 / (2 * z) + ixx * (1 / 6 - ixx * (1 / 30 - ixx * (1 / 42)))) / z
    return torch.where(small, math.pi * math.pi / (s * s) - acc, acc)


def polygamma(n: int, x: torch.Tensor) -> torch.Tensor:
    """``polygamma(0, x)`` is ``digamma``, ``polygamma(1, x)`` the trigamma function (the gradient
    of ``digamma``); higher orders take the Hurwitz zeta (lowering/zeta.py)."""
    if n == 0:
        return digamma(x)
    if n >= 2:
        return zeta.polygamma(n, x)
    x, out = _computed(x)
    return _trigamma(x).to(out)
