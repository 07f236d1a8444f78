"""``segment_reduce`` compiles (lowering/segment_reduce.py).

No torch-dialect op, so it ran eagerly. Against eager on the CPU for every reduction, with and
without ``initial``: empty segments, NaN and infinities in a segment, 2-d data, ``lengths`` and
``offsets``; strict (any fallback fails). Bad segments raise eager's errors at the read.
"""

from __future__ import annotations

import pytest
import torch
from conftest import requested_backends, use_backend

import lazy_core
from lazy_core import metrics

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]
aten = torch.ops.aten


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


DATA = torch.tensor([1.0, 5.0, float("nan"), 2.0, 3.0, -1.0, float("inf"), -4.0])
LENGTHS = torch.tensor([2, 0, 3, 1, 2])
OFFSETS = torch.tensor([0, 2, 2, 5, 6, 8])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduce", ["max", "min", "sum", "prod", "mean"])
def test_segment_reduce_matches_eager(backend: str, reduce: str) -> None:
    use_backend(backend)
    data2d = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    for initial in (None, 1.5, -2):
        for data in (DATA, data2d):
            for key, segments in (("lengths", LENGTHS), ("offsets", OFFSETS)):
                kwargs = {key: segments, "axis": 0, "unsafe": False, "initial": initial}
                metrics.reset()
                got = aten.segment_reduce(data.to("lazy"), reduce, **{**kwargs, key: segments.to("lazy")}).cpu()
                assert _fallbacks() == [], _fallbacks()
                want = aten.segment_reduce(data, reduce, **kwargs)
                torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-6,
                                           msg=lambda m, k=kwargs: f"{reduce} {k}: {m}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_segments_raise(backend: str) -> None:
    use_backend(backend)
    d = DATA.to("lazy")
    with pytest.raises(RuntimeError, match="negative"):
        aten.segment_reduce(d, "sum", lengths=torch.tensor([-1, 3, 3, 1, 2]).to("lazy"), axis=0).cpu()
    with pytest.raises(RuntimeError, match="sum to"):
        aten.segment_reduce(d, "sum", lengths=torch.tensor([2, 0, 3, 1, 3]).to("lazy"), axis=0).cpu()
    with pytest.raises(RuntimeError, match="segment_length >= 0"):
        aten.segment_reduce(d, "sum", offsets=torch.tensor([0, 3, 2, 5, 6, 8]).to("lazy"), axis=0).cpu()
    lazy_core.mark_step()
