"""``torch.rand_like``/``randn_like``/``randint_like`` of a lazy tensor draw on the host.

They ran eagerly ("fallback::aten.rand_like.default"), cutting the graph: HF Phi-MoE's router
draws ``torch.rand_like(scores)`` in every training forward. Like the in-place fillers, the
numbers come from the CPU generator into a tensor laid out as the argument, so they equal
eager CPU's bit for bit (same seed), in dtype and strides too.
"""

from __future__ import annotations

import pytest
import torch

DRAWS = {
    "rand_like": lambda t: torch.rand_like(t),
    "randn_like_transposed": lambda t: torch.randn_like(t.t()),
    "randint_like_bounds": lambda t: torch.randint_like(t, 3, 9),
    "randint_like_high": lambda t: torch.randint_like(t, 5),
    "rand_like_float64": lambda t: torch.rand_like(t, dtype=torch.float64),
    "randn_like_half": lambda t: torch.randn_like(t.half()),
    "rand_like_then_uniform": lambda t: torch.rand_like(t[:, :2]).uniform_() > 0.75,
}


@pytest.mark.parametrize("draw", list(DRAWS))
def test_random_like_equals_eager_with_no_fallback(cpu_backend: object, draw: str) -> None:
    x = torch.randn(3, 4)
    torch.manual_seed(5)
    want = DRAWS[draw](x)
    torch.manual_seed(5)
    got = DRAWS[draw](x.to("lazy"))
    assert got.dtype == want.dtype and got.stride() == want.stride()
    assert torch.equal(got.cpu(), want)
