"""Matrix products whose contracted dimension is empty, written without the product.

``mm`` of a [2, 0] and a [0, 3] matrix is a [2, 3] matrix of zeros (a sum of no terms), and
``addmm`` with such matrices is ``beta * self`` (eager's kernel then skips the product and
``alpha`` entirely, as it does for ``beta = 0``). IREE 3.13 crashed compiling any such
contraction (SIGFPE in ``AnnotateDispatchesPass``: the OpInfo samples of ``mm``, ``vdot``,
``linalg.multi_dot``, and ``F.linear`` of an input with no features), so the whole graph ran
op by op. The forms here hold no contraction at all, on every backend. Only shapes known at
trace time decide (``applies``); other products lower as they are.

The determinant of a 0 x 0 matrix is the same kind of empty product: 1. IREE failed to compile
torch-mlir's ``_linalg_det`` of one ("offset 1 is out-of-bounds: 0 >= 0", the iree-cpu OpInfo
sweep), so it is written as ones of the batch shape (its LU and pivots empty).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from lazy_core.ir import Node, Output

aten = torch.ops.aten


def _empty_dim(node: Node, arg: int, dim: int) -> bool:
    x = node.args[arg] if len(node.args) > arg else None
    return isinstance(x, Output) and x.meta is not None and len(x.meta.shape) > dim and x.meta.shape[dim] == 0


#: op -> (argument holding the contracted dim, that dim).
_CONTRACTED = {
    aten.mm.default: (0, 1),
    aten.bmm.default: (0, 2),
    aten.mv.default: (0, 1),
    aten.dot.default: (0, 0),
    aten.vdot.default: (0, 0),
    aten.addmm.default: (1, 1),
    aten.addmv.default: (1, 1),
    aten.baddbmm.default: (1, 2),
    aten.addbmm.default: (1, 2),
    aten._linalg_det.default: (0, -1),
}

OPS = tuple(_CONTRACTED)


def applies(node: Node) -> bool:
    """Whether ``node`` is one of ``OPS`` with an empty contracted dimension."""
    arg, dim = _CONTRACTED[node.op]
    return _empty_dim(node, arg, dim)


def _zeros(shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    return like.new_zeros(shape)


def _product(out_shape: Callable[[torch.Tensor, torch.Tensor], tuple[int, ...]]) -> Callable:
    def decomposed(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return _zeros(out_shape(a, b), a)
    return decomposed


def _scaled(out_shape: Callable[[torch.Tensor, torch.Tensor], tuple[int, ...]]) -> Callable:
    """``beta * self`` broadcast to the product's shape; zeros for a constant ``beta`` of 0 (a
    NaN in ``self`` does not reach the result, as in eager). ``alpha`` is never read."""

    def decomposed(self: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1,
                   alpha: Any = 1) -> torch.Tensor:
        shape = out_shape(a, b)
        if type(beta) in (int, float, bool) and beta == 0:
            return _zeros(shape, a)
        scaled = self if type(beta) in (int, float, bool) and beta == 1 else self * beta
        return scaled.expand(shape).clone()

    return decomposed


def _mm(a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    return (a.shape[0], b.shape[1])


def _bmm(a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    return (a.shape[0], a.shape[1], b.shape[2])


def _mv(a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    return (a.shape[0],)


def _addbmm(a: torch.Tensor, b: torch.Tensor) -> tuple[int, ...]:
    return (a.shape[1], b.shape[2])


_EMPTY_FORMS = {
    aten.mm.default: _product(_mm),
    aten.bmm.default: _product(_bmm),
    aten.mv.default: _product(_mv),
    aten.dot.default: _product(lambda a, b: ()),
    aten.vdot.default: _product(lambda a, b: ()),
    aten.addmm.default: _scaled(_mm),
    aten.addmv.default: _scaled(_mv),
    aten.baddbmm.default: _scaled(_bmm),
    aten.addbmm.default: _scaled(_addbmm),
    aten._linalg_det.default: lambda a: (a.new_ones(a.shape[:-2]), a.clone(),
                                         a.new_zeros(a.shape[:-1], dtype=torch.int32)),
}


def decomposition(op: Any, otherwise: Callable | None) -> Callable:
    """``op``'s decomposition: the empty form when its contracted dimension is empty, else
    ``otherwise`` (the op's other decomposition, where it has one)."""
    arg, dim = _CONTRACTED[op]
    empty = _EMPTY_FORMS[op]
    if otherwise is None:
        return empty

    def decomposed(*args: Any, **kwargs: Any) -> torch.Tensor:
        return (empty if args[arg].shape[dim] == 0 else otherwise)(*args, **kwargs)

    return decomposed
