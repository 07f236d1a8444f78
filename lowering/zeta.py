"""``polygamma(n, x)`` for ``n >= 2``: ``(-1) ** (n + 1) * n! * zeta(n + 1, x)``, the Hurwitz zeta
function from elementary ops. torch-mlir has no lowering for it, so every graph holding one was
cut there and the op ran eagerly (issue 15's OpInfo sweep: the ``polygamma`` OpInfos sample
orders 1 to 3, so all six of them ran eagerly; orders 0 and 1 are lowering/gamma.py's).

The zeta sum follows the method of eager's kernel (Cephes' ``zeta``): terms ``(q + k) ** -s``
summed directly in order, then the Euler-Maclaurin tail at the last one (the integral, half the
last term, twelve Bernoulli terms), in float64. Eager sums until ``q + k`` passes 9 (at least
ten terms); here a fixed 20 terms for q >= -10, which is eager's sum in eager's order, its
cancellations included, plus a few terms of the tail (an ulp of float64). The order ``s = n + 1``
is a Python int, so every power is a product: the work is additions, products and quotients in
float64, which every backend computes as IEEE says (lavapipe included: no float64 ``pow``).
(Eager's float32 kernel is not that accurate: ``polygamma(2, -0.4957721)`` is 7e-5 off in
float32, within 1e-7 here.)

Below -10 eager's loop runs over the ``ceil(-q)`` terms below zero, a data-dependent count; here
they are the difference of two sums over positive arguments,
``(-1) ** s * (zeta(s, 1 - r) - zeta(s, m + 1 - r))`` with ``m = ceil(-q)`` and ``r = q + m`` in
(0, 1), added to ``zeta(s, r)``: equal as numbers, and closer to them than eager's long sum
(``polygamma(4, -16.5)``: eager -7.1631946632e-05, here and in fact -7.1631946694e-05).
Eager's special values are kept: +inf zeta (a pole) at 0, -0 and the negative
integers, -inf included; NaN at +inf and NaN.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import torch

__all__ = ["polygamma"]

#: Cephes' ``zeta`` divisors: (2k)! / B_2k, for the Euler-Maclaurin terms k = 1..12.
_BERNOULLI_DIVISORS = (
    12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9, 7.47242496e10,
    -2.950130727918164224e12, 1.1646782814350067249e14, -4.5979787224074726105e15,
    1.8152105401943546773e17, -7.1661652561756670113e18,
)


def _inverse_power(a: torch.Tensor, s: int) -> torch.Tensor:
    """``a ** -s`` by binary powering of ``1 / a``."""
    base, out = 1 / a, None
    while s:
        if s & 1:
            out = base if out is None else out * base
        s >>= 1
        if s:
            base = base * base
    return out


def _sum(s: int, q: torch.Tensor, terms: int) -> torch.Tensor:
    """``zeta(s, q)`` as eager's kernel sums it: ``terms`` terms ``(q + k) ** -s``, then the
    Euler-Maclaurin tail at the last one's ``a = q + terms - 1``: the integral ``b a / (s - 1)``,
    minus half the last term ``b``, and twelve Bernoulli terms. (Eager stops where a term falls
    below 2 ** -53 of the sum; summing on changes the float64 result by an ulp at most, and a
    fixed count keeps the graph small.)"""
    total = _inverse_power(q, s)
    for k in range(1, terms):
        b = _inverse_power(q + k, s)
        total = total + b
    a = q + (terms - 1)
    total = total + b * a / (s - 1) - 0.5 * b
    factor, k = 1.0, 0.0
    for divisor in _BERNOULLI_DIVISORS:
        factor *= s + k
        b = b / a
        total = total + factor * b / divisor
        k += 1
        factor *= s + k
        b = b / a
        k += 1
    return total


def _zeta(s: int, q: torch.Tensor) -> torch.Tensor:
    """``zeta(s, q)`` for every float64 q (integer s >= 2)."""
    pole = (q <= 0) & (q == torch.floor(q))  # 0, -0, the negative integers, -inf
    finite = torch.where(pole | ~torch.isfinite(q), 1.0, q)
    # From q >= -10 eager's loop reaches past 9 within 20 terms: the same sum, in its order.
    near = finite >= -10
    out = _sum(s, torch.where(near, finite, 1.0), 20)
    # Below, the terms under zero as a difference of sums over positive arguments.
    m = torch.where(near, 1.0, torch.ceil(-finite))
    r = torch.where(near, 0.5, finite + m)
    # One sum over the three arguments (a third of the ops to compile); slices, not ``unbind``:
    # the reference pipeline failed to legalize the latter's ``select``.
    n = r.numel()
    sums = _sum(s, torch.cat([r.reshape(-1), (1 - r).reshape(-1), (m + 1 - r).reshape(-1)]), 10)
    at_r, at_1_r, at_m_1_r = (sums[i * n:(i + 1) * n].reshape(r.shape) for i in range(3))
    # The two large sums first: for odd s they cancel (exactly, for a half-integer q).
    split = (at_r + at_1_r) - at_m_1_r if s % 2 == 0 else (at_r - at_1_r) + at_m_1_r
    out = torch.where(near, out, split)
    out = torch.where(pole, math.inf, out)
    return torch.where(q == math.inf, math.nan, torch.where(torch.isnan(q), q, out))


def polygamma(n: int, x: torch.Tensor) -> torch.Tensor:
    """``polygamma(n, x)`` for n >= 2, as eager: the zeta sum in float64, rounded to the result's
    dtype, times ``(-1) ** (n + 1) * exp(lgamma(n + 1))`` in that dtype."""
    out = x.dtype if x.dtype.is_floating_point else torch.get_default_dtype()
    work = torch.float32 if out in (torch.float16, torch.bfloat16) else out
    zeta = _zeta(n + 1, x.to(torch.float64)).to(work)
    factor = _factorial(n, work == torch.float32)
    return (zeta * (factor if n % 2 else -factor)).to(out)


@functools.cache
def _factorial(n: int, single: bool) -> float:
    """``exp(lgamma(n + 1))`` as eager's kernel computes it: the C library's ``expf(lgammaf())``
    for float32 (not always n! exactly), ``exp(lgamma())`` for float64. Python's own
    ``math.lgamma`` is not the C library's, hence ctypes; without a C library, n! itself."""
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    except OSError:
        return float(math.factorial(n))
    kind = ctypes.c_float if single else ctypes.c_double
    exp, lgamma = (libm.expf, libm.lgammaf) if single else (libm.exp, libm.lgamma)
    for fn in (exp, lgamma):
        fn.restype, fn.argtypes = kind, [kind]
    return float(exp(lgamma(n + 1.0)))
