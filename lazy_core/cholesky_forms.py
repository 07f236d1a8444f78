"""``torch.cholesky`` and ``torch.cholesky_inverse`` as the ``_ex`` ops plus a status check.

Neither has an ``info`` result: the CPU kernel raises inside (a matrix that is not
positive-definite, a zero on the factor's diagonal), so the lowering cannot decompose them
(lowering/linalg.py) and each call ran eagerly (the OpInfo ``cholesky``). Both are what
ATen's kernels compute, written on the lazy tensors at the call:

* ``cholesky(A, upper)`` is LAPACK's ``potrf`` and then ``_linalg_check_errors(info,
  "cholesky")``: here ``linalg_cholesky_ex`` (decomposed for small matrices) and the same
  check, recorded as a device-side check (lazy_core/checks.py) that raises eager's
  ``LinAlgError`` at the read.
* ``cholesky_inverse(L, upper)`` is ``(L L^T)^-1`` (``potri``), raising for the first zero on
  ``L``'s diagonal through ``_linalg_check_errors(info, "cholesky_inverse")``: here the op itself
  (decomposed as ``potri``'s products: lowering/linalg.py) and that check, with ``info`` the
  first zero's 1-based index.

Only where every piece compiles (the backend supports the pieces for these shapes, e.g. order
at most lowering/linalg.py's ``MAX_ORDER``); otherwise the op runs eagerly as before.
"""

from __future__ import annotations

from typing import Any

import torch

from . import fallback
from . import tensor as _t

aten = torch.ops.aten

__all__ = ["HANDLERS"]

_FLOATS = (torch.float32, torch.float64)


def _square_float(x: Any) -> bool:
    return (isinstance(x, torch.Tensor) and x.dtype in _FLOATS and x.dim() >= 2 and x.shape[-1] == x.shape[-2])


def _supported(op: Any, args: tuple, kwargs: dict) -> bool:
    backend = _t.active_backend()
    return backend.supports_op(op) and backend.supports_call(op, args, kwargs)


def _check(info: torch.Tensor, api: str, x: torch.Tensor) -> None:
    aten._linalg_check_errors.default(info, api, is_matrix=x.dim() == 2)


def cholesky(func: Any, args: tuple, kwargs: dict) -> Any:
    bound = dict(zip(("self", "upper"), args))
    bound.update(kwargs)
    x, upper = bound["self"], bool(bound.get("upper", False))
    if not (_square_float(x) and _supported(aten.linalg_cholesky_ex.default, (x,), {"upper": upper})):
        return fallback.run_eagerly(func, args, kwargs, why="unsupported by backend for these arguments")
    factor, info = aten.linalg_cholesky_ex.default(x, upper=upper)
    _check(info, "cholesky", x)
    return factor


def cholesky_inverse(func: Any, args: tuple, kwargs: dict) -> Any:
    bound = dict(zip(("self", "upper"), args))
    bound.update(kwargs)
    x, upper = bound["self"], bool(bound.get("upper", False))
    if not _square_float(x) or x.numel() == 0:  # empty: nothing to check (lowering/empty_linalg.py)
        return _t.dispatch_unspecial(func, args, kwargs)
    if not _supported(func, (x,), {"upper": upper}):
        return fallback.run_eagerly(func, args, kwargs, why="unsupported by backend for these arguments")
    inverse = _t.dispatch_unspecial(func, (x, upper), {})
    zero = torch.diagonal(x, dim1=-2, dim2=-1) == 0
    first = torch.argmax(zero.to(torch.int32), dim=-1) + 1
    info = torch.where(zero.any(-1), first, 0).to(torch.int32)
    _check(info, "cholesky_inverse", x)
    return inverse


HANDLERS: dict[Any, Any] = {aten.cholesky.default: cholesky, aten.cholesky_inverse.default: cholesky_inverse}
