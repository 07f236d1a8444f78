"""``torch.mode`` compiles (lowering/mode.py).

``aten.mode`` has no torch-dialect op, so it ran eagerly. Values and indices against eager on
the CPU: ties in frequency (the smallest value wins), repeated values (the last index of the
run), every dim with and without ``keepdim``, a 0-d tensor, integers, infinities; strict (any
fallback fails). Rows holding NaN are eager's unspecified case (checked: a NaN-free row of the
same tensor is still eager's). Rows past ``MAX_ROW`` run eagerly.
"""

from __future__ import annotations

import pytest
import torch
from conftest import requested_backends, use_backend

from lazy_core import metrics
from lowering.mode import MAX_ROW

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _check(x: torch.Tensor, *args: object) -> None:
    metrics.reset()
    got = torch.mode(x.to("lazy"), *args)
    values, indices = got.values.cpu(), got.indices.cpu()
    assert _fallbacks() == [], _fallbacks()
    want = torch.mode(x, *args)
    assert torch.equal(values, want.values) and torch.equal(indices, want.indices), (x, args, got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mode_matches_eager(backend: str) -> None:
    use_backend(backend)
    g = torch.Generator().manual_seed(0)
    small = torch.randint(0, 3, (4, 5, 6), generator=g)
    rows = [
        torch.tensor([1.0, 2, 2, 1]),  # a tie in frequency: the smaller value
        torch.tensor([3.0, 1, 2]),  # all distinct: the smallest
        torch.tensor([5.0, 5, 5, 1, 1, 1, -2]),
        torch.tensor([float("inf"), 1, float("inf"), float("-inf"), float("-inf")]),
        torch.tensor([7.0]),
    ]
    for x in rows:
        _check(x)
        _check(x, 0, True)
    _check(torch.tensor(3.5))
    _check(torch.tensor(3.5), 0, True)
    for dim in range(-3, 3):
        for keepdim in (False, True):
            _check(small.float(), dim, keepdim)
            _check(small, dim, keepdim)
    _check(torch.randn(5, 5, 5, generator=g), 1)
    # A long row with repeats: which index of the run eager's unstable sort leaves last is not
    # specified; the value is eager's, the index one holding it.
    long = torch.randint(-4, 4, (3, MAX_ROW), generator=g).to(torch.int32)
    got = torch.mode(long.to("lazy"))
    values, indices = got.values.cpu(), got.indices.cpu()
    assert torch.equal(values, torch.mode(long).values)
    assert torch.equal(long.gather(1, indices.unsqueeze(1)).squeeze(1), values)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_rows_and_long_rows(backend: str) -> None:
    """A NaN-free row beside one with NaN (whose answer eager does not specify) is eager's."""
    use_backend(backend)
    x = torch.tensor([[2.0, 1.0, 2.0, 1.0, 2.0], [2.0, float("nan"), 2.0, float("nan"), float("nan")]])
    got = torch.mode(x.to("lazy"), 1)
    want = torch.mode(x, 1)
    assert got.values.cpu()[0] == want.values[0] and got.indices.cpu()[0] == want.indices[0]
    assert torch.isnan(got.values.cpu()[1])  # NaN is the most frequent here
    assert _fallbacks() == []
    long = torch.randint(0, 9, (2, MAX_ROW + 1)).float()
    metrics.reset()
    assert torch.equal(torch.mode(long.to("lazy")).values.cpu(), torch.mode(long).values)
    assert "fallback::aten.mode.default" in _fallbacks()
