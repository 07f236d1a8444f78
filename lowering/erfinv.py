"""``erfinv`` from ``erf``: torch-mlir 20261001 has no lowering for it.

PyTorch's own decomposition calls ``prims.erf_inv``, which no backend here
lowers either, so every graph holding ``torch.erfinv`` (truncated-normal
initializers, Gaussian quantile code) failed to compile and ran op by op.

float32 and narrower (computed in float32, as eager's opmath): M. Giles,
"Approximating the erfinv function" (GPU Computing Gems, 2011), the
single-precision form: a degree-8 polynomial in ``w = -log((1 - y)(1 + y))``
(two ranges, split at ``w = 5``) times ``y``. No Newton step: near ``|y| = 1``
``erf(x) - y`` is quantized to float32's spacing near 1 and a step moves x
by up to 0.1 (``erfinv(0.99999994)`` came out 3.80, eager 3.83). Against
eager over every third float32 in ``(1e-30, 1)`` (279 million values) the
largest relative difference was 3.05e-7.

float64 is not decomposed (it runs op by op): the same rational guess and two
Newton steps eager's ``calc_erfinv`` in ATen's ``Math.h`` is documented to
take gave 5.80537 at ``1 - 2**-52`` where eager gives 5.80502, and 25 282
of 100 000 values within 1e-11 of 1 differed by more than 1e-7.

``erfinv(+-1)`` is ``+-inf``, ``|y| > 1`` or NaN gives NaN, zeros keep their
sign, as eager.
"""

from __future__ import annotations

import math

import torch

_GILES_CENTRAL = (1.50140941, 0.246640727, -0.00417768164, -0.00125372503, 0.00021858087, -4.39150654e-06,
                  -3.5233877e-06, 3.43273939e-07, 2.81022636e-08)
_GILES_TAIL = (2.83297682, 1.00167406, 0.00943887047, -0.0076224613, 0.00573950773, -0.00367342844,
               0.00134934322, 0.000100950558, -0.000200214257)


def _poly(z: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """``c0 + c1 z + c2 z^2 + ...`` by Horner's rule."""
    out = torch.full_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        out = out * z + c
    return out


def erfinv(y: torch.Tensor) -> torch.Tensor:
    """``torch.erfinv`` of a float32, float16 or bfloat16 ``y`` (computed in float32), or of an
    integer or bool ``y`` whose result is float32 (the default dtype, as eager promotes it)."""
    out_dtype = y.dtype if y.is_floating_point() else torch.float32
    x = y.float()
    w = -torch.log((1 - x) * (1 + x))
    central = _poly(w - 2.5, _GILES_CENTRAL)
    tail = _poly(torch.sqrt(w) - 3, _GILES_TAIL)
    out = torch.where(w < 5, central, tail) * x
    a = x.abs()
    out = torch.where(a == 1, torch.copysign(torch.full_like(x, math.inf), x), out)
    return torch.where(a > 1, torch.full_like(x, math.nan), out).to(out_dtype)
