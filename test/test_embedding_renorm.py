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
    # PyTorch's default tolerance per dtype: eager's kernel takes each row's norm on its own, the
    # function all rows' at once, and the sums may round apart by an ulp.
    torch.testing.assert_close(got.cpu(), want)


def test_an_index_outside_the_table_raises_like_eager(cpu_backend: object) -> None:
    cpu = torch.nn.Embedding(4, 3, max_norm=1.0)
    lazy = torch.nn.Embedding(4, 3, max_norm=1.0).to("lazy")
    idx = torch.tensor([1, 4])
    with pytest.raises(IndexError):
        cpu(idx)
    with pytest.raises(IndexError):
        lazy(idx.to("lazy")).cpu()
