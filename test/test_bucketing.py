"""lazy_core.bucketing: static shapes by padding up to a few sizes.

The padded loop must give eager's unpadded values (the loss ignores the
padding) and compile once per bucket on a backend that compiles every size
statically (``LAZY_DYNAMIC=0``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import use_backend
from torch import nn

import lazy_core
from lazy_core import metrics

LENGTHS = [5, 13, 7, 16, 9, 3, 12, 15, 6, 11, 8, 14]
BUCKETS = [8, 16]
VOCAB = 11


def _train(device: str, pad: bool) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(VOCAB, 8), nn.Linear(8, VOCAB)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for i, n in enumerate(LENGTHS):
        g = torch.Generator().manual_seed(i)
        ids, labels = torch.randint(1, VOCAB, (2, n), generator=g), torch.randint(0, VOCAB, (2, n), generator=g)
        if pad:
            ids, _ = lazy_core.bucketing.pad_to_bucket(ids, 1, BUCKETS, value=0)
            labels, _ = lazy_core.bucketing.pad_to_bucket(labels, 1, BUCKETS, value=-100)
        opt.zero_grad()
        loss = F.cross_entropy(model(ids.to(device)).flatten(0, 1), labels.to(device).flatten(), ignore_index=-100)
        loss.backward()
        opt.step()
        if device == "lazy":
            lazy_core.mark_step()
        losses.append(loss.item())
    return losses


def test_padded_loop_compiles_once_per_bucket_and_matches_unpadded_eager(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("LAZY_DYNAMIC", "0")
    monkeypatch.setenv("LAZY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZY_REFERENCE_OPT_LEVEL", "0")
    use_backend("reference")
    want = _train("cpu", pad=False)
    got = _train("lazy", pad=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    c = metrics.counters()
    # One step graph per bucket (plus each step's loss read, already in the graph).
    assert c.get("compile", 0) == len(BUCKETS), c


def test_mask_marks_the_real_positions() -> None:
    x = torch.arange(6).reshape(2, 3)
    padded, mask = lazy_core.bucketing.pad_to_bucket(x, -1, [2, 5], value=-7)
    assert torch.equal(padded, torch.tensor([[0, 1, 2, -7, -7], [3, 4, 5, -7, -7]]))
    assert torch.equal(mask, torch.tensor([[True, True, True, False, False]] * 2))
    same, mask = lazy_core.bucketing.pad_to_bucket(x, 0, [2, 4])
    assert same.shape == (2, 3) and same is x and bool(mask.all())
    assert lazy_core.bucketing.bucket_size(0) == 8 and lazy_core.bucketing.bucket_size(9) == 16 and lazy_core.bucketing.bucket_size(16) == 16


@pytest.mark.parametrize(("call", "error"), [
    (lambda: lazy_core.bucketing.bucket_size(17, [8, 16]), "larger than the largest bucket"),
    (lambda: lazy_core.bucketing.bucket_size(-1), "non-negative"),
    (lambda: lazy_core.bucketing.bucket_size(3, [0, 4]), "positive"),
    (lambda: lazy_core.bucketing.pad_to_bucket(torch.tensor(1.0), 0), "0-d"),
])
def test_bad_sizes_raise_instead_of_truncating(call, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        call()


def test_out_of_range_dim_raises_index_error() -> None:
    with pytest.raises(IndexError, match="out of range"):
        lazy_core.bucketing.pad_to_bucket(torch.zeros(2, 3), 2)
