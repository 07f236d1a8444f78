"""``F.pdist`` compiles (lowering/distances.py: ``pdist_forward``).

``_pdist_forward`` has no torch-mlir op, so it ran eagerly. Each norm eager has a branch for
(0, 1, 2, inf, and a general ``p``) against eager on the CPU, with repeated rows (a distance of
0), NaN and infinite coordinates, no columns, and fewer than two rows (no pair); strict, any
fallback fails. Past ``PDIST_MAX_ROWS`` rows the call runs eagerly, with eager's values.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from conftest import requested_backends, use_backend

from lazy_core import metrics
from lowering.distances import PDIST_MAX_ROWS

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 4, generator=g)
    x[3] = x[1]  # a repeated row
    special = torch.randn(5, 3, generator=g)
    special[1, 2] = float("nan")
    special[3, 0] = float("inf")
    special[4, 0] = float("-inf")
    return [x, special, torch.randn(1, 5, generator=g), torch.randn(0, 3), torch.randn(4, 0), torch.randn(2, 1)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, 0.5, math.inf])
def test_pdist_matches_eager(backend: str, p: float) -> None:
    use_backend(backend)
    for x in _inputs():
        metrics.reset()
        got = F.pdist(x.to("lazy"), p).cpu()
        assert _fallbacks() == [], (x.shape, _fallbacks())
        torch.testing.assert_close(got, F.pdist(x, p), rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_many_rows_run_eagerly(backend: str) -> None:
    use_backend(backend)
    x = torch.randn(PDIST_MAX_ROWS + 1, 2)
    metrics.reset()
    torch.testing.assert_close(F.pdist(x.to("lazy")).cpu(), F.pdist(x))
    assert "fallback::aten._pdist_forward.default" in _fallbacks()
