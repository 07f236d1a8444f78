"""Linear algebra of empty operands compiles (lowering/empty_linalg.py).

0 x 0 matrices, empty batches and right-hand sides without columns ran eagerly (the unrolled
loops of lowering/linalg.py refused order 0): the first samples of eight OpInfos. Each case
is compared with eager on the CPU, results that are not empty included (``info``, the sign and
log of a 0 x 0 determinant, ``triangular_solve``'s copy of ``A``), and any fallback fails.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from conftest import requested_backends, use_backend

import lazy_core
from lazy_core import metrics

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]
aten = torch.ops.aten


@pytest.fixture(params=BACKENDS)
def compiling(request: pytest.FixtureRequest) -> str:
    use_backend(request.param)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "could not compile graph ..." fails the test
        warnings.filterwarnings("ignore", "torch.triangular_solve is deprecated")
        yield request.param
    lazy_core.mark_step()


def _fallbacks() -> dict[str, int]:
    return {k: v for k, v in metrics.counters().items() if k.startswith("fallback::")}


def _lazy(x: Any) -> Any:
    return x.to("lazy") if isinstance(x, torch.Tensor) else x


def _flat(x: Any) -> tuple:
    return tuple(x) if isinstance(x, tuple | list) else (x,)


def _empty(*shape: int) -> torch.Tensor:
    return torch.empty(shape)


def _pivots(*shape: int) -> torch.Tensor:
    return torch.ones(shape, dtype=torch.int32)


def _square(n: int, *batch: int) -> torch.Tensor:
    return torch.randn(*batch, n, n, generator=torch.Generator().manual_seed(n)) + n * torch.eye(n)


CASES = [
    (torch.linalg.cholesky_ex, (_empty(0, 0),)),
    (torch.linalg.cholesky_ex, (_empty(3, 0, 0),)),
    (torch.linalg.cholesky, (_empty(0, 4, 4),)),
    (lambda a: torch.linalg.cholesky(a, upper=True), (_empty(0, 0),)),
    (torch.linalg.inv_ex, (_empty(0, 0),)),
    (torch.linalg.inv_ex, (_empty(2, 0, 0),)),
    (torch.linalg.inv, (_empty(0, 5, 5),)),
    (torch.linalg.slogdet, (_empty(0, 0),)),
    (torch.linalg.slogdet, (_empty(3, 0, 0),)),
    (aten._linalg_slogdet, (_empty(0, 4, 4),)),
    (torch.logdet, (_empty(0, 0),)),
    (torch.cholesky_inverse, (_empty(0, 0),)),
    (lambda a: torch.cholesky_inverse(a, upper=True), (_empty(2, 0, 0),)),
    (torch.cholesky_solve, (_empty(0, 0), _empty(0, 0))),
    (torch.cholesky_solve, (_empty(4, 0), _square(4))),
    (lambda b, a: torch.triangular_solve(b, a), (_empty(0, 5, 1), _empty(0, 5, 5))),
    # Only B is empty: eager's copy of A, broadcast to the batch, has values.
    (lambda b, a: torch.triangular_solve(b, a, upper=False), (_empty(5, 0), _square(5, 2))),
    (lambda a, b: torch.linalg.solve_triangular(a, b, upper=True), (_square(3), _empty(3, 0))),
    (lambda a, b: torch.linalg.solve_triangular(a, b, upper=True, left=False), (_empty(0, 0), _empty(2, 0))),
    (torch.linalg.lu_solve, (_square(3), _pivots(3), _empty(3, 0))),
    (torch.linalg.lu_solve, (_empty(2, 0, 0), _pivots(2, 0), _empty(2, 0, 4))),
    (torch.linalg.solve_ex, (_empty(0, 0), _empty(0, 3))),
    (torch.linalg.solve_ex, (_empty(2, 0, 0), _empty(2, 0))),
    (torch.linalg.solve, (_empty(0, 3, 3), _empty(0, 3))),
]


def test_empty_operands_compile_with_eagers_results(compiling: str) -> None:
    pending = [fn(*(_lazy(x) for x in inputs)) for fn, inputs in CASES]
    lazy_core.mark_step()
    assert _fallbacks() == {}, _fallbacks()
    for (fn, inputs), got in zip(CASES, pending, strict=True):
        want = fn(*inputs)
        for g, w in zip(_flat(got), _flat(want), strict=True):
            g = g.cpu()
            assert g.shape == w.shape and g.dtype == w.dtype, (fn, g.shape, w.shape)
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_non_empty_cholesky_inverse_and_bad_shapes_stay_eager(compiling: str) -> None:
    """A non-empty ``cholesky_inverse`` compiles with its kernel's check on the device
    (lazy_core/cholesky_forms.py; it ran eagerly before); empty operands of shapes eager
    rejects raise eager's error at the call."""
    factor = torch.linalg.cholesky(_square(3) @ _square(3).mT)
    torch.testing.assert_close(torch.cholesky_inverse(factor.to("lazy")).cpu(), torch.cholesky_inverse(factor))
    assert "fallback::aten.cholesky_inverse.default" not in _fallbacks()
    with pytest.raises(RuntimeError):
        torch.linalg.inv_ex(_empty(0, 3).to("lazy"))
    with pytest.raises(RuntimeError):
        torch.linalg.solve_triangular(_empty(0, 0).to("lazy"), _empty(3, 2).to("lazy"), upper=True)
