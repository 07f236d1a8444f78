"""``lerp`` and ``logaddexp``/``logaddexp2`` as eager's CPU kernels compute them.

``lerp``: eager (``ATen/native/Lerp.h``) picks one of two formulas by the
weight, ``self + w * (end - self)`` for ``|w| < 0.5`` and
``end - (end - self) * (1 - w)`` otherwise, in the op-math dtype (float32 for
float16/bfloat16). The compilers use the first one everywhere, so at
``w >= 0.5`` the signs of zeros (``lerp(-0.0, -0.0, 0.7)`` is -0.0) and the
infinities (``lerp(0, inf, 0.5)`` is NaN in eager, inf on iree-cpu) differed.

``logaddexp``: eager returns ``a`` when both are the same infinity, else
``max(a, b) + log1p(exp(-|a - b|))`` with NaN propagating from either side;
iree-cpu (IREE's own torch frontend) gave ``logaddexp(nan, inf) = inf``.
``logaddexp2`` is the same in base 2.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["lerp", "logaddexp", "logaddexp2"]

_HALF = (torch.float16, torch.bfloat16)


def _opmath(*xs: Any) -> tuple[list[Any], torch.dtype | None]:
    """The operands in float32 when the result is half precision (eager's op-math), and that dtype."""
    tensors = [x for x in xs if isinstance(x, torch.Tensor)]
    dtype = tensors[0].dtype if tensors else None
    if dtype in _HALF:
        return [x.float() if isinstance(x, torch.Tensor) else x for x in xs], dtype
    return list(xs), None


def lerp(self: torch.Tensor, end: torch.Tensor, weight: Any) -> torch.Tensor:
    (a, b, w), half = _opmath(self, end, weight)
    diff = b - a
    if isinstance(w, torch.Tensor):
        out = torch.where(w.abs() < 0.5, a + w * diff, b - diff * (1 - w))
    elif abs(w) < 0.5:
        out = a + w * diff
    else:
        out = b - diff * (1 - w)
    return out.to(half) if half is not None else out


def _logaddexp(a: torch.Tensor, b: torch.Tensor, base2: bool) -> torch.Tensor:
    (x, y), half = _opmath(a, b)
    m = torch.maximum(x, y)  # NaN from either side (lowering's NaN-aware maximum)
    d = -(x - y).abs()
    out = m + (torch.log1p(torch.exp2(d)) * (1 / math.log(2)) if base2 else torch.log1p(torch.exp(d)))
    out = torch.where(torch.isinf(x) & (x == y), x, out)
    return out.to(half) if half is not None else out


def logaddexp(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _logaddexp(a, b, base2=False)


def logaddexp2(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return _logaddexp(a, b, base2=True)
