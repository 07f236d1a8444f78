"""Antialiased bilinear resizing compiles (lowering/upsample_aa.py).

``_upsample_bilinear2d_aa`` has no torch-dialect op, so it ran eagerly. Against eager on the CPU:
downsampling (windows wider than two pixels), upsampling, one dim unchanged, sizes of 1,
``align_corners``, explicit scale factors, float64, and NaN/inf pixels (they reach only the
outputs whose windows hold them); strict (any fallback fails).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import requested_backends, use_backend

from lazy_core import metrics

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


CASES = [
    dict(size=(3, 3)), dict(size=(5, 7)), dict(size=(17, 18)), dict(size=(10, 5)), dict(size=(1, 1)),
    dict(size=(4, 30), align_corners=True), dict(size=(13, 6), align_corners=True),
    dict(scale_factor=(1.7, 0.9)), dict(scale_factor=(0.45, 2.5)),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_antialiased_bilinear_matches_eager(backend: str, dtype: torch.dtype) -> None:
    use_backend(backend)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 10, 20, generator=g, dtype=dtype)
    special = x.clone()
    special[0, 0, 4, 7] = float("nan")
    special[1, 2, 0, 0] = float("inf")
    special[0, 1, 9, 19] = float("-inf")
    for kwargs in CASES:
        for inp in (x, special):
            metrics.reset()
            got = F.interpolate(inp.to("lazy"), mode="bilinear", antialias=True, **kwargs).cpu()
            assert _fallbacks() == [], (kwargs, _fallbacks())
            want = F.interpolate(inp, mode="bilinear", antialias=True, **kwargs)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True, msg=lambda m, k=kwargs: f"{k}: {m}")
