"""``torch.cholesky`` and ``torch.cholesky_inverse`` compile (lazy_core/cholesky_forms.py).

Both raise inside their CPU kernel, so they ran eagerly. Values against eager on the CPU (upper
and lower, batches, garbage in the unread triangle, a NaN on the diagonal and a NaN and an
infinity off it), no fallback; a matrix that is not
positive-definite and a factor with a zero on its diagonal raise eager's ``LinAlgError`` at the
read; a matrix past the unrolled order still runs eagerly, with eager's values.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from conftest import requested_backends, use_backend

from lazy_core import metrics
from lowering import linalg

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


@pytest.fixture(params=BACKENDS)
def compiling(request: pytest.FixtureRequest) -> str:
    use_backend(request.param)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch.cholesky is deprecated
        warnings.simplefilter("error", RuntimeWarning)
        yield request.param


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _spd(*shape: int, seed: int = 0) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return x @ x.mT + shape[-1] * torch.eye(shape[-1])


def _factor(*shape: int, upper: bool, seed: int = 0) -> torch.Tensor:
    """A Cholesky factor with garbage in the triangle that must not be read."""
    f = torch.linalg.cholesky(_spd(*shape, seed=seed), upper=upper)
    junk = 100 * torch.randn(*shape, generator=torch.Generator().manual_seed(seed + 1))
    return f + (junk.tril(-1) if upper else junk.triu(1))


@pytest.mark.parametrize("upper", [False, True])
def test_values_match_eager(compiling: str, upper: bool) -> None:
    a = _spd(3, 5, 5)
    a_junk = a + 50 * (torch.ones(5, 5).tril(-1) if upper else torch.ones(5, 5).triu(1))  # unread triangle
    cases = [
        (lambda x: torch.cholesky(x, upper=upper), a),
        (lambda x: torch.cholesky(x, upper=upper), a_junk),
        (lambda x: torch.cholesky(x, upper=upper), _spd(1, 1)),
        (lambda x: torch.cholesky_inverse(x, upper=upper), _factor(4, 4, upper=upper)),
        (lambda x: torch.cholesky_inverse(x, upper=upper), _factor(2, 6, 6, upper=upper, seed=3)),
    ]
    nan = _factor(3, 3, upper=upper)
    nan[1, 1] = float("nan")
    cases.append((lambda x: torch.cholesky_inverse(x, upper=upper), nan))
    # A NaN and an infinity off the diagonal reach only the entries potri's products do.
    off = _factor(5, 5, upper=upper, seed=5)
    off[(3, 1) if not upper else (1, 3)] = float("nan")
    off[(4, 2) if not upper else (2, 4)] = float("inf")
    cases.append((lambda x: torch.cholesky_inverse(x, upper=upper), off))
    for fn, x in cases:
        metrics.reset()
        got = fn(x.to("lazy")).cpu()
        assert _fallbacks() == [], _fallbacks()
        torch.testing.assert_close(got, fn(x), rtol=1e-4, atol=1e-5, equal_nan=True)


def test_errors_raise_at_the_read(compiling: str) -> None:
    with pytest.raises(torch.linalg.LinAlgError, match="cholesky: .*not positive-definite"):
        torch.cholesky(-torch.eye(3).to("lazy")).cpu()
    singular = _factor(3, 3, upper=False)
    singular[2, 2] = 0.0
    with pytest.raises(torch.linalg.LinAlgError, match="cholesky_inverse: .*zero"):
        torch.cholesky_inverse(singular.to("lazy")).cpu()
    batch = _factor(2, 3, 3, upper=True)
    batch[1, 0, 0] = 0.0
    with pytest.raises(torch.linalg.LinAlgError, match="cholesky_inverse"):
        torch.cholesky_inverse(batch.to("lazy"), upper=True).cpu()
    with pytest.raises(RuntimeError):
        torch.cholesky(torch.ones(2, 3).to("lazy"))


def test_larger_than_unrolled_runs_eagerly(compiling: str) -> None:
    n = linalg.MAX_ORDER + 1
    a = _spd(n, n)
    metrics.reset()
    torch.testing.assert_close(torch.cholesky(a.to("lazy")).cpu(), torch.cholesky(a))
    assert "fallback::aten.cholesky.default" in _fallbacks()
    f = _factor(n, n, upper=False)
    torch.testing.assert_close(torch.cholesky_inverse(f.to("lazy")).cpu(), torch.cholesky_inverse(f), rtol=1e-4,
                               atol=1e-5)
    assert "fallback::aten.cholesky_inverse.default" in _fallbacks()
