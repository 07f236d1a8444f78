"""Householder reflectors: ``geqrf``, ``linalg_householder_product`` (``orgqr``), ``ormqr``, ``linalg_qr``.

LAPACK-backed, with no torch-mlir lowering: each ran eagerly (``linalg_qr`` is in
supported_ops.NOT_LOWERED: its graphs failed to compile). Like lowering/linalg.py, the loops
are unrolled over the reflectors (at most ``MAX_REFLECTORS``), each step a few whole-batch ops.

* ``geqrf`` is LAPACK's unblocked ``geqr2`` (what ``geqrf`` runs below its block size): for column
  ``i``, ``dlarfg`` makes ``H_i = I - tau v v^T`` with ``v = [1, x / (alpha - beta)]``,
  ``beta = -sign(alpha) * hypot(alpha, |x|)`` (a ``-0.0`` alpha counts as negative, as
  Fortran's ``SIGN``) and ``tau = (beta - alpha) / beta``; a column already zero below the
  diagonal gets ``tau = 0`` and is left alone. ``H_i`` then updates the columns to the right.
  Not done: ``dlarfg``'s rescaling of a ``beta`` below the smallest normal number, and
  ``dnrm2``'s scaling (a column whose squares overflow gives inf/NaN where LAPACK does not).
* ``Q = H_1 ... H_k`` (``householder_product``: its first ``n`` columns) and ``ormqr``'s
  products ``Q C``, ``Q^T C``, ``C Q``, ``C Q^T`` apply one reflector at a time:
  ``H C = C - tau v (v^T C)``.
* ``linalg_qr`` is ``geqrf``, ``householder_product`` and the upper triangle, as eager's kernel.

For a matrix of deficient rank the reflectors past the rank are fixed by rounding noise, in
LAPACK as here, so ``Q`` and ``R`` may then differ from eager's (both factor ``A``).
"""

from __future__ import annotations

from typing import Any

import torch

from . import empty_linalg

__all__ = ["MAX_REFLECTORS", "OPS", "fits", "geqrf", "householder_product", "linalg_qr", "ormqr"]

aten = torch.ops.aten

#: The most reflectors (and rows) unrolled; more run eagerly.
MAX_REFLECTORS = 32

_FLOATS = (torch.float32, torch.float64)


def _small(shape: Any, dtype: Any) -> bool:
    return (dtype in _FLOATS and len(shape) >= 2 and 1 <= shape[-2] <= MAX_REFLECTORS
            and 1 <= shape[-1] <= MAX_REFLECTORS and not empty_linalg.is_empty(shape))


def fits(op: Any, metas: list[tuple[Any, Any]], args: tuple, kwargs: dict) -> bool:
    """Whether ``op`` is decomposed for operands of (shape, dtype) ``metas``: small float
    matrices, shapes eager accepts (anything else keeps eager's kernel and its error)."""
    (shape, dtype) = metas[0]
    if op in (aten.geqrf.default, aten.linalg_qr.default):  # empty matrices too: no reflector
        if not (dtype in _FLOATS and len(shape) >= 2 and shape[-2] <= MAX_REFLECTORS
                and shape[-1] <= MAX_REFLECTORS):
            return False
        mode = kwargs.get("mode", args[1] if len(args) > 1 else "reduced")
        return op is aten.geqrf.default or mode in ("reduced", "complete", "r")
    if not _small(shape, dtype):
        return False
    (t_shape, t_dtype) = metas[1]
    if t_dtype != dtype or tuple(t_shape[:-1]) != tuple(shape[:-2]) or t_shape[-1] > shape[-1]:
        return False
    if op is aten.linalg_householder_product.default:
        return shape[-2] >= shape[-1] and t_shape[-1] >= 1
    if op is aten.ormqr.default:
        (c_shape, c_dtype) = metas[2]
        left = kwargs.get("left", args[3] if len(args) > 3 else True)
        m = shape[-2]
        return (c_dtype == dtype and len(c_shape) == len(shape) and tuple(c_shape[:-2]) == tuple(shape[:-2])
                and c_shape[-2 if left else -1] == m and t_shape[-1] <= m and t_shape[-1] >= 1
                and not empty_linalg.is_empty(c_shape))
    return False


def _reflector(a: torch.Tensor, tau: torch.Tensor, i: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(v, tau_i)`` of reflector ``i``: ``v`` [..., m] is 0 above row ``i``, 1 at it, and
    ``A``'s column ``i`` below; ``tau_i`` [..., 1]."""
    m = a.shape[-2]
    rows = torch.arange(m, device=a.device)
    col = a[..., :, i]
    v = torch.where(rows == i, 1.0, torch.where(rows > i, col, 0.0)).to(a.dtype)
    return v, tau[..., i:i + 1]


def _apply_left(c: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``H C = C - tau v (v^T C)``."""
    w = torch.matmul(v.unsqueeze(-2), c)  # [..., 1, n]
    return c - (t.unsqueeze(-1) * v.unsqueeze(-1)) * w


def _apply_right(c: torch.Tensor, v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``C H = C - tau (C v) v^T``."""
    w = torch.matmul(c, v.unsqueeze(-1))  # [..., p, 1]
    return c - (w * t.unsqueeze(-1)) * v.unsqueeze(-2)


def householder_product(a: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """The first ``n`` columns of ``H_1 ... H_k``: applied to ``I[:, :n]`` from ``H_k`` down (``orgqr``)."""
    m, n = a.shape[-2], a.shape[-1]
    q = torch.eye(m, n, dtype=a.dtype, device=a.device).expand(*a.shape[:-2], m, n)
    for i in reversed(range(tau.shape[-1])):
        q = _apply_left(q, *_reflector(a, tau, i))
    return q


def ormqr(a: torch.Tensor, tau: torch.Tensor, c: torch.Tensor, left: bool = True, transpose: bool = False
          ) -> torch.Tensor:
    """``Q C``, ``Q^T C``, ``C Q`` or ``C Q^T`` for ``Q = H_1 ... H_k`` (each ``H_i`` symmetric)."""
    k = tau.shape[-1]
    first_to_last = left == transpose  # Q^T C = H_k ... H_1 C; C Q = C H_1 ... H_k
    order = range(k) if first_to_last else reversed(range(k))
    for i in order:
        v, t = _reflector(a, tau, i)
        c = _apply_left(c, v, t) if left else _apply_right(c, v, t)
    return c


def _negative(x: torch.Tensor) -> torch.Tensor:
    """Whether ``x`` has its sign bit set (``-0.0`` included: ``1 / -0.0`` is ``-inf``)."""
    return (x < 0) | ((x == 0) & (1 / x < 0))


def geqrf(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(QR, tau)``: ``R`` on and above the diagonal, the reflectors' ``v`` below it."""
    m, n = a.shape[-2], a.shape[-1]
    rows = torch.arange(m, device=a.device)
    cols = torch.arange(n, device=a.device)
    taus: list[torch.Tensor] = []
    for i in range(min(m, n)):
        col = a[..., :, i]
        alpha = col[..., i:i + 1]  # [..., 1]
        below = torch.where(rows > i, col, 0.0).to(a.dtype)
        xnorm = torch.sqrt((below * below).sum(-1, keepdim=True))
        keep = xnorm == 0  # H = I
        norm = torch.sqrt(alpha * alpha + xnorm * xnorm)
        beta = torch.where(_negative(alpha), norm, -norm)
        tau = torch.where(keep, 0.0, (beta - alpha) / beta).to(a.dtype)
        scaled = torch.where(keep, below, below / (alpha - beta))
        beta = torch.where(keep, alpha, beta)
        new_col = torch.where(rows == i, beta, torch.where(rows > i, scaled, col))
        a = torch.where(cols == i, new_col.unsqueeze(-1), a)
        taus.append(tau)
        if i < n - 1:  # H_i on the columns to the right, rows i.. (v is 0 above row i)
            v = torch.where(rows == i, 1.0, torch.where(rows > i, scaled, 0.0)).to(a.dtype)
            updated = _apply_left(a, v, tau)
            a = torch.where(cols > i, updated, a)
    if not taus:
        return a.clone(), a.new_zeros((*a.shape[:-2], 0))
    return a, torch.cat(taus, dim=-1)


def linalg_qr(a: torch.Tensor, mode: str = "reduced") -> tuple[torch.Tensor, torch.Tensor]:
    """``(Q, R)``: ``Q`` [m, k] (``complete``: [m, m]; ``r``: empty), ``R`` its upper triangle."""
    m, n = a.shape[-2], a.shape[-1]
    k = min(m, n)
    qr, tau = geqrf(a)
    rows = m if mode == "complete" else k
    r = torch.triu(qr[..., :rows, :])
    if mode == "r":
        return a.new_zeros((0,)), r
    if rows > n:  # complete, m > n: Q's last columns come from reflectors on zero columns
        qr = torch.cat([qr, qr.new_zeros((*qr.shape[:-1], rows - n))], dim=-1)
    return householder_product(qr[..., :, :rows], tau), r


#: op -> decomposition.
OPS: dict[Any, Any] = {
    aten.geqrf.default: geqrf,
    aten.linalg_householder_product.default: householder_product,
    aten.ormqr.default: ormqr,
    aten.linalg_qr.default: linalg_qr,
}
