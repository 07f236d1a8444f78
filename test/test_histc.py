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


def _cuda_int_histc(x: torch.Tensor, bins: int, lo: float, hi: float) -> torch.Tensor:
    """Eager CUDA's integer ``histc`` (``_histc_cuda_template``, ``getBin``), element by element
    in Python integers: eager's CPU kernel has no integer version to compare with."""
    lo_i, hi_i = int(lo), int(hi)
    counts = [0] * bins
    for v in x.reshape(-1).tolist():
        if lo_i <= v <= hi_i:
            b = (v - lo_i) * bins // (hi_i - lo_i)
            counts[min(b, bins - 1)] += 1
    return torch.tensor(counts, dtype=torch.int64).to(x.dtype)


INT_CASES = [(8, 0, 7), (4, 0, 3), (1, 0, 5), (5, -3, 9), (3, -2.7, 4.9), (16, -100, 100), (7, 0.5, 6.5)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64])
def test_integer_histc_matches_eager_cuda(backend: str, dtype: torch.dtype) -> None:
    """Integers bin as on eager CUDA: transformers' MoE routing (``integrations/moe.py``) counts
    tokens per expert with ``histc`` of an int tensor on every device but cpu and mps."""
    use_backend(backend)
    g = torch.Generator().manual_seed(1)
    lo_v = 0 if dtype == torch.uint8 else -120
    xs = [torch.randint(lo_v, 120, (37,), generator=g).to(dtype), torch.arange(0, 12).to(dtype).reshape(3, 4),
          torch.empty(0, dtype=dtype)]
    for x in xs:
        for bins, lo, hi in INT_CASES:
            if dtype == torch.uint8 and lo < 0:
                continue
            metrics.reset()
            got = torch.histc(x.to("lazy"), bins, lo, hi).cpu()
            assert _fallbacks() == [], _fallbacks()
            want = _cuda_int_histc(x, bins, lo, hi)
            assert got.dtype == x.dtype and torch.equal(got, want), (x, bins, lo, hi, got, want)
    # Where float binning agrees (integer data, unit-width bins), eager CPU on floats agrees too.
    ids = torch.randint(0, 8, (50,), generator=g)
    got = torch.histc(ids.to(dtype).to("lazy"), bins=8, min=0, max=7).cpu()
    assert torch.equal(got.long(), torch.histc(ids.float(), bins=8, min=0, max=7).long())


@pytest.mark.parametrize("backend", BACKENDS)
def test_integer_histc_range_outside_the_type_raises(backend: str) -> None:
    """``max=300`` for a uint8 input: eager CPU's error (CUDA would store it wrapped, as 44)."""
    use_backend(backend)
    x = torch.tensor([0, 10, 44, 45, 200], dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="without overflow"):
        torch.histc(x.to("lazy"), bins=4, min=0, max=300).cpu()


def test_integer_histc_on_the_eager_backend(eager_backend: object) -> None:
    """The interpreter that runs a graph no backend compiled (and the ``eager`` backend) gives
    the compiled answer (lazy_core/device_semantics.py), not eager CPU's error."""
    x = torch.tensor([0, 1, 2, 3, 3, 7, -1, 8], dtype=torch.int32)
    got = torch.histc(x.to("lazy"), bins=8, min=0, max=7).cpu()
    assert torch.equal(got, _cuda_int_histc(x, 8, 0, 7))
