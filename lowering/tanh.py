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
"""

from __future__ import annotations

import math

import torch

from .opmath import compute_dtype

__all__ = ["gelu_tanh", "gelu_tanh_backward", "saturating_tanh"]

_BETA = math.sqrt(2.0) * (2.0 / math.sqrt(math.pi)) * 0.5  # sqrt(2 / pi)
_KAPPA = 0.044715


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
