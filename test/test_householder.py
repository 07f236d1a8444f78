"""Householder QR compiles (lowering/householder.py): ``geqrf``, ``householder_product``,
``ormqr``, ``linalg.qr``.

Each ran eagerly (LAPACK; ``geqrf`` had no meta kernel, ``linalg_qr``'s graphs failed to
compile). Values against eager on the CPU: square, tall, wide and batched matrices, every mode
and side, columns already zero below the diagonal (``tau = 0``), a ``-0.0`` pivot, empty matrices;
strict (any fallback fails). Past ``MAX_REFLECTORS`` the ops run eagerly, with eager's values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from conftest import requested_backends, use_backend

from lazy_core import metrics
from lowering.householder import MAX_REFLECTORS

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _check(fn: Callable[..., Any], *inputs: torch.Tensor) -> None:
    metrics.reset()
    got = fn(*(x.to("lazy") for x in inputs))
    got = [t.cpu() for t in (got if isinstance(got, tuple) else (got,))]
    assert _fallbacks() == [], _fallbacks()
    want = fn(*inputs)
    for g, w in zip(got, want if isinstance(want, tuple) else (want,), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def _structured() -> torch.Tensor:
    """Column 0 already zero below the diagonal (its reflector is the identity, tau 0), a -0.0
    pivot in column 1 after that, and a negative one."""
    a = _randn(4, 3, seed=5)
    a[1:, 0] = 0.0
    a[0, 0] = -2.0
    a[1, 1] = -0.0
    return a


MATRICES = [_randn(5, 5), _randn(6, 3, seed=1), _randn(3, 6, seed=2), _randn(2, 1, 4, 4, seed=3), _structured()]


@pytest.mark.parametrize("backend", BACKENDS)
def test_geqrf_and_qr(backend: str) -> None:
    use_backend(backend)
    for a in [*MATRICES, torch.empty(5, 0), torch.empty(0, 3), torch.empty(0, 4, 4)]:
        _check(torch.geqrf, a)
        for mode in ("reduced", "complete", "r"):
            _check(lambda x, mode=mode: torch.linalg.qr(x, mode=mode), a)


@pytest.mark.parametrize("backend", BACKENDS)
def test_householder_product_and_ormqr(backend: str) -> None:
    use_backend(backend)
    for a in MATRICES:
        if a.shape[-2] < a.shape[-1]:
            continue
        qr, tau = torch.geqrf(a)
        _check(torch.linalg.householder_product, qr, tau)
        _check(torch.linalg.householder_product, qr, tau[..., :1])  # fewer reflectors than columns
        m = a.shape[-2]
        for left in (True, False):
            for transpose in (True, False):
                c = _randn(*a.shape[:-2], m, 3, seed=7) if left else _randn(*a.shape[:-2], 2, m, seed=7)
                _check(lambda x, t, y, left=left, transpose=transpose: torch.ormqr(x, t, y, left, transpose),
                       qr, tau, c)
    # An arbitrary tau (not from geqrf) and a non-contiguous input.
    _check(torch.linalg.householder_product, _randn(5, 4, seed=8).mT.contiguous().mT, _randn(3, seed=9))


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_matrices_run_eagerly(backend: str) -> None:
    use_backend(backend)
    a = _randn(MAX_REFLECTORS + 1, 2)
    metrics.reset()
    torch.testing.assert_close(torch.linalg.qr(a.to("lazy")).Q.cpu(), torch.linalg.qr(a).Q)
    assert "fallback::aten.linalg_qr.default" in _fallbacks()
