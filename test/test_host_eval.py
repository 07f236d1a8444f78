"""lazy_core.host_eval: a small graph of values the host holds, read by ``item()``, runs on the host.

HF ``generate()``'s argument checks compiled four tiny graphs on a first call
and two more at each new prompt length. Each test here holds on every backend:
the results are uploaded to it and later graphs on it use them. The suite runs
with the path off (conftest); these tests turn it on, as users have it.
"""

from __future__ import annotations

import pytest
import torch

import lazy_core
from lazy_core import host_eval, metrics


@pytest.fixture
def on(monkeypatch: pytest.MonkeyPatch, backend: lazy_core.BackendImpl) -> lazy_core.BackendImpl:
    monkeypatch.setenv("LAZY_HOST_EVAL", "1")
    return backend


def _counts() -> tuple[int, int]:
    c = metrics.counters()
    return c.get("host_eval", 0), c.get("compile", 0) + c.get("persistent_cache_hit", 0)


def test_generate_style_checks_run_on_the_host(on) -> None:
    """``torch.isin(eos, pad).any()``, ``(ids < 0).any()``, ``(mask == 1).all()``: no compile."""
    eos, pad = torch.tensor(50256), torch.tensor(0)
    ids, mask = torch.randint(1, 100, (1, 7)), torch.ones(1, 7, dtype=torch.long)
    leos, lpad = torch.tensor(50256, device="lazy"), torch.tensor(0, device="lazy")
    lids, lmask = ids.to("lazy"), mask.to("lazy")
    assert bool(torch.isin(leos, lpad).any()) is bool(torch.isin(eos, pad).any())
    assert bool((leos < 0).any()) is bool((eos < 0).any())
    assert bool((lids < 0).any()) is bool((ids < 0).any())
    assert bool((lmask == 1).all()) is bool((mask == 1).all())
    assert _counts() == (4, 0), metrics.counters()


def test_results_feed_the_backend(on) -> None:
    """A value computed on the host is uploaded: a later graph on the backend reads it, and a
    tensor the read left pending (``y``) is one of the host graph's results."""
    x = torch.arange(12.0).reshape(3, 4)
    lx = x.to("lazy")
    y = lx * 2 - 1
    assert (y.sum() > 3).item() is True
    assert _counts()[0] == 1
    w = torch.randn(4, 5)
    got = (y @ w.to("lazy")).relu()
    lazy_core.mark_step()
    torch.testing.assert_close(got.cpu(), ((x * 2 - 1) @ w).relu())
    assert _counts()[1] == 1, "the matmul graph runs on the backend"


def test_cpu_reads_and_steps_stay_on_the_backend(on) -> None:
    """Only scalar reads: ``.cpu()`` and ``mark_step()`` show what the backend computes."""
    lx = torch.arange(6.0).to("lazy")
    assert torch.equal((lx + 1).cpu(), torch.arange(6.0) + 1)
    z = lx * 3
    lazy_core.mark_step()
    assert _counts() == (0, 2), metrics.counters()
    assert torch.equal(z.cpu(), torch.arange(6.0) * 3)


def test_a_value_only_the_device_holds_is_computed_there(on) -> None:
    """``w`` came out of a step nobody read: the read's graph goes to the backend."""
    w = torch.arange(6.0).to("lazy") * 2
    lazy_core.mark_step()
    before = _counts()
    assert (w.sum() > 0).item() is True
    assert _counts()[0] == before[0] and _counts()[1] == before[1] + 1
    # Read once, the value is known on the host: the next scalar read needs no compile.
    assert torch.equal(w.cpu(), torch.arange(6.0) * 2)
    assert w.max().item() == 10.0
    assert _counts()[0] == before[0] + 1 and _counts()[1] == before[1] + 1


def test_the_host_copy_is_a_copy(on) -> None:
    """Writes into the uploaded CPU tensor, into a ``.cpu()`` result, or in place into the lazy
    tensor: every read still gives eager's value."""
    x = torch.tensor([1.0, 2.0, 3.0])
    lx = x.to("lazy")
    x.add_(100)  # the user's CPU tensor, after the upload
    assert lx.sum().item() == 6.0
    h = lx.cpu()
    h.mul_(0)
    assert lx.sum().item() == 6.0
    lx.add_(1)  # in place on the lazy tensor: a new value
    assert lx.sum().item() == 9.0
    lx[1] = -5.0
    assert lx.sum().item() == 2.0 + -5.0 + 4.0
    assert torch.equal(lx.cpu(), torch.tensor([2.0, -5.0, 4.0]))


@pytest.mark.expect_fallback("aten.nonzero")
def test_eager_fallback_operands_are_computed_on_the_host(on) -> None:
    """``nonzero`` (a data-dependent shape) runs eagerly: its operand comes from the host too."""
    lx = torch.tensor([0.0, 1.5, 0.0, -2.0]).to("lazy")
    idx = torch.nonzero(lx * 2)
    assert torch.equal(idx.cpu(), torch.tensor([[1], [3]]))
    assert _counts() == (1, 0), metrics.counters()


def test_a_bad_index_raises_eagers_error(on) -> None:
    """The device-side index check of a host graph raises PyTorch's IndexError at the read, and
    the process goes on."""
    x = torch.arange(4.0).to("lazy")
    bad = torch.tensor([1, 7]).to("lazy")
    with pytest.raises(IndexError, match="out of bounds"):
        x[bad].sum().item()
    assert x[torch.tensor([1, 3]).to("lazy")].sum().item() == 4.0


def test_large_values_go_to_the_backend(on) -> None:
    n = host_eval.MAX_ELEMENTS + 1
    lx = torch.ones(n).to("lazy")
    assert lx.sum().item() == n
    assert _counts() == (0, 1), metrics.counters()


def test_lazy_host_eval_0_turns_it_off(monkeypatch: pytest.MonkeyPatch, backend: lazy_core.BackendImpl) -> None:
    monkeypatch.setenv("LAZY_HOST_EVAL", "0")
    assert (torch.arange(3).to("lazy") > 1).any().item() is True
    assert _counts() == (0, 1), metrics.counters()


def test_a_full_graph_step_still_refuses_the_read(on) -> None:
    """A read inside ``lazy_core.step(full_graph=True)`` splits the step, wherever it runs."""
    lx = torch.arange(3.0).to("lazy")
    with pytest.raises(RuntimeError, match="full_graph"):
        with lazy_core.step(full_graph=True):
            (lx + 1).sum().item()


def test_a_read_of_a_host_known_cone_leaves_the_step_pending(on) -> None:
    """HF's mask helpers ask ``fast_all(padding_mask)`` mid-forward, after the embeddings (which read
    weights only the device holds) are recorded: the whole pending step ran there, and Llama, OPT,
    BART and GPT-BigCode training steps from their configs ran as three graphs. Only the read's own
    cone (the mask's ops) runs on the host now; the step stays one graph, with eager's values."""
    w = torch.randn(10, 4).to("lazy") * 1.0
    lazy_core.mark_step()  # w: a value only the device holds
    ids = torch.tensor([[1, 2, 3, 0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    lids, lmask = ids.to("lazy"), mask.to("lazy")
    metrics.reset()
    emb = w[lids]  # pending, reads w
    if bool((lmask == 1).all()):  # the read: mask == 1 and all() run on the host
        out = emb.sum(-1)
    else:
        out = (emb * (lmask == 1).unsqueeze(-1)).sum(-1)
    c = metrics.counters()
    assert c.get("host_eval", 0) == 1 and c.get("execute", 0) == 0, c
    lazy_core.mark_step()
    assert metrics.counters().get("execute", 0) == 1, metrics.counters()
    want = (w.cpu()[ids] * (mask == 1).unsqueeze(-1)).sum(-1)
    torch.testing.assert_close(out.cpu(), want)


def test_reads_answered_from_their_cone_are_bounded_without_a_step(on) -> None:
    """A loop that reads a host-known flag each iteration and never calls ``mark_step()`` would grow
    one pending graph without end: after ``MAX_CONE_READS`` such reads the next read runs the
    pending work, and the count starts again. The rule depends on nothing before the last cut, so
    the same loop run again cuts its graphs at the same reads (no mark_step() between)."""
    w = torch.randn(8).to("lazy") * 1.0
    lazy_core.mark_step()
    flag = torch.tensor([1, 0, 1]).to("lazy")
    acc = w
    reads = 3 * host_eval.MAX_CONE_READS
    cuts = reads // (host_eval.MAX_CONE_READS + 1)
    for _ in range(2):
        metrics.reset()
        for _ in range(reads):
            acc = acc * 0.5 + 1.0
            assert bool((flag > 0).any())
        float(acc.sum())  # a cut (acc stays a value only the device holds): the next loop starts as this one did
        c = metrics.counters()
        assert c.get("host_eval_cone", 0) == reads - cuts, c
        assert c.get("execute_reason::item", 0) == reads + 1, c
    torch.testing.assert_close(acc.cpu(), _halvings(w.cpu(), 2 * reads))


def _halvings(x: torch.Tensor, n: int) -> torch.Tensor:
    for _ in range(n):
        x = x * 0.5 + 1.0
    return x
