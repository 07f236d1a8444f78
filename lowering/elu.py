"""``elu`` (and so ``selu``) and ``celu``, by the formula of PyTorch's CPU kernel.

torch-mlir decomposes both as ``max(0, x) + min(0, alpha * (exp(x * s) - 1))``:
``exp(x) - 1`` cancels for a small negative ``x`` (``elu(-1e-8)`` was 0,
110 ulp near -1e-3) and the sum of the two halves is ``+0.0`` for ``x = -0.0``
(eager: ``-0.0``). PyTorch's kernel (ATen/native/cpu/Elu.h) computes

    x < 0 ? expm1(x * input_scale) * (alpha * scale) : x * scale

with the coefficient ``alpha * scale`` rounded once in the compute dtype
(float32 for half precision, whose result is rounded once at the end). That
is what is written here; ``-0.0 * scale`` keeps the sign and NaN takes the
second branch. ``celu(x, alpha)`` is ``elu(x, alpha, 1, 1 / alpha)``, as in
eager. ``alpha``, ``scale`` and ``input_scale`` may be runtime parameters
(``selu``'s constants are), which arrive as 0-d tensors.
"""

from __future__ import annotations

import numpy as np
import torch

from .opmath import compute_dtype

__all__ = ["celu", "elu"]

Scalar = float | int | bool | torch.Tensor

_NUMPY = {torch.float32: np.float32, torch.float64: np.float64}


def _in(value: Scalar, dtype: torch.dtype) -> Scalar:
    """A coefficient in the compute dtype: a 0-d tensor cast, a number rounded to it."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype)
    return float(_NUMPY[dtype](value))


def _product(a: Scalar, b: Scalar, dtype: torch.dtype) -> Scalar:
    """``a * b`` rounded in ``dtype``, as the kernel's ``alpha * scale``."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        a_t = a if isinstance(a, torch.Tensor) else torch.full_like(b, a)
        b_t = b if isinstance(b, torch.Tensor) else torch.full_like(a_t, b)
        return a_t * b_t
    return float(np.multiply(_NUMPY[dtype](a), _NUMPY[dtype](b)))


def elu(x: torch.Tensor, alpha: Scalar = 1.0, scale: Scalar = 1.0, input_scale: Scalar = 1.0) -> torch.Tensor:
    out, compute = compute_dtype(x)
    x = x.to(compute)
    alpha, scale, input_scale = (_in(v, compute) for v in (alpha, scale, input_scale))
    negative = torch.expm1(x * input_scale) * _product(alpha, scale, compute)
    return torch.where(x < 0, negative, x * scale).to(out)


def celu(x: torch.Tensor, alpha: Scalar = 1.0) -> torch.Tensor:
    if isinstance(alpha, torch.Tensor):  # a runtime alpha: its inverse rounded in the compute dtype
        a = alpha.to(compute_dtype(x)[1])
        return elu(x, a, 1.0, torch.ones_like(a) / a)
    return elu(x, alpha, 1.0, 1.0 / alpha)
