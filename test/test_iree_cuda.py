"""iree-cuda: compiling needs no GPU (runs everywhere); executing needs one (skips elsewhere)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import backend_unavailable_reason, use_backend

import lazy_core
from lazy_mlir.backends.disk_cache import DiskCache
from lazy_mlir.backends.iree import IreeBackend


def _small_graph() -> object:
    """Trace a small MLP step on iree-cpu and hand back its graph."""
    use_backend("iree-cpu")
    x, w = torch.randn(8, 16), torch.randn(16, 4, requires_grad=True)
    lw = w.detach().to("lazy").requires_grad_()
    loss = F.log_softmax(x.to("lazy") @ lw, dim=1).mean()
    loss.backward()
    lazy_core.sync([loss, lw.grad])
    return lazy_core.executor().last_graph()


def test_cuda_target_compiles_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")
    graph = _small_graph()
    cuda = IreeBackend("iree-cuda", disk_cache=DiskCache("iree", enabled=False))
    assert cuda.config.target.target_backend == "cuda"
    vmfb = cuda.compile_to_vmfb(cuda.lower(graph))
    # A VM flatbuffer holding a CUDA (NVPTX) executable.
    assert len(vmfb) > 1000 and b"cuda-nvptx-fb" in vmfb
    assert cuda.cache_key() != IreeBackend("iree-cpu").cache_key()


def test_cuda_reason_names_the_missing_device() -> None:
    reason = IreeBackend("iree-cuda").unavailable_reason()
    if reason is not None:
        assert "cuda" in reason.lower()


@pytest.fixture
def cuda() -> lazy_core.BackendImpl:
    reason = backend_unavailable_reason("iree-cuda")
    if reason:
        pytest.skip(f"no CUDA GPU: {reason}")
    backend = use_backend("iree-cuda")
    yield backend
    lazy_core.mark_step()


def test_cuda_executes_like_torch(cuda, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")
    x, w = torch.randn(32, 64, dtype=torch.float64), torch.randn(64, 16, dtype=torch.float64)
    got = (x.to("lazy") @ w.to("lazy")).tanh().sum(0)
    torch.testing.assert_close(got.cpu(), (x @ w).tanh().sum(0))
    h = torch.randn(5, 6).half()
    torch.testing.assert_close((h.to("lazy") * h.to("lazy")).cpu(), h * h)


def test_cuda_training_steps_stay_on_device(cuda, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3))
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3))
    model.load_state_dict(ref.state_dict())
    model = model.to("lazy")
    opt, ref_opt = torch.optim.Adam(model.parameters(), 1e-2), torch.optim.Adam(ref.parameters(), 1e-2)
    lazy_core.metrics.reset()
    for _ in range(5):
        x, y = torch.randn(7, 10), torch.randint(0, 3, (7,))
        for m, o, dev in ((model, opt, "lazy"), (ref, ref_opt, "cpu")):
            F.cross_entropy(m(x.to(dev)), y.to(dev)).backward()
            o.step()
            o.zero_grad()
        lazy_core.mark_step()
    lazy_core.wait_device_ops()
    assert lazy_core.metrics.counter("transfer_to_host_bytes") == 0
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)
