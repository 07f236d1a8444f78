"""``special.zeta(x, q)``, the Hurwitz zeta function of two tensors, as eager's Cephes loop.

No torch-dialect op, so every call ran eagerly (the OpInfo ``special.zeta``); lowering/zeta.py
covers only an integer order known when tracing (``polygamma``). Eager's kernel (Cephes'
``zeta``, ``ATen/native/Math.h``): ``x == 1`` is +inf; ``x < 1`` NaN; for ``q <= 0`` an integer
``q`` is +inf and a non-integer ``x`` NaN (``q = +inf`` comes out NaN, through ``0 * inf``);
otherwise ``s = q ** -x`` plus the terms ``(q + i) ** -x`` while ``i < 9`` or
``q + i <= 9``, then the Euler-Maclaurin tail at ``w = q + i``: ``s += b w / (x - 1) - b / 2``
and twelve Bernoulli terms. The first loop's count is data (``q`` far below 0 runs long), so it
is a ``while_loop`` (lowering/loops.py) stepping every element while its own condition holds.
Everything in float64 (eager's float32 kernel computes in float32): powers as ``exp(-x log|a|)`` with the sign of a negative base for an
integer ``x`` (``(-1) ** x``). Eager also stops where a term is below 2 ** -53 of the sum;
summing on changes a float64 result by an ulp at most (its float32 kernel is less accurate
than that).
"""

from __future__ import annotations

import math

import torch

from .loops import WHILE_LOOP
from .zeta import _BERNOULLI_DIVISORS

__all__ = ["applies_call", "special_zeta"]


def applies_call(args: tuple, kwargs: dict) -> bool:
    """Two floating tensors (float32/float64; the scalar overloads are other ops)."""
    tensors = [*args[:2], *(kwargs[k] for k in ("self", "other") if k in kwargs)]
    return len(tensors) == 2 and all(isinstance(t, torch.Tensor) and t.dtype in (torch.float32, torch.float64)
                                     for t in tensors)


def _power(a: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``a ** e`` for float64 ``a`` of either sign and ``e`` an integer where ``a < 0``; 0 ** e
    is inf for e < 0 (the callers keep ``a == 0`` for the poles)."""
    magnitude = torch.exp(e * torch.log(a.abs()))
    odd = torch.remainder(e, 2) == 1
    return torch.where((a < 0) & odd, -magnitude, magnitude)


def _loop(x: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eager's first loop for every element: ``(s, a, b)`` at its end."""
    s = _power(q, -x)
    zero = torch.zeros_like(q)

    def running(i: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return (i < 9) | (a <= 9)

    def cond(i: torch.Tensor, a: torch.Tensor, s: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return running(i, a).any()

    def body(i: torch.Tensor, a: torch.Tensor, s: torch.Tensor, b: torch.Tensor, x: torch.Tensor
             ) -> tuple[torch.Tensor, ...]:
        on = running(i, a)
        a_next = a + 1
        b_next = _power(a_next, -x)
        return (torch.where(on, i + 1, i), torch.where(on, a_next, a), torch.where(on, s + b_next, s),
                torch.where(on, b_next, b), x.clone())

    _, a, s, b, _ = WHILE_LOOP(cond, body, (zero.clone(), q.contiguous(), s.contiguous(), zero.clone(),
                                            x.contiguous()), ())
    return s, a, b


def special_zeta(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    out_dtype = torch.result_type(x, q)
    x, q = torch.broadcast_tensors(x.to(torch.float64), q.to(torch.float64))
    integer_x = x == torch.floor(x)
    pole = (q <= 0) & (q == torch.floor(q))
    domain = (q <= 0) & ~pole & ~integer_x
    # Elements decided before the loop run it at a harmless point (x = 2, q = 1).
    decided = (x == 1) | (x < 1) | pole | domain | (q == math.inf) | torch.isnan(x) | torch.isnan(q)
    xs = torch.where(decided, 2.0, x)
    qs = torch.where(decided, 1.0, q)
    s, w, b = _loop(xs, qs)
    s = s + b * w / (xs - 1) - 0.5 * b
    a = torch.ones_like(s)
    k = torch.zeros_like(s)
    for divisor in _BERNOULLI_DIVISORS:
        a = a * (xs + k)
        b = b / w
        s = s + a * b / divisor
        k = k + 1
        a = a * (xs + k)
        b = b / w
        k = k + 1
    out = torch.where(q == math.inf, math.nan, s)
    out = torch.where(pole, math.inf, torch.where(domain, math.nan, out))
    out = torch.where(x < 1, math.nan, out)
    out = torch.where(x == 1, math.inf, out)
    out = torch.where(torch.isnan(x) | torch.isnan(q), math.nan, out)
    return out.to(out_dtype)
