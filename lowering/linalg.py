"""Dense linear algebra of small matrices as unrolled loops of ops torch-mlir lowers.

torch-mlir 20261001 has no lowering for the LAPACK-backed ops (triangular solves, Cholesky),
so every graph holding one was cut around an eager call, and the OpInfo float32 sweep counted
about 45 linear-algebra ops as fallbacks. XLA has the same problem (no LAPACK on a TPU) and
solves it with HLO "expanders" that rewrite each op into elementwise ops, slices and small
matrix products: ``cholesky_expander.cc`` (a left-looking column-by-column Cholesky) and
``triangular_solve_expander.cc`` (forward and back substitution). XLA emits ``while`` loops;
an FX graph has none, but the matrix size is known at trace time, so the loops here are
unrolled: one step per row or column, each a handful of whole-batch ops. The code is written
for this project (credit to XLA's expanders for the approach).

The unrolled graph grows linearly with the matrix order ``n`` (a step is a slice, one matrix
product against the rows already solved, a subtraction and a division), and each step's ops
are over ``O(n)`` to ``O(n ** 2)`` elements; ``MAX_ORDER`` bounds ``n`` so that compiling
stays a few seconds' work. Larger matrices keep LAPACK: the call runs eagerly
(``applies`` is asked both when the call is recorded and when it is lowered).

What eager's kernels do that these keep:

* only the triangle named by ``upper`` is read (the other may hold anything);
* ``unitriangular`` never reads the diagonal;
* batch dims broadcast as in ``linalg.solve_triangular``;
* ``linalg_cholesky_ex``'s ``info`` is LAPACK's: 0, or the order of the first leading minor
  whose pivot is not positive (NaN included: ``not d > 0``).

What they do not: on a matrix that is not positive-definite, the factor ``L`` eager returns is
whatever LAPACK's blocked or recursive ``potrf`` left behind (implementation-defined; the
documented contract is ``info``); here the failing column and all after it are NaN. A zero on a
triangular solve's diagonal gives +-inf/NaN where eager's ``trsm`` does, for a right-hand side
with no zero entries (reference ``trsm`` skips a zero entry's division).

Ops whose non-``_ex`` form raises inside the kernel have no ``info`` to check later:
``cholesky`` is not decomposed (lazy_core/cholesky_forms.py records ``linalg_cholesky_ex``
and the check instead); ``cholesky_inverse`` is, because that module records its check
(a zero on the diagonal) beside it at every call.
"""

from __future__ import annotations

from typing import Any

import torch

from lazy_core.ir import Node, Output

from . import empty_linalg, householder, jacobi

__all__ = ["DET", "MAX_ORDER", "OPS", "applies", "applies_call", "cholesky_ex", "cholesky_inverse", "cholesky_solve", "det",
           "inv_ex", "linalg_lu", "lu_factor_ex", "lu_solve", "lu_unpack", "slogdet", "solve_ex",
           "solve_triangular", "triangular_solve"]

aten = torch.ops.aten

#: The largest matrix order unrolled. A step is ~6 to ~20 ops (Cholesky, LU), each over up to
#: ``n ** 2`` elements, so the graph grows as ``n`` and its data as ``n ** 3``. Measured: a
#: batched 32 x 32 Cholesky took 130 s to compile on iree-vulkan (lavapipe) and a 32 x 32 LU
#: about 50 s, too much for a graph that LAPACK runs in microseconds; order 16 stays a few
#: seconds. 16 covers the small systems run inside a traced step (Kalman filters, 3-d
#: geometry, per-sample covariance) and OpInfo's samples (orders S = 5 and M = 10).
#: Larger matrices run eagerly.
MAX_ORDER = 16

_FLOATS = (torch.float32, torch.float64)


# -- when --------------------------------------------------------------------------------------


def _square_small(shape: Any, dtype: Any) -> bool:
    return (dtype in _FLOATS and len(shape) >= 2 and shape[-1] == shape[-2]
            and 1 <= shape[-1] <= MAX_ORDER)


def _rhs_fits(a_shape: Any, b_shape: Any, b_dtype: Any, a_dtype: Any, left: bool = True) -> bool:
    """``B`` is a matrix of ``A``'s dtype whose solved dim is ``A``'s order and whose batch
    dims broadcast with ``A``'s (what eager accepts; otherwise eager raises its own error),
    and it is not empty."""
    return empty_linalg.rhs_fits(a_shape, b_shape, b_dtype, a_dtype, left) and all(s > 0 for s in b_shape)


def _fits(op: Any, metas: list[tuple[Any, Any]], args: tuple, kwargs: dict, contiguous: bool) -> bool:
    """Whether ``op`` with operands of (shape, dtype) ``metas`` is decomposed (see ``applies``);
    ``contiguous``: whether the first operand is (see ``_det_factor``). Empty operands are
    lowering/empty_linalg.py's, for the ops it writes."""
    if op in empty_linalg.OPS and any(empty_linalg.is_empty(s) for s, _ in metas):
        return empty_linalg.fits(op, metas, args, kwargs)
    if op in householder.OPS:
        return householder.fits(op, metas, args, kwargs)
    if op in jacobi.OPS:
        return jacobi.fits(op, metas, args, kwargs)
    if op is aten.linalg_cholesky_ex.default:
        (shape, dtype), = metas[:1]
        return _square_small(shape, dtype)
    if op is aten.linalg_solve_triangular.default:
        (a_shape, a_dtype), (b_shape, b_dtype) = metas[:2]
        left = kwargs.get("left", args[3] if len(args) > 3 else True)
        return _square_small(a_shape, a_dtype) and _rhs_fits(a_shape, b_shape, b_dtype, a_dtype, left)
    if op is aten.triangular_solve.default:
        (b_shape, b_dtype), (a_shape, a_dtype) = metas[:2]
        return _square_small(a_shape, a_dtype) and _rhs_fits(a_shape, b_shape, b_dtype, a_dtype)
    if op is aten.cholesky_solve.default:
        (b_shape, b_dtype), (a_shape, a_dtype) = metas[:2]
        return _square_small(a_shape, a_dtype) and _rhs_fits(a_shape, b_shape, b_dtype, a_dtype)
    if op in (aten.linalg_lu_factor_ex.default, aten.linalg_lu.default):
        (shape, dtype), = metas[:1]
        return (kwargs.get("pivot", True) is True and dtype in _FLOATS and len(shape) >= 2
                and 1 <= shape[-2] <= MAX_ORDER and 1 <= shape[-1] <= MAX_ORDER)
    if op is aten.lu_unpack.default:
        (shape, dtype), (p_shape, p_dtype) = metas[:2]
        unpack = [kwargs.get(k, args[i] if len(args) > i else True)
                  for i, k in ((2, "unpack_data"), (3, "unpack_pivots"))]
        return (unpack == [True, True] and dtype in _FLOATS and p_dtype == torch.int32
                and len(shape) >= 2 and 1 <= shape[-2] <= MAX_ORDER and 1 <= shape[-1] <= MAX_ORDER
                and tuple(p_shape) == (*shape[:-2], min(shape[-2], shape[-1])))
    if op is aten.linalg_lu_solve.default:
        (shape, dtype), (p_shape, p_dtype), (b_shape, b_dtype) = metas[:3]
        return (_square_small(shape, dtype) and p_dtype == torch.int32
                and tuple(p_shape) == tuple(shape[:-1])
                and _rhs_fits(shape, b_shape, b_dtype, dtype, kwargs.get("left", True)))
    if op is aten._linalg_solve_ex.default:
        (shape, dtype), (b_shape, b_dtype) = metas[:2]
        left = kwargs.get("left", True)
        if _is_vector_rhs(shape, b_shape):
            if not left:
                return False
            b_shape = (*b_shape, 1)
        return _square_small(shape, dtype) and _rhs_fits(shape, b_shape, b_dtype, dtype, left)
    if op is aten.linalg_inv_ex.default:
        (shape, dtype), = metas[:1]
        return _square_small(shape, dtype)
    if op is aten.cholesky_inverse.default:
        (shape, dtype), = metas[:1]
        return _square_small(shape, dtype)
    if op in (aten._linalg_slogdet.default, DET):
        (shape, dtype), = metas[:1]
        return _square_small(shape, dtype) and contiguous
    return False


def applies(node: Node) -> bool:
    """``_ONLY_WHEN``: float32/float64 square matrices of order 1..``MAX_ORDER`` (empty
    and larger ones, other dtypes, and shapes eager rejects stay eager's)."""
    tensors = [a for a in node.args if isinstance(a, Output)]
    if any(t.meta is None for t in tensors):
        return False
    first = tensors[0].meta if tensors else None
    contiguous = first is not None and tuple(first.stride) == _row_major(first.shape)
    return _fits(node.op, [(t.meta.shape, t.meta.dtype) for t in tensors], node.args, node.kwargs, contiguous)


def _row_major(shape: Any) -> tuple[int, ...]:
    return tuple(torch.empty(tuple(shape), device="meta").stride())


def applies_call(op: Any) -> Any:
    """``supported_ops.CALL_CONDITIONS`` entry for ``op``: the same test on the call's lazy
    tensors, whose shapes and dtypes are known without running anything. A call it refuses
    runs eagerly (LAPACK), as before this module."""

    def condition(args: tuple, kwargs: dict) -> bool:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        contiguous = bool(tensors) and tensors[0].is_contiguous()
        return _fits(op, [(tuple(t.shape), t.dtype) for t in tensors], args, kwargs, contiguous)

    return condition


# -- triangular solves -------------------------------------------------------------------------


def _substitute(a: torch.Tensor, b: torch.Tensor, lower: bool, unit: bool) -> torch.Tensor:
    """``X`` with ``A X = B`` for ``A`` [..., n, n] triangular, ``B`` [..., n, k] of the same
    batch shape: forward (``lower``) or back substitution, one row of ``X`` per step. Only
    ``A``'s triangle is read (and its diagonal unless ``unit``)."""
    n = a.shape[-1]
    rows: dict[int, torch.Tensor] = {}
    order = range(n) if lower else range(n - 1, -1, -1)
    for i in order:
        r = b[..., i:i + 1, :]
        done = list(range(i)) if lower else list(range(i + 1, n))
        if done:  # no product over an empty dim (IREE crashed compiling those)
            solved = torch.cat([rows[j] for j in done], dim=-2)
            coeffs = a[..., i:i + 1, :i] if lower else a[..., i:i + 1, i + 1:]
            r = r - torch.matmul(coeffs, solved)
        if not unit:
            r = r / a[..., i:i + 1, i:i + 1]
        rows[i] = r
    return torch.cat([rows[i] for i in range(n)], dim=-2)


def _broadcast_batch(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return a.expand(*batch, *a.shape[-2:]), b.expand(*batch, *b.shape[-2:])


def solve_triangular(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> torch.Tensor:
    """``linalg.solve_triangular``: ``X A = B`` is ``A^T X^T = B^T``, the other triangle."""
    a, b = _broadcast_batch(a, b)
    if left:
        return _substitute(a, b, lower=not upper, unit=unitriangular)
    return _substitute(a.mT, b.mT, lower=upper, unit=unitriangular).mT


def triangular_solve(b: torch.Tensor, a: torch.Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The deprecated ``triangular_solve``: ``(X, A)`` (``A`` broadcast to the batch, as eager
    returns its copy), with ``A^T`` solved for when ``transpose``."""
    a, b = _broadcast_batch(a, b)
    coeff = a.mT if transpose else a
    x = _substitute(coeff, b, lower=upper == transpose, unit=unitriangular)
    return x, a.clone()


# -- Cholesky ----------------------------------------------------------------------------------


def cholesky_ex(a: torch.Tensor, *, upper: bool = False, check_errors: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """``linalg_cholesky_ex``, left-looking (XLA's ``cholesky_expander``): column ``j`` of ``L``
    is ``A[:, j] - L[:, :j] @ L[j, :j]``, scaled by the square root of its diagonal entry ``d``.
    ``info`` is the first ``j + 1`` with ``not d > 0``; from there on ``sqrt`` makes the columns
    NaN, so later (NaN) pivots fail too but do not move ``info``. ``check_errors`` is eager's
    (it raises only for bad arguments, which ``applies`` leaves to eager)."""
    if upper:  # U = L^T of the lower factor of A's upper triangle (read transposed)
        lower, info = cholesky_ex(a.mT)
        return lower.mT, info
    n = a.shape[-1]
    batch = a.shape[:-2]
    cols: list[torch.Tensor] = []
    info = torch.zeros(batch, dtype=torch.int32, device=a.device)
    for j in range(n):
        c = a[..., j:, j]  # the lower part of column j: rows j..n-1
        if j:
            done = torch.stack(cols, dim=-1)  # [..., n, j]
            c = c - torch.matmul(done[..., j:, :], done[..., j, :].unsqueeze(-1)).squeeze(-1)
        d = c[..., 0]
        failed = torch.logical_not(d > 0) & (info == 0)
        info = info.masked_fill(failed, j + 1)
        root = torch.sqrt(d).unsqueeze(-1)
        parts = [root] if j == n - 1 else [root, c[..., 1:] / root]
        if j:
            parts.insert(0, a.new_zeros(*batch, j))
        cols.append(torch.cat(parts, dim=-1))
    return torch.stack(cols, dim=-1), info


def cholesky_solve(b: torch.Tensor, factor: torch.Tensor, upper: bool = False) -> torch.Tensor:
    """``cholesky_solve``: ``A X = B`` with ``A = L L^T`` (or ``U^T U``), two substitutions.
    LAPACK's ``potrs`` reports nothing, so nothing is lost by not calling it."""
    factor, b = _broadcast_batch(factor, b)
    if upper:
        y = _substitute(factor.mT, b, lower=True, unit=False)
        return _substitute(factor, y, lower=False, unit=False)
    y = _substitute(factor, b, lower=True, unit=False)
    return _substitute(factor.mT, y, lower=False, unit=False)


def _triangular_inverse(lower: torch.Tensor) -> torch.Tensor:
    """``L^-1`` of a lower triangular ``L`` with LAPACK ``trtri``'s structure: entry ``(i, j)``
    sums only the products along ``j <= k < i`` and the upper triangle is exactly 0, so a NaN or
    infinity of ``L`` reaches the entries ``trtri``'s does and no others (a full product would
    spread it through ``0 * NaN``)."""
    n = lower.shape[-1]
    cols = torch.arange(n, device=lower.device)
    rows: list[torch.Tensor] = []
    for i in range(n):
        d = lower[..., i:i + 1, i]  # [..., 1]
        if i:
            prev = torch.stack(rows, dim=-2)  # [..., i, n]
            terms = lower[..., i, :i].unsqueeze(-1) * prev
            terms = terms.masked_fill(cols[:i].unsqueeze(-1) < cols, 0)  # k < j: not on a path
            below = -terms.sum(-2) / d
        else:
            below = torch.zeros_like(lower[..., 0, :])
        rows.append(torch.where(cols == i, 1 / d, torch.where(cols < i, below, 0)))
    return torch.stack(rows, dim=-2)


def cholesky_inverse(factor: torch.Tensor, upper: bool = False) -> torch.Tensor:
    """``cholesky_inverse``: ``(L L^T)^-1 = L^-T L^-1`` as LAPACK's ``potri`` (``trtri``, then
    ``lauum``: entry ``(i, j)`` sums ``k >= max(i, j)`` only), reading only ``L``'s triangle
    (``U = L^T`` when ``upper``). Its error (a zero on the diagonal) is lazy_core/cholesky_forms.py's
    check, recorded with it."""
    inv = _triangular_inverse(factor.mT if upper else factor)
    n = factor.shape[-1]
    k = torch.arange(n, device=factor.device)
    skip = k.view(n, 1, 1) < torch.maximum(k.view(1, n, 1), k.view(1, 1, n))
    return (inv.unsqueeze(-1) * inv.unsqueeze(-2)).masked_fill(skip, 0).sum(-3)


# -- LU with partial pivoting ------------------------------------------------------------------


def _swap_index(base: torch.Tensor, k: int, piv: torch.Tensor) -> torch.Tensor:
    """``base`` (``arange`` along the last dim, batch-expanded) with entries ``k`` and ``piv``
    ([..., 1]) exchanged: the row order after LAPACK's swap of rows ``k`` and ``piv``. A
    ``masked_fill`` for the Python ``k`` (a 0-d literal in ``where`` does not legalize)."""
    moved = base.masked_fill(base == piv, k)
    return torch.where(base == k, piv.expand_as(base), moved)


def _lu(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(LU, pivots, info, perm)`` of ``A`` [..., m, n]: LAPACK's ``getrf`` (right-looking,
    XLA's LU expander unrolled). The pivot of column ``k`` is the first row with the largest
    ``|a|`` among rows ``k..m-1`` (``idamax``; ``argmax`` returns the first of equal maxima).
    A zero pivot leaves its column unscaled (all zeros, as ``getf2`` skips the scaling) and sets
    ``info`` to ``k + 1`` if no earlier one did. ``perm`` is the row order: ``A[perm] = L U``."""
    m, n = a.shape[-2], a.shape[-1]
    batch = a.shape[:-2]
    base = torch.arange(m, device=a.device).expand(*batch, m)
    perm = base
    info = a.new_zeros(batch, dtype=torch.int32)
    pivots: list[torch.Tensor] = []
    for k in range(min(m, n)):
        if k < m - 1:
            piv = torch.argmax(torch.abs(a[..., k:, k]), dim=-1, keepdim=True) + k
            idx = _swap_index(base, k, piv)
            a = torch.gather(a, -2, idx.unsqueeze(-1).expand(*batch, m, n))
            perm = torch.gather(perm, -1, idx)
        else:
            piv = base[..., k:k + 1]
        pivots.append(piv)
        u = a[..., k:k + 1, k:k + 1]
        zero = u == 0
        info = info.masked_fill(zero.squeeze(-1).squeeze(-1) & (info == 0), k + 1)
        if k == m - 1:
            continue
        below = a[..., k + 1:, k:k + 1]
        l_col = torch.where(zero, below, below * (1 / u))  # getf2 scales by the reciprocal
        parts = [l_col]
        if k < n - 1:
            parts.append(a[..., k + 1:, k + 1:] - l_col * a[..., k:k + 1, k + 1:])
        lower = torch.cat(parts, dim=-1)
        if k:
            lower = torch.cat([a[..., k + 1:, :k], lower], dim=-1)
        a = torch.cat([a[..., :k + 1, :], lower], dim=-2)
    return a, (torch.cat(pivots, dim=-1) + 1).to(torch.int32), info, perm


def lu_factor_ex(a: torch.Tensor, *, pivot: bool = True, check_errors: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``linalg_lu_factor_ex``: ``(LU, pivots, info)``, pivots 1-based int32 as eager's."""
    lu, pivots, info, _ = _lu(a)
    return lu, pivots, info


def _unpack(lu: torch.Tensor, perm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(P, L, U)`` with ``A = P L U`` from the packed factor and the row order."""
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    rows = torch.arange(m, device=lu.device).unsqueeze(-1)
    cols = torch.arange(n, device=lu.device)
    lower = lu[..., :, :k].masked_fill(rows <= cols[:k], 0) + torch.eye(m, k, dtype=lu.dtype, device=lu.device)
    upper = lu[..., :k, :].masked_fill(rows[:k] > cols, 0)
    # P[perm[i], i] = 1: A[perm] = L U, so A = P L U.
    p = (perm.unsqueeze(-1) == torch.arange(m, device=lu.device)).mT.to(lu.dtype)
    return p, lower, upper


def linalg_lu(a: torch.Tensor, *, pivot: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``linalg_lu``: ``(P, L, U)``."""
    lu, _, _, perm = _lu(a)
    return _unpack(lu, perm)


def _perm_of(pivots: torch.Tensor, m: int) -> torch.Tensor:
    """The row order LAPACK's 1-based ``pivots`` apply, swap by swap (``laswp``). An
    out-of-range pivot swaps nothing (eager's ``lu_unpack`` checks only the shapes)."""
    base = torch.arange(m, device=pivots.device).expand(*pivots.shape[:-1], m)
    perm = base
    for k in range(pivots.shape[-1]):
        piv = pivots[..., k:k + 1].to(torch.int64) - 1
        perm = torch.gather(perm, -1, _swap_index(base, k, piv))
    return perm


def lu_unpack(lu: torch.Tensor, pivots: torch.Tensor, unpack_data: bool = True, unpack_pivots: bool = True
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lu_unpack`` (both parts: ``applies``)."""
    return _unpack(lu, _perm_of(pivots, lu.shape[-2]))


def _permute_rows(b: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """``b[..., perm, :]`` by a gather (no arithmetic: infinities in ``b`` stay where they are)."""
    return torch.gather(b, -2, perm.unsqueeze(-1).expand(*perm.shape, b.shape[-1]))


def _inverse_perm(perm: torch.Tensor) -> torch.Tensor:
    m = perm.shape[-1]
    hits = perm.unsqueeze(-1) == torch.arange(m, device=perm.device)  # [i, j]: perm[i] == j
    return torch.argmax(hits.to(torch.int32), dim=-2)


def _lu_solve(lu: torch.Tensor, perm: torch.Tensor, b: torch.Tensor, adjoint: bool) -> torch.Tensor:
    """``A X = B`` (or ``A^T X = B``) for ``A[perm] = L U``, batches already broadcast."""
    if not adjoint:
        y = _substitute(lu, _permute_rows(b, perm), lower=True, unit=True)
        return _substitute(lu, y, lower=False, unit=False)
    # A^T = U^T L^T P^T: X = P L^-T U^-T B.
    y = _substitute(lu.mT, b, lower=True, unit=False)
    z = _substitute(lu.mT, y, lower=False, unit=True)
    return _permute_rows(z, _inverse_perm(perm))


def _broadcast_lu(lu: torch.Tensor, perm: torch.Tensor, b: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    batch = torch.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    return (lu.expand(*batch, *lu.shape[-2:]), perm.expand(*batch, perm.shape[-1]),
            b.expand(*batch, *b.shape[-2:]))


def lu_solve(lu: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor, *, left: bool = True,
             adjoint: bool = False) -> torch.Tensor:
    """``linalg_lu_solve``; ``X A = B`` is ``A^T X^T = B^T``."""
    perm = _perm_of(pivots, lu.shape[-1])
    if left:
        return _lu_solve(*_broadcast_lu(lu, perm, b), adjoint)
    return _lu_solve(*_broadcast_lu(lu, perm, b.mT), not adjoint).mT


def _is_vector_rhs(a_shape: Any, b_shape: Any) -> bool:
    """torch's ``linalg_solve_is_vector_rhs``."""
    return len(b_shape) == 1 or (len(a_shape) - 1 == len(b_shape) and tuple(b_shape) == tuple(a_shape[:-1]))


def solve_ex(a: torch.Tensor, b: torch.Tensor, *, left: bool = True, check_errors: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_linalg_solve_ex``: ``(X, LU, pivots, info)`` of ``A`` (a vector ``B`` is a column);
    ``LU`` and pivots are eager's (the gradient solves with them)."""
    lu, pivots, info, perm = _lu(a)
    vector = _is_vector_rhs(a.shape, b.shape)
    rhs = b.unsqueeze(-1) if vector else b
    if left:
        x = _lu_solve(*_broadcast_lu(lu, perm, rhs), False)
    else:  # X A = B is A^T X^T = B^T
        x = _lu_solve(*_broadcast_lu(lu, perm, rhs.mT), True).mT
    return (x.squeeze(-1) if vector else x), lu, pivots, info


def inv_ex(a: torch.Tensor, *, check_errors: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``linalg_inv_ex``: eager's kernel is ``linalg_solve_ex(A, I)``: ``A X = I``, with
    ``getrf``'s ``info``."""
    lu, _, info, perm = _lu(a)
    eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device).expand(a.shape)
    return _lu_solve(lu, perm, eye, False), info


def _perm_sign(pivots: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``(-1) ** (number of pivots that swap)``, in ``like``'s dtype."""
    n = pivots.shape[-1]
    swaps = (pivots != torch.arange(1, n + 1, device=pivots.device, dtype=pivots.dtype)).to(torch.int64).sum(-1)
    return 1 - 2 * torch.remainder(swaps, 2).to(like.dtype)


def _det_factor(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(LU, pivots)`` as eager's det kernels compute them for a contiguous ``A`` (the only
    one ``applies`` lets through): of ``A^T`` (``det(A^T) = det(A)``, and LAPACK wants
    column-major input). The factor is a result that the gradient solves with, choosing the
    transposed solve by ``A.is_contiguous()`` at the call: a non-contiguous ``A`` (eager
    factors ``A`` itself) runs eagerly, since a lazy operand's traced strides need not be the
    call's (a lazy ``A.mT`` was traced contiguous)."""
    lu, pivots, _, _ = _lu(a.mT)
    return lu, pivots


def det(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_linalg_det``: ``(det, LU, pivots)``, the product of ``U``'s diagonal and the sign of
    the row order, as eager's kernel."""
    lu, pivots = _det_factor(a)
    d = lu[..., 0, 0]
    for i in range(1, a.shape[-1]):
        d = d * lu[..., i, i]
    return d * _perm_sign(pivots, lu), lu, pivots


def slogdet(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``_linalg_slogdet``: ``(sign, log|det|, LU, pivots)``; a singular matrix has sign 0 and
    ``-inf``, as eager's."""
    lu, pivots = _det_factor(a)
    diag = torch.diagonal(lu, dim1=-2, dim2=-1)
    sign = torch.sign(diag[..., 0])
    for i in range(1, a.shape[-1]):
        sign = sign * torch.sign(diag[..., i])
    return sign * _perm_sign(pivots, lu), torch.log(torch.abs(diag)).sum(-1), lu, pivots


def _or_empty(op: Any, decomposition: Any) -> Any:
    """``decomposition``, or lowering/empty_linalg.py's form when an operand is empty (the
    shapes are static while tracing it)."""
    empty = empty_linalg.OPS.get(op)

    def decomposed(*args: Any, **kwargs: Any) -> Any:
        if empty is not None and any(isinstance(a, torch.Tensor) and a.numel() == 0 for a in args):
            return empty(*args, **kwargs)
        if decomposition is None:
            raise NotImplementedError(f"{op}: only empty operands are decomposed")
        return decomposition(*args, **kwargs)

    return decomposed


#: op -> decomposition (``None``: only the empty form, lowering/empty_linalg.py).
_DECOMPOSITIONS: dict[Any, Any] = {
    aten.linalg_solve_triangular.default: solve_triangular,
    aten.triangular_solve.default: triangular_solve,
    aten.linalg_cholesky_ex.default: cholesky_ex,
    aten.cholesky_solve.default: cholesky_solve,
    aten.linalg_lu_factor_ex.default: lu_factor_ex,
    aten.linalg_lu.default: linalg_lu,
    aten.lu_unpack.default: lu_unpack,
    aten.linalg_lu_solve.default: lu_solve,
    aten._linalg_solve_ex.default: solve_ex,
    aten.linalg_inv_ex.default: inv_ex,
    aten._linalg_slogdet.default: slogdet,
    aten.cholesky_inverse.default: cholesky_inverse,
}

_DECOMPOSITIONS.update(householder.OPS)  # geqrf, orgqr, ormqr, qr (lowering/householder.py)
_DECOMPOSITIONS.update(jacobi.OPS)  # eigenvalues, singular values, pinv (lowering/jacobi.py)

OPS: dict[Any, Any] = {op: _or_empty(op, fn) for op, fn in _DECOMPOSITIONS.items()}

#: Decomposed here when small, but lowerable (badly) without: ``_linalg_det`` (registered with
#: lowering/empty_contractions.py's form of a 0 x 0 matrix).
DET = aten._linalg_det.default
