"""Linear algebra of empty operands: results written from the shapes alone.

A 0 x 0 matrix, an empty batch, or a right-hand side with no columns leaves nothing to
factor or solve: eager returns empty results, plus a few that are not empty and fixed
(``info`` is 0, the sign of a 0 x 0 determinant 1 and its log 0, ``triangular_solve``'s copy
of a non-empty ``A``). ``lowering/linalg.py``'s unrolled loops refused such operands (order 0,
or a product over an empty dimension, which IREE crashed compiling), so each of these calls
ran eagerly: the first samples of the OpInfos ``linalg.inv``, ``linalg.cholesky``,
``slogdet``, ``logdet``, ``cholesky_solve``, ``cholesky_inverse``, ``lu_solve`` and
``triangular_solve`` are empty. The forms here hold no arithmetic on the empty operands.

``fits`` accepts only what eager accepts (float matrices, square where eager wants them,
right-hand sides whose solved dim matches and whose batch dims broadcast): anything else
keeps eager's error at the call.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["OPS", "fits", "is_empty", "rhs_fits"]

aten = torch.ops.aten

_FLOATS = (torch.float32, torch.float64)


def is_empty(shape: Any) -> bool:
    return math.prod(shape) == 0


def _square(shape: Any, dtype: Any) -> bool:
    return dtype in _FLOATS and len(shape) >= 2 and shape[-1] == shape[-2]


def rhs_fits(a_shape: Any, b_shape: Any, b_dtype: Any, a_dtype: Any, left: bool = True) -> bool:
    """``B`` is a matrix of ``A``'s dtype whose solved dim is ``A``'s order and whose batch dims
    broadcast with ``A``'s: what eager accepts (otherwise eager raises its own error)."""
    if b_dtype != a_dtype or len(b_shape) < 2 or b_shape[-2 if left else -1] != a_shape[-1]:
        return False
    try:
        torch.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    except RuntimeError:
        return False
    return True


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any) -> Any:
    return kwargs.get(name, args[i] if len(args) > i else default)


def fits(op: Any, metas: list[tuple[Any, Any]], args: tuple, kwargs: dict) -> bool:
    """Whether ``op`` with operands of (shape, dtype) ``metas`` has an empty operand this
    module writes the result for (``linalg._fits`` asks it first)."""
    shapes = [s for s, _ in metas]
    if not any(is_empty(s) for s in shapes):
        return False
    if op in (aten.linalg_cholesky_ex.default, aten.linalg_inv_ex.default, aten._linalg_slogdet.default,
              aten.cholesky_inverse.default):
        (shape, dtype), = metas[:1]
        return _square(shape, dtype)
    if op is aten.linalg_solve_triangular.default:
        (a_shape, a_dtype), (b_shape, b_dtype) = metas[:2]
        left = _arg(args, kwargs, 3, "left", True)
        return _square(a_shape, a_dtype) and rhs_fits(a_shape, b_shape, b_dtype, a_dtype, left)
    if op in (aten.triangular_solve.default, aten.cholesky_solve.default):
        (b_shape, b_dtype), (a_shape, a_dtype) = metas[:2]
        return _square(a_shape, a_dtype) and rhs_fits(a_shape, b_shape, b_dtype, a_dtype)
    if op is aten.linalg_lu_solve.default:
        (shape, dtype), (p_shape, p_dtype), (b_shape, b_dtype) = metas[:3]
        return (_square(shape, dtype) and p_dtype == torch.int32 and tuple(p_shape) == tuple(shape[:-1])
                and rhs_fits(shape, b_shape, b_dtype, dtype, kwargs.get("left", True)))
    if op is aten._linalg_solve_ex.default:
        # Only an empty A (a non-empty one is factored, its LU and info are results).
        (shape, dtype), (b_shape, b_dtype) = metas[:2]
        if not is_empty(shape) or not _square(shape, dtype) or b_dtype != dtype:
            return False
        if len(b_shape) == 1 or (len(shape) - 1 == len(b_shape) and tuple(b_shape) == tuple(shape[:-1])):
            return kwargs.get("left", True) and rhs_fits(shape, (*b_shape, 1), b_dtype, dtype)
        return rhs_fits(shape, b_shape, b_dtype, dtype, kwargs.get("left", True))
    return False


def _batch(*shapes: Any) -> tuple[int, ...]:
    return tuple(torch.broadcast_shapes(*(tuple(s[:-2]) for s in shapes)))


def _info(a: torch.Tensor) -> torch.Tensor:
    return a.new_zeros(a.shape[:-2], dtype=torch.int32)


def cholesky_ex(a: torch.Tensor, *, upper: bool = False, check_errors: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor]:
    return a.clone(), _info(a)


def inv_ex(a: torch.Tensor, *, check_errors: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return a.clone(), _info(a)


def slogdet(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The empty product: sign 1, log|det| 0 (a 0 x 0 matrix; an empty batch has none)."""
    batch = a.shape[:-2]
    return (a.new_ones(batch), a.new_zeros(batch), a.clone(),
            a.new_zeros((*batch, a.shape[-1]), dtype=torch.int32))


def cholesky_inverse(a: torch.Tensor, upper: bool = False) -> torch.Tensor:
    return a.clone()


def _solution(a: torch.Tensor, b: torch.Tensor, left: bool = True) -> torch.Tensor:
    """``X`` of ``A X = B`` (``X A = B``): empty whenever an operand is, of ``B``'s matrix shape."""
    return b.new_zeros((*_batch(a.shape, b.shape), *b.shape[-2:]))


def solve_triangular(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> torch.Tensor:
    return _solution(a, b)


def triangular_solve(b: torch.Tensor, a: torch.Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X, A)``: ``A`` broadcast to the batch is eager's copy, not empty when only ``B`` is."""
    batch = _batch(a.shape, b.shape)
    return _solution(a, b), a.expand(*batch, *a.shape[-2:]).clone()


def cholesky_solve(b: torch.Tensor, factor: torch.Tensor, upper: bool = False) -> torch.Tensor:
    return _solution(factor, b)


def lu_solve(lu: torch.Tensor, pivots: torch.Tensor, b: torch.Tensor, *, left: bool = True,
             adjoint: bool = False) -> torch.Tensor:
    return _solution(lu, b)


def solve_ex(a: torch.Tensor, b: torch.Tensor, *, left: bool = True, check_errors: bool = False
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """An empty ``A``: ``X`` empty, ``LU`` empty, pivots empty, ``info`` 0 per matrix."""
    vector = len(b.shape) == 1 or (a.dim() - 1 == b.dim() and tuple(b.shape) == tuple(a.shape[:-1]))
    rhs = b.unsqueeze(-1) if vector else b
    x = _solution(a, rhs)
    batch = a.shape[:-2]
    return ((x.squeeze(-1) if vector else x), a.clone(),
            a.new_zeros((*batch, a.shape[-1]), dtype=torch.int32), _info(a))


#: op -> the form for empty operands.
OPS: dict[Any, Any] = {
    aten.linalg_cholesky_ex.default: cholesky_ex,
    aten.linalg_inv_ex.default: inv_ex,
    aten._linalg_slogdet.default: slogdet,
    aten.cholesky_inverse.default: cholesky_inverse,
    aten.linalg_solve_triangular.default: solve_triangular,
    aten.triangular_solve.default: triangular_solve,
    aten.cholesky_solve.default: cholesky_solve,
    aten.linalg_lu_solve.default: lu_solve,
    aten._linalg_solve_ex.default: solve_ex,
}
