"""``torch.histc`` over a given range compiles (lowering/histc.py).

``aten.histc`` has no torch-dialect op, so it ran eagerly. Counts against eager on the CPU:
elements on the edges (``min`` counts, ``max`` goes to the last bin), on bin boundaries where
float32 rounding decides the bin, outside the range, NaN and infinities, an empty input, one
bin, negative and fractional ranges, float64; strict (any fallback fails). ``min == max`` (the
data's own range, and eager's error for an infinite one) and a range eager rejects run eagerly.
"""

from __future__ import annotations

import pytest
import torch
from conftest import requested_backends, use_backend

from lazy_core import metrics

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([0.0, 1.0, 0.1, 0.3, 0.7, 0.9999999, 1.0000001, -0.0, float("nan"), float("inf"),
                            float("-inf"), 0.5, 0.2, 0.6])
    boundaries = torch.arange(-30, 31, dtype=torch.float32) / 30  # every bin boundary of [-1, 1] / 60 bins
    return [special, boundaries, torch.randn(4, 7, generator=g) * 3, torch.empty(0), torch.tensor(0.25)]


CASES = [(10, 0.0, 1.0), (1, 0.0, 1.0), (60, -1.0, 1.0), (7, -2.5, 3.3), (3, 0.1, 0.7), (100, -5, 5)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_matches_eager(backend: str, dtype: torch.dtype) -> None:
    use_backend(backend)
    for x in _inputs():
        x = x.to(dtype)
        for bins, lo, hi in CASES:
            metrics.reset()
            got = torch.histc(x.to("lazy"), bins, lo, hi).cpu()
            assert _fallbacks() == [], _fallbacks()
            want = torch.histc(x, bins, lo, hi)
            assert torch.equal(got, want), (x, bins, lo, hi, got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_range_and_bad_ranges_run_eagerly(backend: str) -> None:
    use_backend(backend)
    x = torch.tensor([1.0, 2.0, 2.5, 4.0])
    metrics.reset()
    assert torch.equal(torch.histc(x.to("lazy"), 4).cpu(), torch.histc(x, 4))
    assert "fallback::aten.histc.default" in _fallbacks()
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x.to("lazy"), 4, 3.0, 1.0)
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(torch.tensor([1.0, float("inf")]).to("lazy"), 4).cpu()
