"""float64 ``log1p`` and ``expm1`` from ``log`` and ``exp``, accurate near 0.

IREE's llvm-cpu target approximates ``math.log1p`` and ``math.expm1`` well
in float32 (its polynomial approximations), but not in float64, where MLIR's
generic lowering computes ``log(1 + x)`` and ``exp(x) - 1``: ``log1p(1e-10)``
was 3.8e8 ulp off, and so was every formula built on them (``asinh``,
``atanh``, ``sinh`` and ``elu`` of lowering/hyperbolic.py and lowering/elu.py,
``logsigmoid``). Its float64 ``log`` and ``exp`` are accurate, so float64
inputs take the classic corrections of the rounding in ``1 + x`` and
``exp(x)`` (Goldberg, "What every computer scientist should know about
floating-point arithmetic", theorem 4; Kahan's expm1):

* ``log1p(x) = log(u) * (x / (u - 1))`` with ``u = 1 + x``, and ``x`` where ``u`` is 1;
* ``expm1(x) = (u - 1) * (x / log(u))`` with ``u = exp(x)``, and ``x`` where ``u``
  is 1, -1 where ``u - 1`` is, ``u`` where it overflows.

Other dtypes keep the op as it is. The decomposition applies inside other
decompositions too (``lowering.decompositions._NESTED``), which is why it is
not an ``_ONLY_WHEN`` one.
"""

from __future__ import annotations

import math

import torch

__all__ = ["expm1", "log1p"]

aten = torch.ops.aten


def _plain(op: torch._ops.OpOverload, x: torch.Tensor) -> torch.Tensor:
    """``op`` itself: with the decompositions off, the call does not come back here."""
    from torch.fx.experimental.proxy_tensor import decompose

    with decompose({}):
        return op(x)


def log1p(x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float64:
        return _plain(aten.log1p.default, x)
    u = x + 1
    r = torch.log(u) * (x / (u - 1))
    r = torch.where(u == 1, x, r)
    return torch.where(x == math.inf, x, r)  # inf / inf above


def expm1(x: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.float64:
        return _plain(aten.expm1.default, x)
    u = torch.exp(x)
    um1 = u - 1
    r = um1 * (x / torch.log(u))
    r = torch.where(u == 1, x, r)
    r = r.masked_fill(um1 == -1, -1.0)
    return torch.where(u == math.inf, u, r)
