"""Eigenvalues of symmetric matrices and singular values by cyclic Jacobi rotations.

``_linalg_eigh``, ``_linalg_svd`` and ``linalg_pinv`` are LAPACK's (``syevd``, ``gesdd``) with no
torch-mlir lowering, so ``eigvalsh``, ``svdvals``, ``matrix_rank``, ``cond``, the nuclear norm
and ``pinv`` ran eagerly. Jacobi's method is what XLA's ``eigh_expander`` uses for the same
reason: only elementwise ops, slices and products. Here, in float64 whatever the input:

* ``_eig``: cyclic Jacobi on a symmetric ``A`` [..., n, n]: for each pair ``p < q`` the rotation
  ``J`` with ``t = sign(theta) / (|theta| + sqrt(theta^2 + 1))``, ``theta = (a_qq - a_pp) / (2 a_pq)``
  (Golub and Van Loan, 8.5), ``A <- J^T A J``, ``V <- V J``; sweeps repeat in a ``while_loop``
  (lowering/loops.py) until every matrix's off-diagonal square sum is below
  ``(eps * ||A||_F) ** 2``, or ``MAX_SWEEPS``. Jacobi is accurate to ``eps * ||A||`` in each
  eigenvalue, as LAPACK's.
* Singular values of ``A`` [m, n] (``m >= n``, else of ``A^T``): Hestenes' one-sided Jacobi,
  rotating pairs of columns until all are orthogonal to ``eps`` (``A V`` then has columns
  ``sigma_i u_i``; no ``A^T A``, whose eigenvalues would lose the small singular values), of
  order ``n`` rather than the ``m + n`` of a symmetric form: a third of the rotations per sweep
  for 5 x 5 (the reference backend took over a minute to compile the larger loop). ``pinv(A) =
  V diag(1 / sigma) U^T = sum v_i (sigma_i u_i)^T / sigma_i ** 2`` over the kept singular
  values, the same for any basis of a repeated one (``pinv`` is unique; ``U`` and ``V``
  themselves are not, so ``svd`` and ``eigh`` with vectors stay eager: their signs would not
  be LAPACK's).

Only the forms with unique results are decomposed (supported_ops.CALL_CONDITIONS): ``_linalg_eigh``
without vectors, ``_linalg_svd`` without ``U``/``V``, ``linalg_pinv``; float32/float64, orders up to
``MAX_ORDER`` (``min(m, n)`` for singular values, ``max(m, n)`` up to ``MAX_ROWS``). NaN in the input: LAPACK may
raise (no convergence) where NaN comes out here.
"""

from __future__ import annotations

from typing import Any

import torch

from .loops import WHILE_LOOP

__all__ = ["MAX_ORDER", "MAX_ROWS", "MAX_SWEEPS", "OPS", "eigh", "fits", "pinv", "svd"]

aten = torch.ops.aten

#: The largest order rotated (a symmetric matrix's, or ``min(m, n)`` for singular values, with
#: ``max(m, n)`` at most twice that): a sweep is ``order * (order - 1) / 2`` rotations of ~20
#: ops each, unrolled in the loop body.
MAX_ORDER = 8
#: Cyclic Jacobi converges quadratically: 6 to 10 sweeps in float64 for these orders.
MAX_SWEEPS = 30

_FLOATS = (torch.float32, torch.float64)


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    return kwargs.get(name, args[i] if len(args) > i else default)


#: The longest columns rotated (their length only scales each rotation's sums).
MAX_ROWS = 64


def _fits_singular(m: int, n: int) -> bool:
    return min(m, n) <= MAX_ORDER and max(m, n) <= MAX_ROWS


def fits(op: Any, metas: list[tuple[Any, Any]], args: tuple, kwargs: dict) -> bool:
    (shape, dtype) = metas[0]
    if dtype not in _FLOATS or len(shape) < 2:
        return False
    m, n = shape[-2], shape[-1]
    if op is aten._linalg_eigh.default:
        return (m == n and n <= MAX_ORDER and _arg(args, kwargs, 2, "compute_v", True) is False
                and _arg(args, kwargs, 1, "UPLO", "L") in ("L", "U"))
    if op is aten._linalg_svd.default:
        return _fits_singular(m, n) and _arg(args, kwargs, 2, "compute_uv", True) is False
    if op is aten.linalg_pinv.atol_rtol_tensor:
        if bool(kwargs.get("hermitian", False)):
            return m == n and n <= MAX_ORDER
        return _fits_singular(m, n)
    return False


def _rotate(a: torch.Tensor, v: torch.Tensor, p: int, q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One Jacobi rotation zeroing ``a[p, q]`` (and ``a[q, p]``)."""
    n = a.shape[-1]
    app, aqq, apq = a[..., p, p], a[..., q, q], a[..., p, q]
    # (No Python numbers in ``where``: in a loop body they became ``to(device="meta")``
    # constants, which the reference pipeline does not legalize.)
    zero = apq == 0
    one = torch.ones_like(apq)
    theta = (aqq - app) / (2 * torch.where(zero, one, apq))
    sign = torch.where(theta >= 0, one, -one)
    t = torch.where(zero, one * 0, sign / (theta.abs() + torch.sqrt(theta * theta + 1)))
    c = 1 / torch.sqrt(t * t + 1)
    s = t * c
    c, s = c[..., None], s[..., None]
    idx = torch.arange(n, device=a.device)
    # Rows: (J^T A)_p = c A_p - s A_q, (J^T A)_q = s A_p + c A_q.
    rp, rq = a[..., p, :], a[..., q, :]
    a = torch.where((idx == p)[:, None], (c * rp - s * rq)[..., None, :],
                    torch.where((idx == q)[:, None], (s * rp + c * rq)[..., None, :], a))

    def columns(x: torch.Tensor) -> torch.Tensor:  # (X J): the same on columns p and q
        cp, cq = x[..., :, p], x[..., :, q]
        return torch.where(idx == p, (c * cp - s * cq)[..., :, None],
                           torch.where(idx == q, (s * cp + c * cq)[..., :, None], x))

    return columns(a), columns(v)


def _off(a: torch.Tensor) -> torch.Tensor:
    n = a.shape[-1]
    off = a.masked_fill(torch.eye(n, dtype=torch.bool, device=a.device), 0)
    return (off * off).sum((-2, -1))


def _eig(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(w, V)`` of symmetric float64 ``a`` (unsorted): ``a = V diag(w) V^T``."""
    n = a.shape[-1]
    eps = torch.finfo(torch.float64).eps
    tol = (eps * eps) * (a * a).sum((-2, -1))
    v = torch.eye(n, dtype=a.dtype, device=a.device).expand(a.shape).contiguous()
    pairs = [(p, q) for p in range(n) for q in range(p + 1, n)]

    def cond(k: torch.Tensor, a: torch.Tensor, v: torch.Tensor, tol: torch.Tensor) -> torch.Tensor:
        return (k < MAX_SWEEPS) & (_off(a) > tol).any()

    def body(k: torch.Tensor, a: torch.Tensor, v: torch.Tensor, tol: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for p, q in pairs:
            a, v = _rotate(a, v, p, q)
        return k + 1, a, v, tol.clone()

    if n > 1:
        k = torch.zeros((), dtype=torch.int64)
        _, a, v, _ = WHILE_LOOP(cond, body, (k, a.contiguous(), v, tol.contiguous()), ())
    return torch.diagonal(a, dim1=-2, dim2=-1), v


def _symmetric(a: torch.Tensor, uplo: str) -> torch.Tensor:
    """The symmetric matrix of ``a``'s ``uplo`` triangle (the other is not read), in float64."""
    a = a.to(torch.float64)
    tri = torch.tril(a) if uplo == "L" else torch.triu(a)
    strict = torch.tril(a, -1) if uplo == "L" else torch.triu(a, 1)
    return tri + strict.mT


def eigh(a: torch.Tensor, UPLO: str = "L", compute_v: bool = True) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: N803
    """``_linalg_eigh`` without vectors: ``(w ascending, empty)``."""
    if a.numel() == 0:
        return a.new_zeros(a.shape[:-1]), a.new_zeros((0,))
    w, _ = _eig(_symmetric(a, UPLO))
    return _sorted(w, descending=False).to(a.dtype), a.new_zeros((0,))


def _one_sided(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Hestenes' one-sided Jacobi on float64 ``a`` [..., m, n] (m >= n): rotations of column
    pairs until every pair is orthogonal to ``eps`` (``|a_p . a_q| <= eps |a_p| |a_q|``), or
    ``MAX_SWEEPS``. Returns ``(A V, V)``: the columns of ``A V`` are ``sigma_i u_i``."""
    n = a.shape[-1]
    eps = torch.finfo(torch.float64).eps
    v = torch.eye(n, dtype=a.dtype, device=a.device).expand(*a.shape[:-2], n, n).contiguous()
    pairs = [(p, q) for p in range(n) for q in range(p + 1, n)]
    # (Tensors are made inside the loop's functions: one they closed over would be a loop input
    # the importer does not pass.)

    def unconverged(a: torch.Tensor) -> torch.Tensor:
        idx = torch.arange(n, device=a.device)
        g = torch.matmul(a.mT, a)
        d = torch.sqrt(torch.diagonal(g, dim1=-2, dim2=-1))
        off = g.abs().masked_fill(idx.unsqueeze(-1) == idx, 0)
        return (off > eps * d.unsqueeze(-1) * d.unsqueeze(-2)).any()

    def rotate(a: torch.Tensor, v: torch.Tensor, p: int, q: int) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.arange(n, device=a.device)
        ap, aq = a[..., :, p], a[..., :, q]
        alpha, beta, gamma = (ap * ap).sum(-1), (aq * aq).sum(-1), (ap * aq).sum(-1)
        zero = gamma == 0
        one = torch.ones_like(gamma)
        zeta = (beta - alpha) / (2 * torch.where(zero, one, gamma))
        sign = torch.where(zeta >= 0, one, -one)
        t = torch.where(zero, one * 0, sign / (zeta.abs() + torch.sqrt(zeta * zeta + 1)))
        c = (1 / torch.sqrt(t * t + 1)).unsqueeze(-1)
        s = t.unsqueeze(-1) * c

        def columns(x: torch.Tensor) -> torch.Tensor:
            cp, cq = x[..., :, p], x[..., :, q]
            return torch.where(idx == p, (c * cp - s * cq)[..., :, None],
                               torch.where(idx == q, (s * cp + c * cq)[..., :, None], x))

        return columns(a), columns(v)

    def cond(k: torch.Tensor, a: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (k < MAX_SWEEPS) & unconverged(a)

    def body(k: torch.Tensor, a: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for p, q in pairs:
            a, v = rotate(a, v, p, q)
        return k + 1, a, v

    if n > 1:
        k = torch.zeros((), dtype=torch.int64)
        _, a, v = WHILE_LOOP(cond, body, (k, a.contiguous(), v), ())
    return a, v


def _sorted(values: torch.Tensor, descending: bool) -> torch.Tensor:
    """``values`` sorted along the last dim by ranks (comparisons of every pair, ties by
    position), not ``sort``: IREE merges the in-place buffers of two sorts in one graph (two
    ``svdvals``), which lazy-mlir refuses to compile (backends/iree)."""
    n = values.shape[-1]
    vi, vj = values.unsqueeze(-1), values.unsqueeze(-2)  # [..., i, j]
    pos = torch.arange(n, device=values.device)
    before = (vj > vi) if descending else (vj < vi)
    tie = (vj == vi) & (pos < pos.unsqueeze(-1))  # j < i
    rank = (before | tie).to(torch.int64).sum(-1)  # [..., i]
    hit = rank.unsqueeze(-1) == pos  # [..., i, r]
    return torch.where(hit, vi, torch.zeros_like(vi)).sum(-2)


def _singular(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(sigma [..., k] unsorted, A V, V)`` of ``A`` (m >= n) in float64."""
    av, v = _one_sided(a.to(torch.float64))
    return torch.sqrt((av * av).sum(-2)), av, v


def svd(a: torch.Tensor, full_matrices: bool = True, compute_uv: bool = True, driver: str | None = None
        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_linalg_svd`` without ``U``/``V``: ``(empty, S descending, empty)``."""
    k = min(a.shape[-2], a.shape[-1])
    if a.numel() == 0:
        return a.new_zeros((0,)), a.new_zeros((*a.shape[:-2], k)), a.new_zeros((0,))
    sigma, _, _ = _singular(a if a.shape[-2] >= a.shape[-1] else a.mT)
    return a.new_zeros((0,)), _sorted(sigma, descending=True).to(a.dtype), a.new_zeros((0,))


def _default_rtol(a: torch.Tensor, atol: torch.Tensor | None, rtol: torch.Tensor | None) -> tuple[Any, Any]:
    """Eager's ``get_atol_rtol``: float64 0-d defaults; ``rtol`` is ``eps * max(m, n)`` unless an
    ``atol > 0`` is given (then 0)."""
    zero = torch.zeros((), dtype=torch.float64, device=a.device)
    if rtol is None:
        default = torch.full((), torch.finfo(a.dtype).eps * max(a.shape[-2], a.shape[-1]), dtype=torch.float64,
                             device=a.device)
        rtol = default if atol is None else torch.where(atol > 0, zero, default)
    return (zero if atol is None else atol), rtol


def pinv(a: torch.Tensor, *, atol: torch.Tensor | None = None, rtol: torch.Tensor | None = None,
         hermitian: bool = False) -> torch.Tensor:
    """``linalg_pinv.atol_rtol_tensor``: eager's thresholds, on singular values rounded to ``A``'s
    dtype as eager's are; the products in float64."""
    m, n = a.shape[-2], a.shape[-1]
    if a.numel() == 0:
        return a.new_zeros((*a.shape[:-2], n, m))
    atol, rtol = _default_rtol(a, atol, rtol)
    if hermitian:
        w, u = _eig(_symmetric(a, "L"))
        s = w.to(a.dtype).abs()
        max_val = s.amax(-1, keepdim=True)
        tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * max_val)
        inv = torch.where(s > tol, 1 / w, 0.0)
        return torch.matmul(u * inv.unsqueeze(-2), u.mT).to(a.dtype)
    wide = m < n  # pinv(A) = pinv(A^T)^T
    sigma, av, v = _singular(a.mT if wide else a)
    s = sigma.to(a.dtype)
    max_val = s.amax(-1, keepdim=True)  # eager's S[..., :1], the largest
    tol = torch.maximum(atol.unsqueeze(-1), rtol.unsqueeze(-1) * max_val)
    # V diag(1 / sigma) U^T = sum v_i (sigma_i u_i)^T / sigma_i ** 2
    inv = torch.where(s > tol, 1 / (sigma * sigma), 0.0)
    out = torch.matmul(v * inv.unsqueeze(-2), av.mT)
    return (out.mT if wide else out).to(a.dtype)


#: op -> decomposition.
OPS: dict[Any, Any] = {
    aten._linalg_eigh.default: eigh,
    aten._linalg_svd.default: svd,
    aten.linalg_pinv.atol_rtol_tensor: pinv,
}
