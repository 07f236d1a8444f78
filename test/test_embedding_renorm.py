"""``nn.Embedding(max_norm=...)`` compiles into the step and renormalizes rows as eager does.

Its ``embedding_renorm_`` ran eagerly at every forward, cutting the training step's graph
(adversary round 40); lowering/embedding_renorm.py writes it as a function of the weight.
Strict: a compile failure or an eager fallback fails the test.
"""

from __future__ import annotations

import pytest
import torch

import lazy_core
from lazy_core import metrics


def _fallbacks() -> dict[str, int]:
    return {k: v for k, v in metrics.counters().items() if k.startswith("fallback::")}


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.5])
def test_max_norm_embedding_trains_like_eager_in_one_graph(cpu_backend: object, norm_type: float) -> None:
    torch.manual_seed(0)
    cpu = torch.nn.Embedding(12, 5, max_norm=1.5, norm_type=norm_type)
    with torch.no_grad():
        cpu.weight[3] *= 0.1  # a named row under the limit stays as it is
    lazy = torch.nn.Embedding(12, 5, max_norm=1.5, norm_type=norm_type)
    lazy.load_state_dict(cpu.state_dict())
    lazy = lazy.to("lazy")
    opts = [torch.optim.SGD(m.parameters(), lr=0.3) for m in (cpu, lazy)]
    before = dict(_fallbacks())
    for step in range(3):
        # Repeated indices (a row named twice is scaled once), 2-d, rows 10 and 11 never named.
        idx = torch.tensor([[1, 2, 2, 7], [3, 1, 0, 9]]) if step % 2 == 0 else torch.tensor([[4, 4, 5, 6]])
        for model, opt, device in ((cpu, opts[0], "cpu"), (lazy, opts[1], "lazy")):
            opt.zero_grad()
            (model(idx.to(device)) ** 2).sum().backward()
            opt.step()
        lazy_core.mark_step()
        torch.testing.assert_close(lazy.weight.detach().cpu(), cpu.weight.detach(), rtol=1e-6, atol=1e-7)
    assert _fallbacks() == before


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_renorm_in_other_dtypes_matches_eager(cpu_backend: object, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    weight = (torch.randn(9, 6, generator=gen) * 2).to(dtype)
    idx = torch.tensor([0, 3, 3, 8, 5])
    want = weight.clone()
    torch.embedding_renorm_(want, idx, 1.0, 2.0)
    got = weight.to("lazy")
    torch.embedding_renorm_(got, idx.to("lazy"), 1.0, 2.0)
    # Exact: the half-precision norm is accumulated in float32 and rounded once, and the row is
    # multiplied by the scale rounded to its dtype, as eager's kernel does.
    assert torch.equal(got.cpu(), want), (got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_rows_scale_exactly_as_eager(cpu_backend: object, dtype: torch.dtype) -> None:
    """Eager's ``row *= scale`` multiplies by the double scale rounded to the row's dtype (the
    scalar is cast to the common dtype) and rounds the float32 product once; the function
    multiplied by the float32 scale, and 7 of 10 bfloat16 rows came out an ulp off (adversary
    round 41). Under bf16 emulation the norm and the scale are rounded on their float64 bits."""
    for seed, (max_norm, norm_type) in enumerate([(1.0, 2.0), (0.7, 1.0), (2.5, float("inf")),
                                                  (1e-3, 3.0), (-1.0, 2.0), (1.0, 0.5)]):
        gen = torch.Generator().manual_seed(seed)
        weight = (torch.randn(17, 8, generator=gen) * 3).to(dtype)
        idx = torch.randint(0, 17, (9,), generator=gen)
        want = weight.clone()
        torch.embedding_renorm_(want, idx, max_norm, norm_type)
        got = weight.to("lazy")
        torch.embedding_renorm_(got, idx.to("lazy"), max_norm, norm_type)
        assert torch.equal(got.cpu(), want), (max_norm, norm_type, (got.cpu() != want).any(1).nonzero())


def test_rounding_to_bfloat16_on_float64_bits_matches_the_cast() -> None:
    """``bfloat16_in_float64`` (the scale's rounding under bf16 emulation) is eager's
    ``double.to(torch.bfloat16)``: ties to even, subnormals, overflow, signs, infinities, NaN."""
    from lowering.embedding_renorm import bfloat16_in_float64

    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4000, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(
        -45, 39, (4000,), generator=gen), torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8, 2 ** -130 * 1.5, -(2 ** -133) / 2,
                                                        3.3961e38, -3.3961e38, 3.38e38, 0.0, -0.0, 1e-50,
                                                        float("inf"), -float("inf"), float("nan")], dtype=torch.float64)])
    want = x.to(torch.bfloat16).double()
    got = bfloat16_in_float64(x)
    assert torch.equal(got.nan_to_num(), want.nan_to_num()) and torch.equal(got.isnan(), want.isnan())
    assert torch.equal(got.signbit(), want.signbit())


def test_an_index_outside_the_table_raises_like_eager(cpu_backend: object) -> None:
    cpu = torch.nn.Embedding(4, 3, max_norm=1.0)
    lazy = torch.nn.Embedding(4, 3, max_norm=1.0).to("lazy")
    idx = torch.tensor([1, 4])
    with pytest.raises(IndexError):
        cpu(idx)
    with pytest.raises(IndexError):
        lazy(idx.to("lazy")).cpu()
