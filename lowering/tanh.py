"""``tanh`` past saturation, and ``gelu(approximate="tanh")`` with its backward.

* Eager's ``tanh`` is exactly +-1 once the dtype cannot hold anything
  closer (|x| >= 9.1 in float32 and narrower, 19.1 in float64). lavapipe's
  stays 3 ulps short (0.99999982 from 9.1 to infinity), and ``1 - tanh**2``
  (every tanh-based gradient) turned that into 1e-4 at x = -13.9 where eager
  has 0. The saturated range is answered here; below it, the backend's tanh.
* torch-mlir 20261001 lowers ``gelu(approximate="tanh")`` and its backward
  with sqrt(2/pi) as 0.797724 (it is 0.7978846): 5e-5 off eager on every
  compiled backend. The formulas below are those of PyTorch's CPU kernel
  (ATen/native/cpu/Activation.cpp), in the compute dtype (float32 for half
  precision) and rounded once at the end, on the saturating ``tanh``.
* The exact ``gelu`` (``erf``) of float16, and its backward: torch-mlir
  computes them in the input dtype, so 1,390 of 4,001 float16 values in
  [-8, 8] were an ulp off eager (reference backend). Eager computes in
  float32 and rounds once; so do ``gelu_erf`` and ``gelu_erf_backward``,
  used for half-precision inputs only, with the ``erf`` of eager's
  vectorized kernel (Abramowitz and Stegun 7.1.26, error 1.5e-7): it is
  exactly +-1 from |x| = 4, where the backend's own ``erf`` leaves a
  residue. (bfloat16 reaches the lowering widened to float32 and keeps the
  backend's ``erf``: 159 of those values differ, by 4e-6 at most.)
"""

from __future__ import annotations

import math

import torch

from .opmath import compute_dtype

__all__ = ["gelu_erf", "gelu_erf_backward", "gelu_tanh", "gelu_tanh_backward", "saturating_tanh"]

_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2 / pi)
_KAPPA = 0.044715
_ALPHA = math.sqrt(0.5)  # 1 / sqrt(2)
_PDF = 2.0 / math.sqrt(math.pi) * math.sqrt(0.5) * 0.5  # 1 / sqrt(2 pi)


def saturating_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh``, exactly +-1 where the dtype's rounding makes eager's so (NaN stays NaN)."""
    bound = 19.5 if x.dtype == torch.float64 else 9.1
    # ``clamp`` gives the sign there (|x| >= bound); ``copysign`` would reinterpret bits, which
    # the TOSA pipeline cannot lower.
    return torch.where(x.abs() >= bound, x.clamp(-1.0, 1.0), torch.tanh(x))


def _inner(x: torch.Tensor) -> torch.Tensor:
    return _BETA * (x + _KAPPA * (x * x * x))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    dtype = x.dtype
    x = x.to(compute_dtype(x)[1])
    return (0.5 * x * (1 + saturating_tanh(_inner(x)))).to(dtype)


def gelu_tanh_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    dtype = x.dtype
    ctype = compute_dtype(x)[1]
    x, grad = x.to(ctype), grad.to(ctype)
    t = saturating_tanh(_inner(x))
    left = 0.5 * x
    right = 1 + t
    inner_derivative = _BETA * (1 + 3 * _KAPPA * (x * x))
    derivative = 0.5 * right + left * (1 - t * t) * inner_derivative
    return (grad * derivative).to(dtype)


#: Abramowitz and Stegun 7.1.26: erf(a) = 1 - t (p1 + p2 t + ... + p5 t^4) exp(-a^2),
#: t = 1 / (1 + p a), for a >= 0.
_AS_P = 0.3275911
_AS_COEFFS = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(x: torch.Tensor) -> torch.Tensor:
    """The ``erf`` of eager's vectorized float kernels (``Vectorized<float>::erf``)."""
    t = 1 / (_AS_P * x.abs() + 1)
    r = torch.full_like(t, _AS_COEFFS[-1])
    for c in reversed(_AS_COEFFS[:-1]):
        r = r * t + c
    y = 1 - r * t * torch.exp(-(x * x))
    return torch.where(x < 0, -y, y)


def _kernel_erf(x: torch.Tensor) -> torch.Tensor:
    """The ``erf`` eager's gelu kernel calls: the approximation above in float32, the precise
    one in float64 (``Vectorized<double>::erf``)."""
    return torch.erf(x) if x.dtype == torch.float64 else _erf(x)


def gelu_erf(x: torch.Tensor) -> torch.Tensor:
    """``x * Phi(x)`` in the compute dtype, rounded once (eager's CPU formula)."""
    dtype = x.dtype
    x = x.to(compute_dtype(x)[1])
    return (x * 0.5 * (1 + _kernel_erf(x * _ALPHA))).to(dtype)


def gelu_erf_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    dtype = x.dtype
    ctype = compute_dtype(x)[1]
    x, grad = x.to(ctype), grad.to(ctype)
    cdf = 0.5 * (1 + _kernel_erf(x * _ALPHA))
    pdf = _PDF * torch.exp(x * x * -0.5)
    return (grad * (cdf + x * pdf)).to(dtype)
