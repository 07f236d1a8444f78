"""Eigenvalues, singular values and ``pinv`` compile (lowering/jacobi.py, lazy_core/factories.py).

``_linalg_eigh``/``_linalg_svd``/``linalg_pinv`` ran eagerly (LAPACK), and ``eigvalsh``/``svdvals``
asked them for vectors on a lazy tensor (ATen's test for a tensor subclass). Values against eager
on the CPU: random, repeated (the identity, ties), indefinite and rank-deficient matrices, a zero
matrix, garbage in the triangle ``UPLO`` does not name, tall, wide, batched, 1 x 1 and empty
matrices, tolerances; strict (any fallback fails). With a gradient the vectors are needed and
the call runs eagerly (a correct fallback); so do ``eigh``/``svd`` themselves (their vectors'
signs are LAPACK's) and matrices past ``MAX_ORDER``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import requested_backends, use_backend

import lazy_core
from lazy_core import metrics
from lowering.jacobi import MAX_ORDER

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _check_many(cases: list[tuple[Callable[..., Any], torch.Tensor]]) -> None:
    """Each ``fn(x)`` lazily (one graph for all) and eagerly: equal within float32's tolerance."""
    metrics.reset()
    pending = [fn(x.to("lazy")) for fn, x in cases]
    lazy_core.mark_step()
    assert _fallbacks() == [], _fallbacks()
    for (fn, x), got in zip(cases, pending, strict=True):
        want = fn(x)
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4, msg=lambda m, fn=fn, x=x: f"{x}: {m}")


def _symmetric(n: int, seed: int) -> torch.Tensor:
    a = _randn(n, n, seed=seed)
    return a + a.mT


def _low_rank(m: int, n: int, rank: int, seed: int) -> torch.Tensor:
    return _randn(m, rank, seed=seed) @ _randn(rank, n, seed=seed + 1)


def _garbage_upper(a: torch.Tensor) -> torch.Tensor:
    return a.tril() + 100 * torch.ones_like(a).triu(1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_eigenvalues(backend: str) -> None:
    use_backend(backend)
    ties = torch.diag(torch.tensor([2.0, -1.0, 2.0, 2.0, 0.0]))
    q, _ = torch.linalg.qr(_randn(5, 5, seed=3))
    _check_many([
        (torch.linalg.eigvalsh, _symmetric(5, 1)),
        (torch.linalg.eigvalsh, _garbage_upper(_symmetric(4, 2))),  # the upper triangle is not read
        (lambda x: torch.linalg.eigvalsh(x, UPLO="U"), _symmetric(4, 2).triu() - 50 * torch.ones(4, 4).tril(-1)),
        (torch.linalg.eigvalsh, torch.eye(5)),
        (torch.linalg.eigvalsh, q @ ties @ q.mT),  # a repeated eigenvalue, not diagonal
        (torch.linalg.eigvalsh, torch.stack([_symmetric(3, 4), _symmetric(3, 5)])),
        (torch.linalg.eigvalsh, torch.tensor([[-3.0]])),
        (torch.linalg.eigvalsh, torch.empty(0, 0)),
        (torch.linalg.eigvalsh, torch.empty(0, 4, 4)),
        (lambda x: torch.linalg.matrix_rank(x, hermitian=True), _low_rank(5, 5, 2, 6) @ _low_rank(5, 5, 2, 6).mT),
        (lambda x: torch.linalg.pinv(x, hermitian=True), _symmetric(5, 7)),
        (lambda x: torch.linalg.pinv(x, hermitian=True), torch.zeros(3, 3)),
    ])


@pytest.mark.parametrize("backend", BACKENDS)
def test_singular_values_and_pinv(backend: str) -> None:
    use_backend(backend)
    _check_many([
        (torch.linalg.svdvals, _randn(5, 5, seed=1)),
        (torch.linalg.svdvals, _randn(6, 2, seed=2)),
        (torch.linalg.svdvals, _randn(2, 6, seed=2)),
        (torch.linalg.svdvals, _low_rank(4, 4, 1, seed=3)),
        (torch.linalg.svdvals, torch.zeros(3, 3)),
        (torch.linalg.svdvals, torch.eye(4)),  # all singular values equal
        (torch.linalg.svdvals, _randn(2, 3, 3, seed=4)),
        (torch.linalg.svdvals, torch.empty(5, 0)),
        (torch.linalg.matrix_rank, _randn(5, 5, seed=5)),
        (torch.linalg.matrix_rank, _low_rank(5, 4, 2, seed=6)),
        (torch.linalg.matrix_rank, torch.zeros(3, 4)),
        (torch.linalg.cond, _randn(4, 4, seed=7)),
        (lambda x: torch.linalg.norm(x, "nuc"), _randn(5, 3, seed=8)),
        (torch.linalg.pinv, _randn(5, 5, seed=9)),
        (torch.linalg.pinv, _randn(6, 3, seed=10)),
        (torch.linalg.pinv, _randn(3, 6, seed=10)),
        (torch.linalg.pinv, _low_rank(5, 5, 2, seed=11)),
        (torch.linalg.pinv, torch.eye(4) * 3),
        (lambda x: torch.linalg.pinv(x, rtol=0.5), _randn(4, 4, seed=12)),
        (lambda x: torch.linalg.pinv(x, atol=1.0), _randn(4, 4, seed=12)),
        (torch.linalg.pinv, torch.empty(3, 0)),
        (torch.pinverse, _randn(2, 4, 3, seed=13)),
    ])


@pytest.mark.parametrize("backend", BACKENDS)
def test_vectors_gradients_and_large_run_eagerly(backend: str) -> None:
    use_backend(backend)
    a = _randn(4, 4, seed=14)
    metrics.reset()
    x = a.clone().to("lazy").requires_grad_()
    torch.linalg.svdvals(x).sum().backward()
    want = a.clone().requires_grad_()
    torch.linalg.svdvals(want).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), want.grad, rtol=1e-4, atol=1e-5)
    assert "fallback::aten._linalg_svd.default" in _fallbacks()
    metrics.reset()
    torch.testing.assert_close(torch.linalg.eigh(_symmetric(3, 15).to("lazy")).eigenvalues.cpu(),
                               torch.linalg.eigh(_symmetric(3, 15)).eigenvalues)
    assert "fallback::aten._linalg_eigh.default" in _fallbacks()
    big = _randn(MAX_ORDER + 1, MAX_ORDER + 1, seed=16)
    metrics.reset()
    torch.testing.assert_close(torch.linalg.eigvalsh(big.to("lazy")).cpu(), torch.linalg.eigvalsh(big),
                               rtol=1e-4, atol=1e-4)
    assert "fallback::aten._linalg_eigh.default" in _fallbacks()
