"""``F.multilabel_margin_loss`` compiles (lowering/multilabel_margin.py).

``multilabel_margin_loss_forward`` has no torch-dialect op, so it ran eagerly. Loss and
``is_target`` against eager on the CPU for each reduction: targets ended by -1 early or not at
all, repeated targets, every class a target (no pair), entries after the -1 that are not read,
0-d and 1-d inputs, margins of exactly 0; strict (any fallback fails). A target outside
``[-1, C)`` raises eager's error at the read.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import requested_backends, use_backend

import lazy_core
from lazy_core import metrics

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]
aten = torch.ops.aten


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, generator=g)
    t = torch.tensor([[3, 0, -1, 1, 4], [1, 1, 2, -1, -1], [0, 1, 2, 3, 4], [-1, 2, 2, 2, 2]])
    ties = torch.tensor([[0.0, 1.0, 0.5]])  # 1 - (x[0] - x[1]) == 0: a margin of exactly 0
    return [(x, t), (ties, torch.tensor([[0, -1, 2]])), (torch.randn(5, generator=g), torch.tensor([2, 0, -1, 4, 4])),
            (torch.tensor(0.3), torch.tensor(0)), (torch.tensor(0.3), torch.tensor(-1))]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_forward_matches_eager(backend: str, reduction: int) -> None:
    use_backend(backend)
    for x, t in _cases():
        metrics.reset()
        loss, is_target = aten.multilabel_margin_loss_forward(x.to("lazy"), t.to("lazy"), reduction)
        loss, is_target = loss.cpu(), is_target.cpu()
        assert _fallbacks() == [], _fallbacks()
        want = aten.multilabel_margin_loss_forward(x, t, reduction)
        torch.testing.assert_close(loss, want[0], rtol=1e-5, atol=1e-6)
        assert torch.equal(is_target, want[1]), (x, t)
    x, t = _cases()[0]
    torch.testing.assert_close(F.multilabel_margin_loss(x.to("lazy"), t.to("lazy")).cpu(),
                               F.multilabel_margin_loss(x, t))


@pytest.mark.parametrize("backend", BACKENDS)
def test_target_out_of_range_raises(backend: str) -> None:
    use_backend(backend)
    x = torch.randn(2, 4)
    for bad in (torch.tensor([[0, -1, 5, 1], [1, 2, 3, -1]]), torch.tensor([[0, 1, -2, 1], [1, 2, 3, -1]])):
        with pytest.raises(RuntimeError, match="out of range"):
            F.multilabel_margin_loss(x.to("lazy"), bad.to("lazy")).cpu()
    lazy_core.mark_step()
