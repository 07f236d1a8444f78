"""The orthogonal polynomials of ``torch.special`` as eager's kernels compute them.

``chebyshev_polynomial_{t,u,v,w}``, their ``shifted_`` forms, ``hermite_polynomial_{h,he}``,
``laguerre_polynomial_l`` and ``legendre_polynomial_p`` have no torch-dialect op, so each ran
eagerly and cut its graph (twelve OpInfos of issue 15's sweep). Eager's kernels
(``ATen/native/Math.h``) take the order ``n`` as a tensor, truncated to an integer, and run a
three-term recurrence ``n - 1`` times, stopping early where the value became NaN; a few
special arguments and, for the Chebyshev kinds inside (-1, 1) above a small order, a closed
form in ``acos`` come first. The trip count is data, so the recurrence is a ``while_loop``
(lowering/loops.py) over the whole tensor, each element updated while its own count lasts:
the same operations in the same order as eager's scalar loop, its fused multiply-adds
included (``_fms``), so the values are eager's. Where eager's ``x`` is NaN its loop returns an
uninitialized variable (the previous element's value, in practice); here NaN.

Orders that are NaN, infinite or beyond int64 (undefined in C++; x86 converts them to the
smallest int64) count as negative, as there: the result is 0.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .loops import WHILE_LOOP

__all__ = ["OPS"]

aten = torch.ops.aten
Tensor = torch.Tensor
_Step = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]  # (k as a float, x, p, q) -> r


def _operands(x: Tensor | float, n: Tensor | float) -> tuple[Tensor, Tensor]:
    """``x`` in the result's float dtype and ``n`` as eager's ``static_cast<int64_t>(n)``."""
    dtype = torch.result_type(x, n)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    # (``full``, not ``as_tensor``: a traced constant tensor would be a graph attribute.)
    x = x.to(dtype) if isinstance(x, Tensor) else torch.full((), x, dtype=dtype)
    n = n if isinstance(n, Tensor) else torch.full((), n, dtype=torch.result_type(n, n))
    if n.is_floating_point():
        n = n.to(torch.float64)
        defined = torch.isfinite(n) & (n.abs() < 2.0 ** 63)
        n = torch.where(defined, n, -1.0)
    n = n.to(torch.int64)
    shape = torch.broadcast_shapes(x.shape, n.shape)
    return x.expand(shape), n.expand(shape)


def _recurrence(x: Tensor, n_last: Tensor, used: Tensor, q: Tensor, first: int, step: _Step,
                stop_at_nan: bool) -> Tensor:
    """Eager's loop ``p, q = 1, q; for k in first..n_last: r = step(k, x, p, q); p, q = q, r``
    (ending where ``q`` is NaN if ``stop_at_nan``) for the elements where ``used``; their
    last ``q``. One ``while_loop`` steps every element together, until the largest count.
    The body sees only its carries (``step`` gets ``x`` from them): a tensor it closed over
    would be a loop input torch-mlir's importer does not pass."""
    last = torch.where(used, n_last, first - 1)
    p = torch.ones_like(q)

    def running(k: Tensor, last: Tensor, q: Tensor) -> Tensor:
        on = k <= last
        return on & ~torch.isnan(q) if stop_at_nan else on

    def cond(k: Tensor, last: Tensor, x: Tensor, p: Tensor, q: Tensor) -> Tensor:
        return running(k, last, q).any()

    def body(k: Tensor, last: Tensor, x: Tensor, p: Tensor, q: Tensor) -> tuple[Tensor, ...]:
        on = running(k, last, q)
        r = step(k.to(x.dtype), x, p, q)
        return k + 1, last.clone(), x.clone(), torch.where(on, q, p), torch.where(on, r, q)

    k = torch.full((), first, dtype=torch.int64)
    # The HOP itself, not ``torch._higher_order_ops.while_loop``: that entry point traces the
    # functions through ``torch.compile``, whose automatic dynamic shapes lifted the sizes of a
    # second trace at another shape into extra loop inputs (``(5, 5, 5, 5)``), which
    # torch-mlir's importer passed to a loop region that takes none (an invalid module).
    return WHILE_LOOP(cond, body, (k, last.contiguous(), x.contiguous(), p.contiguous(), q.contiguous()), ())[4]


def _fms(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``a * b - c`` as eager's kernels compute it: GCC contracts it to one fused multiply-add
    in the AVX2/AVX512 builds ATen dispatches to (rounded once: 100% of 3,000 float32 samples
    equal eager's this way, 42-58% with two roundings). float32 runs in float64, where the
    product is exact; float64 rounds twice (no fused op to emulate it with), within an ulp."""
    if a.dtype != torch.float32:
        return a * b - c
    return (a.to(torch.float64) * b.to(torch.float64) - c.to(torch.float64)).to(torch.float32)


def _even(n: Tensor) -> Tensor:
    return torch.remainder(n, 2) == 0


def _as(x: Tensor, v: Tensor) -> Tensor:
    return v.to(x.dtype)


def _chebyshev(kind: str, shifted: bool) -> Callable[..., Tensor]:
    """``[shifted_]chebyshev_polynomial_{kind}``: Math.h's kernels, in their order."""
    closed_above = 4 if (shifted and kind == "w") else 6 if (shifted or kind == "t") else 8

    def poly(x: Tensor | float, n: Tensor | float) -> Tensor:
        x, n = _operands(x, n)
        one = torch.ones_like(x)
        y = x + x - 1.0 if shifted else x  # Math.h writes ``x + x - T(1.0)`` at every use
        m, odd_sign = _as(x, n + n + 1), torch.where(_even(n), 1.0, -1.0).to(x.dtype)
        n1 = _as(x, n + 1)
        q0 = {"t": y, "u": y + y, "v": y + y - 1.0, "w": y + y + 1.0}[kind]
        # The edge arguments: |x| == 1 (x == 1 and x == 0 when shifted).
        top, bottom = (x == 1.0, x == 0.0) if shifted else (x == 1.0, x == -1.0)
        top_value = {"t": one, "u": n1, "v": one, "w": m}[kind]
        bottom_value = {"t": odd_sign, "u": n1 * odd_sign, "v": m * odd_sign, "w": odd_sign}[kind]
        # The closed form inside (-1, 1) above a small order.
        closed = (n > closed_above) & (y.abs() < 1.0)
        angle = torch.acos(torch.where(closed, y, 0.0))
        if kind == "t":
            closed_value = torch.cos(_as(x, n) * angle)
        elif kind == "u":
            s = torch.sin(angle)
            closed_value = torch.where(s != 0.0, torch.sin(n1 * angle) / s, n1 * torch.cos(n1 * angle) / y)
        elif kind == "v":
            half = n.to(x.dtype) + 0.5
            closed_value = torch.where(torch.sin(angle / 2.0) != 1.0, torch.cos(half * angle) / torch.cos(angle / 2.0),
                                       m * odd_sign)
        else:
            half = n.to(x.dtype) + 0.5
            edge = torch.where(y > 0.0, m, odd_sign) if not shifted else odd_sign
            closed_value = torch.where(torch.cos(angle / 2.0) != 1.0, torch.sin(half * angle) / torch.sin(angle / 2.0),
                                       edge)
        used = (n >= 2) & ~top & ~bottom & ~closed
        def step(k: Tensor, x: Tensor, p: Tensor, q: Tensor) -> Tensor:
            y = x + x - 1.0 if shifted else x
            return _fms(y + y, q, p)

        r = _recurrence(x, n, used, q0, 2, step, stop_at_nan=True)
        r = torch.where(n == 1, q0, r)
        r = torch.where(n == 0, one, r)
        r = torch.where(closed, closed_value, r)
        r = torch.where(bottom, bottom_value, r)
        r = torch.where(top, top_value, r)
        return torch.where(n < 0, torch.zeros_like(x), r)

    return poly


def _hermite(physicists: bool) -> Callable[..., Tensor]:
    """``hermite_polynomial_h`` (physicists') and ``_he`` (probabilists'): NaN above order
    128 in float32 and 512 in float64 (Math.h's ``getHermitianLimit``); no early stop."""

    def poly(x: Tensor | float, n: Tensor | float) -> Tensor:
        x, n = _operands(x, n)
        limit = 128 if x.dtype == torch.float32 else 512
        q0 = x + x if physicists else x
        used = (n >= 2) & (n <= limit)
        if physicists:  # k = 2, 4, ..., 2n - 2
            r = _recurrence(x, n - 1, used, q0, 1, lambda k, x, p, q: _fms(x + x, q, (k + k) * p), stop_at_nan=False)
        else:  # k = 1, ..., n - 1
            r = _recurrence(x, n - 1, used, q0, 1, lambda k, x, p, q: _fms(x, q, k * p), stop_at_nan=False)
        r = torch.where(n > limit, torch.full_like(x, float("nan")), r)
        r = torch.where(n == 1, q0, r)
        r = torch.where(n == 0, torch.ones_like(x), r)
        return torch.where(n < 0, torch.zeros_like(x), r)

    return poly


def laguerre_polynomial_l(x: Tensor | float, n: Tensor | float) -> Tensor:
    x, n = _operands(x, n)
    q0 = 1.0 - x
    used = (n >= 2) & (x != 0.0)
    r = _recurrence(x, n - 1, used, q0, 1, lambda k, x, p, q: _fms((k + k) + (1.0 - x), q, k * p) / (k + 1.0),
                    stop_at_nan=True)
    r = torch.where(n == 1, q0, r)
    r = torch.where((n == 0) | (x == 0.0), torch.ones_like(x), r)
    return torch.where(n < 0, torch.zeros_like(x), r)


def legendre_polynomial_p(x: Tensor | float, n: Tensor | float) -> Tensor:
    x, n = _operands(x, n)
    edge = x.abs() == 1.0
    used = (n >= 2) & ~edge
    r = _recurrence(x, n - 1, used, x, 1, lambda k, x, p, q: _fms((k + k + 1.0) * x, q, k * p) / (k + 1.0),
                    stop_at_nan=True)
    r = torch.where(n == 1, x, r)
    r = torch.where(n == 0, torch.ones_like(x), r)
    sign = torch.where((x > 0.0) | _even(n), 1.0, -1.0).to(x.dtype)
    r = torch.where(edge, sign, r)
    return torch.where(n < 0, torch.zeros_like(x), r)


_FUNCTIONS: dict[str, Callable[..., Tensor]] = {
    **{f"chebyshev_polynomial_{k}": _chebyshev(k, False) for k in "tuvw"},
    **{f"shifted_chebyshev_polynomial_{k}": _chebyshev(k, True) for k in "tuvw"},
    "hermite_polynomial_h": _hermite(True),
    "hermite_polynomial_he": _hermite(False),
    "laguerre_polynomial_l": laguerre_polynomial_l,
    "legendre_polynomial_p": legendre_polynomial_p,
}

#: The ATen ops decomposed here (each overload: tensor and tensor, a number for ``x`` or ``n``).
OPS: dict[torch._ops.OpOverload, Callable[..., Tensor]] = {
    getattr(getattr(aten, f"special_{name}"), overload): fn
    for name, fn in _FUNCTIONS.items() for overload in ("default", "x_scalar", "n_scalar")
}
