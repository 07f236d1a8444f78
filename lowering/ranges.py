"""``linspace`` and ``logspace`` with tensor endpoints, from elementwise ops.

With Python numbers for endpoints both are computed on the host
(``lazy_core/factories.py``). With 0-d tensors (``torch.linspace(t0, t1, n)``)
they are traced, and torch-mlir has no lowering for the ``Tensor_Tensor``,
``Tensor_Scalar`` and ``Scalar_Tensor`` overloads (linspace failed to compile,
logspace ran eagerly). Eager reads both endpoints into the output's scalar type
(``double`` for an integer output) and computes, as its CPU kernel
(``RangeFactoriesKernel.cpp``) does, the first half up from the start and the
second half down from the end, so that both endpoints are exact:
``start + i * step`` for ``i < steps / 2``, else ``end - (steps - 1 - i) * step``,
with ``step = (end - start) / (steps - 1)``; ``logspace`` raises ``base`` to
those (eager in double precision, here in the output's type: within an ulp). Eager's vectorized loop may round a middle element differently by an
ulp (it adds ``step`` to a lane base); the endpoints are exact.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["linspace", "logspace"]


def _endpoint(v: Any, compute: torch.dtype, device: Any) -> torch.Tensor:
    if isinstance(v, torch.Tensor):
        return v.reshape(()).to(compute)
    return torch.full((), v, dtype=compute, device=device)


def _spaced(start: Any, end: Any, steps: int, dtype: torch.dtype | None, base: float | None) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    device = next(v.device for v in (start, end) if isinstance(v, torch.Tensor))
    compute = dtype if dtype.is_floating_point or dtype.is_complex else torch.float64
    s, e = _endpoint(start, compute, device), _endpoint(end, compute, device)
    if steps <= 1:
        out = s.reshape(1)[:steps]
    else:
        step = (e - s) / (steps - 1)
        i = torch.arange(steps, device=device, dtype=compute)
        out = torch.where(i < steps // 2, s + i * step, e - (steps - 1 - i) * step)
    if base is not None:
        # Eager raises a double base to the exponent; here it is raised in the output's
        # type (double for integers), within an ulp of eager's: Vulkan has no 64-bit log.
        out = torch.pow(torch.full((), base, dtype=compute, device=device), out)
    return out.to(dtype)


def linspace(start: Any, end: Any, steps: int, *, dtype: torch.dtype | None = None, layout: Any = None,
             device: Any = None, pin_memory: Any = None) -> torch.Tensor:
    """The ``device`` argument is the lazy device: the values are made where the endpoints are."""
    return _spaced(start, end, steps, dtype, None)


def logspace(start: Any, end: Any, steps: int, base: float = 10.0, *, dtype: torch.dtype | None = None,
             layout: Any = None, device: Any = None, pin_memory: Any = None) -> torch.Tensor:
    return _spaced(start, end, steps, dtype, base)
