"""lazy_core.tiering: a graph seen for the first time runs op by op; it compiles when it recurs.

The suite runs with tiering off (conftest: LAZY_TIERED=0, so tests check compiled code
from the first run); these tests turn it on, as users have it on reference and iree-cpu.
Shapes here are odd on purpose (13, 29, 7): the session shares one disk cache, and a graph
another test compiled would be loaded instead of interpreted.
"""

from __future__ import annotations

import weakref

import pytest
import torch

import lazy_core
from backends.iree import IreeBackend
from lazy_core import eager_backend as interpreter
from lazy_core import metrics, tiering
from lazy_core.eager_backend import EagerBackend


@pytest.fixture
def tiered(monkeypatch: pytest.MonkeyPatch, cpu_backend: lazy_core.BackendImpl) -> lazy_core.BackendImpl:
    monkeypatch.setenv("LAZY_TIERED", "1")
    return cpu_backend


def _count(name: str) -> int:
    return metrics.counter(name)


def _model() -> torch.nn.Module:
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(29, 13), torch.nn.Tanh(), torch.nn.Linear(13, 7))


def test_a_training_loop_compiles_its_steady_step_once_and_never_its_first(tiered) -> None:
    """Step 1 (it makes AdamW's state) and step 2 (the steady graph, first seen) run interpreted;
    step 3 compiles the steady graph; steps 4-5 reuse it. Every step matches eager."""
    ref, lazy = _model(), _model().to("lazy")
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=0.05)
    opt = torch.optim.AdamW(lazy.parameters(), lr=0.05)
    compiles = []
    for _ in range(5):
        x, y = torch.randn(11, 29), torch.randn(11, 7)
        loss_ref = torch.nn.functional.mse_loss(ref(x), y)
        loss_ref.backward()
        opt_ref.step()
        opt_ref.zero_grad()
        loss = torch.nn.functional.mse_loss(lazy(x.to("lazy")), y.to("lazy"))
        loss.backward()
        opt.step()
        opt.zero_grad()
        lazy_core.mark_step()
        torch.testing.assert_close(loss.cpu(), loss_ref)
        compiles.append((_count("interpreted_first_sight"), _count("compile")))
    assert compiles == [(1, 0), (2, 0), (2, 1), (2, 1), (2, 1)], compiles
    for p, q in zip(lazy.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q.detach())


def test_a_second_sight_is_not_reported_as_a_recompile(tiered) -> None:
    """Diagnostics count compiles from cache misses: the interpreted first sight is none, so the
    compile at the second sight is the site's first compile, not a recompile of an evicted graph."""
    x = torch.randn(13, 7).to("lazy")
    for _ in range(3):
        (x.sin() * 3).cpu()
    assert _count("interpreted_first_sight") == 1
    assert _count("compile") == 1
    assert _count("recompile") == 0, metrics.counters()


def test_a_warm_process_loads_a_graph_it_sees_first_from_the_disk_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first sight the persistent cache holds (an earlier process compiled it) is loaded,
    not interpreted: a warm process runs compiled code from its first step. (iree-cpu: the
    reference backend's JIT-compiled code has no persistent cache.)"""
    from conftest import use_backend

    use_backend("iree-cpu")
    monkeypatch.setenv("LAZY_TIERED", "1")
    def f(t: torch.Tensor) -> torch.Tensor:  # one source line: locations are part of the disk key
        return (t.exp() - 0.5).cpu()

    x = torch.linspace(-2, 2, 13 * 5).reshape(13, 5)
    lx = x.to("lazy")
    for _ in range(2):
        torch.testing.assert_close(f(lx), x.exp() - 0.5)
    assert (_count("interpreted_first_sight"), _count("compile")) == (1, 1)
    lazy_core.executor().clear_cache()  # a new process: nothing in memory, nothing seen
    metrics.reset()
    torch.testing.assert_close(f(lx), x.exp() - 0.5)
    assert (_count("interpreted_first_sight"), _count("persistent_cache_hit")) == (0, 1), dict(metrics.counters())


def test_a_program_at_ever_new_sizes_still_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seen means the same graph family where shapes are dynamic: a loop whose sizes never
    repeat is interpreted once, then compiles and goes dynamic, not interpreted forever."""
    from conftest import use_backend

    backend = use_backend("iree-cpu")
    monkeypatch.setenv("LAZY_TIERED", "1")
    assert lazy_core.executor()._dynamic.enabled(backend)
    w = torch.randn(29, 7)
    for n in (3, 4, 5, 6, 7, 8):
        x = torch.randn(n, 29)
        got = (x.to("lazy") @ w.to("lazy")).relu().cpu()
        torch.testing.assert_close(got, (x @ w).relu())
    assert _count("interpreted_first_sight") == 1, metrics.counters()
    assert _count("dynamic_reuse") >= 3, metrics.counters()
    lazy_core.mark_step()


def test_tiering_is_on_by_default_only_where_memory_is_the_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.reference import ReferenceBackend

    monkeypatch.delenv("LAZY_TIERED", raising=False)
    monkeypatch.delenv("LAZY_STRICT", raising=False)
    monkeypatch.delenv("LAZY_DUMP_DIR", raising=False)
    cpu, vulkan, cuda = IreeBackend("iree-cpu"), IreeBackend("iree-vulkan"), IreeBackend("iree-cuda")
    assert tiering.enabled(cpu) and tiering.enabled(ReferenceBackend())
    assert not tiering.enabled(vulkan) and not tiering.enabled(cuda) and not tiering.enabled(EagerBackend())
    monkeypatch.setenv("LAZY_STRICT", "1")  # compile failures must show: compile on first sight
    assert not tiering.enabled(cpu)
    monkeypatch.delenv("LAZY_STRICT")
    monkeypatch.setenv("LAZY_DUMP_DIR", "/nonexistent")  # every graph's MLIR is wanted
    assert not tiering.enabled(cpu)
    monkeypatch.delenv("LAZY_DUMP_DIR")
    monkeypatch.setenv("LAZY_TIERED", "on")
    assert tiering.enabled(vulkan)
    monkeypatch.setenv("LAZY_TIERED", "auto")
    assert tiering.enabled(cpu) and not tiering.enabled(vulkan)
    monkeypatch.setenv("LAZY_TIERED", "sometimes")
    with pytest.raises(lazy_core.config.ConfigError, match="LAZY_TIERED"):
        tiering.enabled(cpu)


def test_the_interpreter_frees_each_intermediate_after_its_last_reader(eager_backend, monkeypatch) -> None:
    """A first sight interprets whole training steps: holding every intermediate to the end
    would take several times eager's memory. Each one is released after its last reader."""
    alive_at_end: list[int] = []
    made: list[weakref.ref] = []

    class Watching(dict):
        def get(self, op, default=None):
            kernel = super().get(op, default)

            def run(*args, **kwargs):
                out = kernel(*args, **kwargs)
                if isinstance(out, torch.Tensor):
                    made.append(weakref.ref(out))
                alive_at_end[:] = [sum(r() is not None for r in made)]
                return out
            return run

    monkeypatch.setattr(interpreter, "KERNELS", Watching(interpreter.KERNELS))
    x = torch.randn(64, 64).to("lazy")
    y = x
    for _ in range(20):
        y = (y * 1.01).tanh()  # 40 intermediates, each read once
    lazy_core.mark_step()
    lazy_core.wait_device_ops()
    assert len(made) == 40
    # The last kernel's input and output, and x itself (an argument), at most.
    assert alive_at_end[0] <= 3, alive_at_end
