"""Dense linear algebra of small matrices compiles whole (lowering/linalg.py).

torch-mlir has no lowering for triangular solves, Cholesky or LU, so each of these ops ran
eagerly (LAPACK) and cut its graph: about 45 OpInfo entries of the float32 sweep. Each test
compares with eager PyTorch on the CPU, on well-conditioned random matrices, batches, and
singular or indefinite ones (``info``, pivots, infinities), and fails on any eager fallback:
without the decompositions every one of them falls back.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import requested_backends, use_backend

import lazy_core
from lazy_core import metrics
from lowering import linalg

#: iree-vulkan's unrolled graphs compile for minutes in all (lavapipe, 2 CPUs): ``make check-slow``.
BACKENDS = [pytest.param(b, marks=pytest.mark.slow) if b == "iree-vulkan" else b
            for b in requested_backends() if b != "eager"]
DTYPES = [torch.float32, torch.float64]


@pytest.fixture(params=BACKENDS)
def compiling(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("LAZY_REFERENCE_OPT_LEVEL", "0")
    use_backend(request.param)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # "could not compile graph ..." fails the test
        warnings.filterwarnings("ignore", "torch.triangular_solve is deprecated")
        yield request.param
    lazy_core.mark_step()


def _fallbacks() -> dict[str, int]:
    return {k: v for k, v in metrics.counters().items() if k.startswith("fallback::")}


def _skip_float64(backend: str, dtype: torch.dtype) -> None:
    if dtype == torch.float64 and backend == "iree-vulkan":
        pytest.skip("no float64 on lavapipe's IREE target")


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-4, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-10, "atol": 1e-12}


def _lazy(x: Any) -> Any:
    return x.to("lazy") if isinstance(x, torch.Tensor) else x


def _cpu(x: Any) -> Any:
    if isinstance(x, tuple | list):
        return tuple(_cpu(v) for v in x)
    return x.cpu() if isinstance(x, torch.Tensor) else x


def _check(fn: Callable[..., Any], *inputs: Any, dtype: torch.dtype = torch.float32, equal_nan: bool = False,
           exact: tuple[int, ...] = ()) -> Any:
    """``fn`` of the inputs on the CPU and on lazy: equal within ``dtype``'s tolerance (results
    at the indices ``exact`` (integer ones: pivots, info) equal exactly), no eager fallback."""
    want = fn(*inputs)
    got = _cpu(fn(*(_lazy(x) for x in inputs)))
    assert _fallbacks() == {}, _fallbacks()
    wants = tuple(want) if isinstance(want, tuple) else (want,)
    gots = got if isinstance(got, tuple) else (got,)
    for i, (g, w) in enumerate(zip(gots, wants, strict=True)):
        if i in exact or not w.is_floating_point():
            assert torch.equal(g, w), (i, g, w)
        else:
            torch.testing.assert_close(g, w, equal_nan=equal_nan, **_tol(dtype))
    return got


def _check_many(cases: list[tuple[Callable[..., Any], tuple, torch.dtype, tuple[int, ...]]]) -> None:
    """``_check`` of each ``(fn, inputs, dtype, exact)``, the lazy results all computed by one
    graph (one compile for the whole set, not one per case: CI's time)."""
    pending = [fn(*(_lazy(x) for x in inputs)) for fn, inputs, _, _ in cases]
    lazy_core.mark_step()
    assert _fallbacks() == {}, _fallbacks()
    for (fn, inputs, dtype, exact), lazy_out in zip(cases, pending, strict=True):
        want = fn(*inputs)
        wants = tuple(want) if isinstance(want, tuple) else (want,)
        got = _cpu(lazy_out)
        gots = got if isinstance(got, tuple) else (got,)
        for i, (g, w) in enumerate(zip(gots, wants, strict=True)):
            if i in exact or not w.is_floating_point():
                assert torch.equal(g, w), (fn, i, g, w)
            else:
                torch.testing.assert_close(g, w, equal_nan=True, **_tol(dtype))


def _general(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """A random matrix whose diagonal dominates: well conditioned, pivots all nonzero."""
    g = torch.Generator().manual_seed(seed)
    n = shape[-1]
    return (torch.randn(*shape, generator=g, dtype=dtype) + n * torch.eye(n, dtype=dtype)).contiguous()


def _spd(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    return x @ x.mT + shape[-1] * torch.eye(shape[-1], dtype=dtype)


def _triangular(*shape: int, upper: bool, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Garbage in the other triangle (never read), a diagonal of magnitude 1..2 of either sign."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g, dtype=dtype)
    diag = (1 + torch.rand(shape[:-1], generator=g, dtype=dtype)) * torch.sign(torch.randn(shape[:-1], generator=g))
    tri = x.triu(1) if upper else x.tril(-1)
    return tri / shape[-1] + torch.diag_embed(diag) + 100 * (x.tril(-1) if upper else x.triu(1))


def _rhs(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 1) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# -- triangular solves -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_triangular(compiling: str, dtype: torch.dtype) -> None:
    """Forward and back substitution, from either side, batch dims broadcast (A [2, 1, 5, 5],
    B [3, 5, 4]); only the named triangle is read (the other holds large garbage)."""
    _skip_float64(compiling, dtype)
    cases = []
    for upper in (False, True):
        a = _triangular(2, 1, 5, 5, upper=upper, dtype=dtype)
        for left in (True, False):
            b = _rhs(3, 5, 4, dtype=dtype) if left else _rhs(3, 4, 5, dtype=dtype)
            for unit in (False, True):
                cases.append((lambda a, b, upper=upper, left=left, unit=unit: torch.linalg.solve_triangular(
                    a, b, upper=upper, left=left, unitriangular=unit), (a, b), dtype, ()))
    _check_many(cases)


def test_triangular_solve(compiling: str) -> None:
    """The deprecated form: ``(X, A)``, with ``A^T`` solved for when ``transpose``."""
    cases = []
    for upper in (False, True):
        a = _triangular(3, 6, 6, upper=upper)
        for transpose in (False, True):
            cases.append((lambda b, a, upper=upper, transpose=transpose: torch.triangular_solve(
                b, a, upper=upper, transpose=transpose), (_rhs(3, 6, 2), a), torch.float32, ()))
        cases.append((lambda b, a, upper=upper: torch.triangular_solve(b, a, upper=upper, unitriangular=True),
                      (_rhs(6, 1), a[0]), torch.float32, ()))
    _check_many(cases)


def test_solve_triangular_zero_diagonal_gives_eagers_infinities(compiling: str) -> None:
    """A zero last pivot: that row of X is +-inf as eager's (the rows before it stay finite)."""
    a = _triangular(4, 4, upper=False)
    a[3, 3] = 0
    _check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), a, _rhs(4, 3))


# -- Cholesky ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_ex(compiling: str, dtype: torch.dtype) -> None:
    """Orders 1 to ``MAX_ORDER``, a batch; only the named triangle is read."""
    _skip_float64(compiling, dtype)
    cases = []
    for upper in (False, True):
        for n in (1, 5, linalg.MAX_ORDER):
            a = _spd(2, n, n, dtype=dtype)
            a = a + 100 * (a.tril(-1) if upper else a.triu(1))
            cases.append((lambda a, upper=upper: torch.linalg.cholesky_ex(a, upper=upper), (a,), dtype, (1,)))
    _check_many(cases)


def test_cholesky_ex_info_is_lapacks(compiling: str) -> None:
    """``info``: the order of the first leading minor that is not positive-definite (LAPACK's),
    per batch element; a NaN pivot fails too. ``L`` of a failed element is unspecified."""
    good = _spd(4, 4)
    second = good.clone()
    second[1, 1] = second[1, 0] ** 2 / second[0, 0] - 1  # the 2 x 2 minor's pivot: -1
    third = good.clone()
    third[2, 2] = -1.0
    nan = good.clone()
    nan[0, 0] = float("nan")
    batch = torch.stack([good, second, third, nan])
    want = torch.linalg.cholesky_ex(batch).info
    assert want.tolist() == [0, 2, 3, 1]
    got = torch.linalg.cholesky_ex(batch.to("lazy"))
    assert torch.equal(got.info.cpu(), want)
    torch.testing.assert_close(got.L[0].cpu(), torch.linalg.cholesky(good))
    assert _fallbacks() == {}


def test_cholesky_raises_at_the_read(compiling: str) -> None:
    """``linalg.cholesky``'s status check (``_linalg_check_errors``) is a device-side check, not
    an eager op reading ``info`` mid-step: LinAlgError at the read, no fallback."""
    _check(torch.linalg.cholesky, _spd(2, 5, 5))
    bad = torch.linalg.cholesky(-torch.eye(3).to("lazy"))
    assert _fallbacks() == {}
    with pytest.raises(torch.linalg.LinAlgError, match="not positive-definite"):
        bad.cpu()


@pytest.mark.parametrize("dtype", DTYPES)
def test_cholesky_solve(compiling: str, dtype: torch.dtype) -> None:
    _skip_float64(compiling, dtype)
    cases = []
    for upper in (False, True):
        factor = torch.linalg.cholesky(_spd(2, 1, 6, 6, dtype=dtype), upper=upper)
        cases.append((lambda b, f, upper=upper: torch.cholesky_solve(b, f, upper=upper),
                      (_rhs(3, 6, 2, dtype=dtype), factor), dtype, ()))
    _check_many(cases)


# -- LU ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_factor_ex(compiling: str, dtype: torch.dtype) -> None:
    """Eager's pivots (1-based int32) and ``info``, square and rectangular, batched. Random
    matrices, not diagonally dominant, so that rows do get swapped."""
    _skip_float64(compiling, dtype)
    shapes = [(1, 1), (5, 5), (3, 6, 6), (7, 4), (4, 7), (linalg.MAX_ORDER, linalg.MAX_ORDER)]
    _check_many([(torch.linalg.lu_factor_ex, (_rhs(*shape, dtype=dtype, seed=3),), dtype, (1, 2))
                 for shape in shapes])


def test_lu_pivot_ties_and_singular_info(compiling: str) -> None:
    """Equal ``|a|`` in a column: the first such row is the pivot (LAPACK's ``idamax``). An
    exactly singular matrix: ``info`` is the first zero pivot's order, its column unscaled."""
    ties = torch.tensor([[1.0, 2.0, 0.5], [-1.0, 3.0, 1.0], [1.0, -2.0, 4.0]])
    singular = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]])
    zero_column = torch.tensor([[0.0, 2.0, 3.0], [0.0, 4.0, 6.0], [0.0, 1.0, 1.0]])
    batch = torch.stack([ties, singular, zero_column])
    got = _check(torch.linalg.lu_factor_ex, batch, exact=(1, 2))
    assert got[2].ne(0).tolist() == [False, True, True]


def test_linalg_lu_and_lu_unpack(compiling: str) -> None:
    """``(P, L, U)`` with ``A = P L U``, for square and rectangular inputs, and unpacked from
    eager's own factorization."""
    for shape in ((2, 5, 5), (6, 3), (3, 6)):
        _check(torch.linalg.lu, _rhs(*shape, seed=4))
    lu, pivots = torch.linalg.lu_factor(_rhs(2, 5, 5, seed=5))
    _check(torch.lu_unpack, lu, pivots)
    lu, pivots = torch.linalg.lu_factor(_rhs(6, 4, seed=5))
    _check(torch.lu_unpack, lu, pivots)


@pytest.mark.parametrize("dtype", DTYPES)
def test_lu_solve(compiling: str, dtype: torch.dtype) -> None:
    _skip_float64(compiling, dtype)
    lu, pivots = torch.linalg.lu_factor(_rhs(2, 5, 5, dtype=dtype, seed=6))
    cases = []
    for left in (True, False):
        b = _rhs(2, 5, 3, dtype=dtype) if left else _rhs(2, 3, 5, dtype=dtype)
        for adjoint in (False, True):
            cases.append((lambda lu, p, b, left=left, adjoint=adjoint: torch.linalg.lu_solve(
                lu, p, b, left=left, adjoint=adjoint), (lu, pivots, b), dtype, ()))
    _check_many(cases)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve(compiling: str, dtype: torch.dtype) -> None:
    """``linalg.solve``: matrix and vector right-hand sides, from the right, broadcast batches;
    its status check stays on the device."""
    _skip_float64(compiling, dtype)
    a = _general(2, 6, 6, dtype=dtype, seed=7)
    _check_many([(torch.linalg.solve, (a, _rhs(2, 6, 3, dtype=dtype)), dtype, ()),
                 (torch.linalg.solve, (a, _rhs(6, dtype=dtype)), dtype, ()),
                 (torch.linalg.solve, (a, _rhs(2, 6, dtype=dtype)), dtype, ()),
                 (lambda a, b: torch.linalg.solve(a, b, left=False), (a, _rhs(4, 6, dtype=dtype)), dtype, ()),
                 (torch.linalg.solve, (a[:1], _rhs(3, 6, 2, dtype=dtype)), dtype, ())])


def test_solve_ex_returns_eagers_factor_and_gradient(compiling: str) -> None:
    """``_linalg_solve_ex``'s ``LU``, pivots and ``info`` are eager's (``A``'s, from either
    side), which the gradients of ``solve`` and ``inv`` solve with; also for a transposed lazy
    ``A``."""
    a = _rhs(2, 5, 5, seed=12)
    b = _rhs(2, 5, 3, seed=13)
    _check(torch.ops.aten._linalg_solve_ex, a, b, exact=(2, 3))
    _check(lambda a, b: torch.ops.aten._linalg_solve_ex(a, b, left=False), a, b.mT, exact=(2, 3))
    grads = []
    for device in ("cpu", "lazy"):
        x = a.clone().to(device).requires_grad_()
        (torch.linalg.solve(x, b.to(device)).sum() + torch.linalg.inv(x).sum()).backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)
    assert _fallbacks() == {}
    _check(lambda a, b: torch.ops.aten._linalg_solve_ex(a.mT, b), a, b, exact=(2, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_inv(compiling: str, dtype: torch.dtype) -> None:
    _skip_float64(compiling, dtype)
    _check(torch.linalg.inv, _general(3, 7, 7, dtype=dtype, seed=8), dtype=dtype)
    _check(torch.linalg.inv_ex, _rhs(4, 4, dtype=dtype, seed=8), dtype=dtype, exact=(1,))


def test_singular_solve_and_inv(compiling: str) -> None:
    """``info`` of the ``_ex`` forms is eager's; the checked forms raise at the read."""
    singular = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]])
    want = torch.linalg.inv_ex(singular).info
    assert want.item() != 0
    assert torch.equal(torch.linalg.inv_ex(singular.to("lazy")).info.cpu(), want)
    assert torch.equal(torch.linalg.solve_ex(singular.to("lazy"), _rhs(3).to("lazy")).info.cpu(), want)
    bad_inv = torch.linalg.inv(singular.to("lazy"))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        bad_inv.cpu()
    bad_solve = torch.linalg.solve(singular.to("lazy"), _rhs(3, 1).to("lazy"))
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        bad_solve.cpu()
    assert _fallbacks() == {}


@pytest.mark.parametrize("dtype", DTYPES)
def test_det_slogdet_logdet(compiling: str, dtype: torch.dtype) -> None:
    """Values, signs, and the LU and pivots eager returns with them (of ``A^T``, ``A`` being
    contiguous); a singular matrix has det 0 and slogdet ``(0, -inf)``, a negative determinant
    a NaN logdet."""
    _skip_float64(compiling, dtype)
    a = _rhs(3, 5, 5, dtype=dtype, seed=9)
    singular = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [1.0, 0.0, 1.0]], dtype=dtype)
    cases = []
    for x in (a, singular):
        cases += [(torch.linalg.det, (x,), dtype, ()), (torch.linalg.slogdet, (x,), dtype, ()),
                  (torch.ops.aten._linalg_det, (x,), dtype, (2,)), (torch.ops.aten._linalg_slogdet, (x,), dtype, (3,))]
    _check_many([*cases, (torch.logdet, (a,), dtype, ())])


def test_det_gradient(compiling: str) -> None:
    """The backward solves with the returned LU (transposed, since ``A`` is contiguous)."""
    a = _general(2, 4, 4, seed=10)
    grads = []
    for device in ("cpu", "lazy"):
        x = a.clone().to(device).requires_grad_()
        (torch.linalg.det(x).sum() + torch.linalg.slogdet(x).logabsdet.sum()).backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)
    assert _fallbacks() == {}


def test_larger_and_unsupported_inputs_stay_eager(compiling: str) -> None:
    """Up to ``MAX_ORDER`` compiles; beyond it, and for a transposed (non-contiguous) lazy input
    to det, the call runs eagerly (a correct fallback); a non-square input raises eager's error
    at the call."""
    n = linalg.MAX_ORDER
    _check(torch.linalg.cholesky_ex, _spd(n, n), exact=(1,))
    n += 1
    big = _spd(n, n)
    torch.testing.assert_close(torch.linalg.cholesky_ex(big.to("lazy")).L.cpu(), torch.linalg.cholesky_ex(big).L)
    assert "fallback::aten.linalg_cholesky_ex.default" in _fallbacks()
    a = _rhs(4, 4, seed=11)
    torch.testing.assert_close(torch.linalg.det(a.to("lazy").mT).cpu(), torch.linalg.det(a.mT))
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.cholesky_ex(_rhs(3, 4).to("lazy"))
