"""``special.zeta(x, q)`` of two tensors compiles (lowering/hurwitz_zeta.py).

No torch-dialect op, so it ran eagerly. Against eager on the CPU: random orders and arguments
of both signs, integer orders with negative non-integer ``q`` (eager's loop then runs
``ceil(9 - q)`` terms: a data-dependent count), the poles (``q`` a non-positive integer,
``x == 1``), the domain (``x < 1``), NaN and infinities, broadcasting, float64; strict.
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import requested_backends, use_backend

from lazy_core import metrics

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _cases(dtype: torch.dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = torch.empty(300, dtype=dtype).uniform_(-9, 9, generator=g)
    q = torch.empty(300, dtype=dtype).uniform_(-9, 9, generator=g)
    xi = torch.randint(-3, 12, (300,), generator=g).to(dtype)
    qi = torch.empty(300, dtype=dtype).uniform_(-40, 9, generator=g)
    special_x = torch.tensor([1.0, 2, 3, 2, 0.5, math.nan, 2, 4, 2, 30, 2, 1.5], dtype=dtype)
    special_q = torch.tensor([1.0, 1e9, -2.5, 0, 1, 1, math.inf, -0.5, -math.inf, 0.01, -0.0, math.nan], dtype=dtype)
    return [(x, q), (xi, qi), (special_x, special_q), (torch.tensor([[2.0], [3.5]], dtype=dtype), q[:5])]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zeta_matches_eager(backend: str, dtype: torch.dtype) -> None:
    use_backend(backend)
    for x, q in _cases(dtype):
        metrics.reset()
        got = torch.special.zeta(x.to("lazy"), q.to("lazy")).cpu()
        assert _fallbacks() == [], _fallbacks()
        torch.testing.assert_close(got, torch.special.zeta(x, q), rtol=1e-4 if dtype == torch.float32 else 1e-9,
                                   atol=1e-5 if dtype == torch.float32 else 1e-12, equal_nan=True)
