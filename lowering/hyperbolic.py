"""``asinh``, ``acosh``, ``atanh`` and ``sinh`` by formulas accurate over the whole range.

torch-mlir lowers each to its ``math`` op, and the compilers expand those by
the textbook identities: ``asinh(x) = log(x + sqrt(x*x + 1))``,
``acosh(x) = log(x + sqrt(x*x - 1))``, ``atanh(x) = 0.5 * log((1 + x) / (1 - x))``,
``sinh(x) = (exp(x) - exp(-x)) / 2`` (MLIR's math expansion, used by IREE on
llvm-cpu and vulkan-spirv). Each loses the answer somewhere: ``x*x`` overflows
(``asinh(-1.59e6)`` was -inf, eager -14.97), ``x + sqrt(x*x + 1)`` cancels for
a negative ``x`` (4e3 ulp at -130), and ``log`` of a sum near 1 or a
difference of two exps near 1 drops the small value itself (``asinh``,
``atanh`` and ``sinh`` of 1e-8 were 0; about 700 ulp near 1e-3; ``acosh``
1000 ulp at 1 + 3.6e-7).

So they are computed here, as fdlibm does, from ``log1p`` and ``expm1``
(which every backend computes accurately near 0) on the magnitude, with the
sign put back last:

* ``asinh(a) = log1p(a + a*a / (1 + sqrt(1 + a*a)))``, and ``log(a) + ln 2``
  once ``1 / (4 a^2)`` is below the precision (no ``a*a`` overflow);
* ``acosh(x) = log1p((x - 1) + sqrt((x - 1) * (x + 1)))``, ``log(x) + ln 2``
  for a large ``x``, NaN below 1;
* ``atanh(a) = 0.5 * log1p(2a / (1 - a))`` (inf at 1, NaN beyond);
* ``sinh(a) = 0.5 * (t + t / (t + 1))`` with ``t = expm1(a)``, and
  ``w * (0.5 * w)`` with ``w = exp(a / 2)`` near and past the point where
  ``exp(a)`` overflows: ``sinh(a)`` is finite up to 89.41 in float32, 0.7
  past ``exp``'s overflow at 88.72.

Where ``|x|`` is so small that the function rounds to ``x`` itself
(``x^2 / 3`` below half an ulp), the result is ``x``: zeros keep their sign,
as in eager. NaN stays NaN and infinities give eager's infinities. A
half-precision (or integer) input is computed in float32 and rounded once, as
PyTorch's CPU kernels do.

Eager's own float32 ``sinh`` on a long tensor (SLEEF, vectorized) overflows
where ``exp(a)`` does, while its scalar path (glibc, the tail of a tensor and
tensors of a few elements) does not; the values here are glibc's.
"""

from __future__ import annotations

import math

import torch

from .opmath import in_opmath

__all__ = ["acosh", "asinh", "atanh", "sinh"]

_LN2 = math.log(2.0)


def _small(dtype: torch.dtype) -> float:
    """Below this ``|x|``, asinh, atanh and sinh round to ``x`` (``x^2 / 3 < eps / 48``)."""
    return math.sqrt(torch.finfo(dtype).eps) / 4


def _large(dtype: torch.dtype) -> float:
    """Above this, ``asinh(a)`` and ``acosh(a)`` are ``log(2a)`` to the precision
    (the next term, ``1 / (4 a^2)``, is below ``eps / 64``), and ``a*a`` is still finite."""
    return 4 / math.sqrt(torch.finfo(dtype).eps)


def _odd(x: torch.Tensor, a: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """``r = f(|x|)`` of an odd ``f`` given the sign of ``x``; ``x`` itself where ``f(x)``
    rounds to it (signed zeros kept). NaN fails every comparison and keeps ``r``'s NaN."""
    signed = torch.where(x < 0, -r, r)
    return torch.where(a < _small(x.dtype), x, signed)


@in_opmath
def asinh(x: torch.Tensor) -> torch.Tensor:
    a = x.abs()
    a2 = a * a
    near = torch.log1p(a + a2 / (torch.sqrt(a2 + 1) + 1))
    far = torch.log(a) + _LN2
    return _odd(x, a, torch.where(a > _large(x.dtype), far, near))


@in_opmath
def acosh(x: torch.Tensor) -> torch.Tensor:
    t = x - 1
    near = torch.log1p(t + torch.sqrt(t * (x + 1)))
    far = torch.log(x) + _LN2
    r = torch.where(x > _large(x.dtype), far, near)
    # Below 1 the result is NaN; ``near`` would be inf for a huge negative x
    # (``t * (x + 1)`` overflows to inf).
    return r.masked_fill(x < 1, math.nan)


@in_opmath
def atanh(x: torch.Tensor) -> torch.Tensor:
    a = x.abs()
    return _odd(x, a, 0.5 * torch.log1p(2 * a / (1 - a)))


@in_opmath
def sinh(x: torch.Tensor) -> torch.Tensor:
    a = x.abs()
    t = torch.expm1(a)
    near = 0.5 * (t + t / (t + 1))
    w = torch.exp(0.5 * a)
    far = w * (0.5 * w)
    # ``exp(a)`` overflows at log(max); IREE's loses up to 4.6 ulp in the last
    # 8 below it (float32), where ``exp(a / 2)`` squared stays within 2.4.
    return _odd(x, a, torch.where(a < math.log(torch.finfo(x.dtype).max) - 8, near, far))
