"""``F.linear_cross_entropy``'s chunked ops compile (lazy_core/linear_cross_entropy.py).

Their Python kernel writes into narrowed buffers in place, which lazy tensors refuse, so each
call ran eagerly. Loss and gradients (the scalar op precomputes them in its forward) are
compared with eager on the CPU for each reduction, class weights, a bias, ignored targets
(in range and not), an all-ignored batch (a mean of NaN) and ties in the logits; any fallback
fails. An out-of-range class raises eager's error (its gather's) at the read.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import requested_backends, use_backend

import lazy_core
from lazy_core import metrics

BACKENDS = [b for b in requested_backends() if b in ("reference", "iree-cpu")]
LCEO = getattr(torch.nn, "LinearCrossEntropyOptions", None)
pytestmark = pytest.mark.skipif(LCEO is None, reason="no F.linear_cross_entropy in this torch")


def _fallbacks() -> list[str]:
    return [k for k in metrics.counters() if k.startswith("fallback::")]


def _inputs(n: int = 7, f: int = 5, c: int = 4, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(n, f, generator=g), "lw": torch.randn(c, f, generator=g),
            "target": torch.randint(0, c, (n,), generator=g), "bias": torch.randn(c, generator=g),
            "weight": torch.rand(c, generator=g) + 0.5}


def _run(device: str, d: dict, grads: bool, **kw: object) -> list[torch.Tensor]:
    x = d["x"].clone().to(device).requires_grad_(grads)
    lw = d["lw"].clone().to(device).requires_grad_(grads)
    bias = d["bias"].clone().to(device).requires_grad_(grads) if kw.pop("with_bias", False) else None
    weight = d["weight"].to(device) if kw.pop("with_weight", False) else None
    loss = F.linear_cross_entropy(x, lw, d["target"].to(device), linear_bias=bias, weight=weight, **kw)
    out = [loss]
    if grads:
        (loss.sum() if loss.dim() else loss).backward()
        out += [x.grad, lw.grad] + ([bias.grad] if bias is not None else [])
    return [t.detach().cpu() for t in out]


CASES = [
    dict(reduction="mean"),
    dict(reduction="sum", with_bias=True),
    dict(reduction="mean", with_weight=True, with_bias=True),
    dict(reduction="mean", ignore_index=1),
    dict(reduction="sum", ignore_index=-100, with_weight=True),
    dict(reduction="none"),
    dict(reduction="none", with_bias=True, with_weight=True, ignore_index=2),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_chunked_loss_and_gradients_match_eager(backend: str, case: int) -> None:
    use_backend(backend)
    d = _inputs(seed=case)
    d["target"][1] = 1  # at least one row of class 1 (ignored in the ignore_index=1 case)
    d["target"][2] = -100 if CASES[case].get("ignore_index") == -100 else d["target"][2]
    d["x"][3] = 0.0  # a row of equal logits (ties for the max), with no bias
    for chunk in (2, 3, 16):
        kw = dict(CASES[case], options=LCEO(batch_chunk_size=chunk, allow_retain_graph=True))
        metrics.reset()
        got = _run("lazy", d, grads=True, **kw)
        assert _fallbacks() == [], _fallbacks()
        want = _run("cpu", d, grads=True, **dict(CASES[case], options=kw["options"]))
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_ignored_mean_is_nan_and_bad_class_raises(backend: str) -> None:
    use_backend(backend)
    d = _inputs()
    d["target"].fill_(3)
    opts = LCEO(batch_chunk_size=2, allow_retain_graph=True)
    got = _run("lazy", d, grads=False, reduction="mean", ignore_index=3, options=opts)
    assert _fallbacks() == []
    assert torch.isnan(got[0]) and torch.isnan(_run("cpu", d, grads=False, reduction="mean", ignore_index=3,
                                                      options=opts)[0])
    d["target"][0] = 9
    with pytest.raises(RuntimeError, match="out of bounds for dimension 1 with size 4"):  # eager's gather error
        _run("lazy", d, grads=False, reduction="sum", options=opts)
    lazy_core.mark_step()
