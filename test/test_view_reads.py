"""Reading a view of device data (a gradient after a step) downloads and views on the host.

Before ``lazy_core/view_reads.py``, every ``p.grad.cpu()`` after ``mark_step()`` compiled
and ran a graph of its view chain (``t(t(x))``, ``view(x)``): one execution per
parameter. These tests check the values against eager for each pure view op and for
chains of them, that no graph runs, and that reads which must run a graph still do.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import lazy_core


@pytest.fixture(autouse=True)
def _host_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads on the host are on by default; the suite's conftest turns them off."""
    monkeypatch.setenv("LAZY_HOST_EVAL", "1")


_VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "t": lambda x: x[0].t(),
    "t_t": lambda x: x[0].t().t(),
    "transpose": lambda x: x.transpose(0, 2),
    "permute": lambda x: x.permute(2, 0, 1),
    "mT": lambda x: x.mT,
    "view": lambda x: x.view(4, 15),
    "reshape_flatten": lambda x: x.reshape(-1),
    "unsqueeze_squeeze": lambda x: x.unsqueeze(1).squeeze(1).unsqueeze(-1),
    "select": lambda x: x[2],
    "select_negative": lambda x: x[:, -1],
    "slice_step": lambda x: x[1::2, :, ::3],
    "narrow": lambda x: x.narrow(2, 1, 3),
    "expand": lambda x: x[:, :1].expand(4, 6, 5),
    "diagonal": lambda x: x.diagonal(0, 1, 2),
    "diagonal_offset": lambda x: x.diagonal(-1, 1, 2),
    "unfold": lambda x: x.unfold(2, 2, 1),
    "movedim": lambda x: x.movedim(0, -1),
    "unflatten": lambda x: x.unflatten(2, (5, 1)),
    "chain": lambda x: x[1:3].reshape(2, 15).t()[3::2].unsqueeze(0).expand(2, 6, 2),
}


def _base() -> torch.Tensor:
    return torch.arange(60, dtype=torch.float32).reshape(4, 3, 5) * 0.5 - 7


@pytest.mark.parametrize("name", sorted(_VIEWS))
def test_a_view_of_device_data_reads_on_the_host(backend: lazy_core.BackendImpl, name: str) -> None:
    view = _VIEWS[name]
    x = _base()
    lx = x.to("lazy") * 1  # computed, so the base is a graph result
    v = view(lx)
    lazy_core.mark_step()
    lazy_core.metrics.reset()
    got = v.cpu()
    expected = view(x)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    assert torch.equal(got, expected)
    assert lazy_core.metrics.counter("host_view_read") == 1
    assert lazy_core.metrics.counter("execute") == 0


def test_gradients_read_after_a_step_run_no_graph(backend: lazy_core.BackendImpl) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    lazy = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3)).to("lazy")
    lazy.load_state_dict(model.state_dict())
    x = torch.randn(4, 6)
    model(x).square().mean().backward()
    lazy(x.to("lazy")).square().mean().backward()
    lazy_core.mark_step()
    lazy_core.metrics.reset()
    for p, q in zip(model.parameters(), lazy.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
    assert lazy_core.metrics.counter("execute") == 0
    assert lazy_core.metrics.counter("host_view_read") >= 2  # both weights' t(t(mm)) at least


def test_a_view_read_sees_a_later_write_to_its_base(backend: lazy_core.BackendImpl) -> None:
    x = _base()[0]
    base = x.to("lazy") * 1
    v = base.t()
    lazy_core.mark_step()
    base.add_(1)  # pending: the read must run it, not view the old buffer
    assert torch.equal(v.cpu(), (x + 1).t())
    v.mul_(2)  # a write through the view reaches the base
    lazy_core.mark_step()
    assert torch.equal(base.cpu(), (x + 1) * 2)
    assert torch.equal(v.cpu(), ((x + 1) * 2).t())


def test_a_view_read_with_other_pending_work_runs_it(backend: lazy_core.BackendImpl) -> None:
    x = _base()
    base = x.to("lazy") * 1
    v = base[1]
    lazy_core.mark_step()
    other = base.sum()  # pending work a read runs with it, as every read does
    lazy_core.metrics.reset()
    assert torch.equal(v.cpu(), x[1])
    assert lazy_core.metrics.counter("host_view_read") == 0
    assert lazy_core.metrics.counter("execute") == 1
    assert other.item() == pytest.approx(x.sum().item())


def test_host_eval_off_makes_the_backend_answer(backend: lazy_core.BackendImpl,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_HOST_EVAL", "0")
    x = _base()
    v = (x.to("lazy") * 1).permute(2, 0, 1)
    lazy_core.mark_step()
    lazy_core.metrics.reset()
    assert torch.equal(v.cpu(), x.permute(2, 0, 1))
    assert lazy_core.metrics.counter("host_view_read") == 0
    assert lazy_core.metrics.counter("execute") == 1


def test_views_that_depend_on_layout_still_run_a_graph(backend: lazy_core.BackendImpl) -> None:
    x = _base()
    base = x.to("lazy") * 1
    v = base.as_strided((3, 4), (2, 5), 1)
    lazy_core.mark_step()
    lazy_core.metrics.reset()
    assert torch.equal(v.cpu(), x.as_strided((3, 4), (2, 5), 1))
    assert lazy_core.metrics.counter("host_view_read") == 0


def test_a_small_view_of_a_large_buffer_is_cut_out_on_the_device(backend: lazy_core.BackendImpl) -> None:
    x = torch.arange(1 << 19, dtype=torch.float32).reshape(512, 1024)  # 2 MiB
    base = x.to("lazy") * 1
    row = base[3]
    lazy_core.mark_step()
    lazy_core.metrics.reset()
    assert torch.equal(row.cpu(), x[3])
    assert lazy_core.metrics.counter("host_view_read") == 0


def _channels_last(shape: tuple[int, ...]) -> torch.Tensor:
    return (torch.arange(float(torch.Size(shape).numel())).reshape(shape) * 0.5 - 3).contiguous(
        memory_format=torch.channels_last)


def _conv_output(device: str) -> torch.Tensor:
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last).to(device)
    return conv(_channels_last((2, 3, 6, 6)).div(50).to(device))


#: Each: the base on a device (a graph result, an upload), and the view chain read after
#: ``mark_step``; the base is not contiguous and the chain's ``view`` passes only on its layout.
_VIEWS_OF_LAID_OUT_BASES: dict[str, tuple[Callable[[str], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "transposed_result_t_view": (lambda d: _base()[0].to(d).t() * 2, lambda b: b.t().view(-1)),
    "transposed_result_t_view_slice": (lambda d: _base()[0].to(d).t() * 2, lambda b: b.t().view(5, 3)[1:4]),
    "channels_last_upload_nhwc_view": (lambda d: _channels_last((2, 3, 4, 2)).to(d),
                                       lambda b: b.permute(0, 2, 3, 1).view(-1)),
    "channels_last_upload_nhwc_rows": (lambda d: _channels_last((2, 3, 4, 2)).to(d),
                                       lambda b: b.permute(0, 2, 3, 1).view(2, 4, 6)),
    "channels_last_upload_nhwc_view_slice": (lambda d: _channels_last((2, 3, 4, 2)).to(d),
                                             lambda b: b.permute(0, 2, 3, 1).view(-1)[3:7]),
    "channels_last_upload_nhwc_reshape": (lambda d: _channels_last((2, 3, 4, 2)).to(d),
                                          lambda b: b.permute(0, 2, 3, 1).reshape(2, 24)),
    "channels_last_conv_nhwc_flat": (_conv_output, lambda b: b.permute(0, 2, 3, 1).view(2, -1)),
}


@pytest.mark.parametrize("name", sorted(_VIEWS_OF_LAID_OUT_BASES))
def test_a_view_of_a_non_contiguous_base_reads_on_the_host(cpu_backend: lazy_core.BackendImpl, name: str) -> None:
    """``b = x.t() * 2; mark_step(); b.t().view(-1).cpu()`` raised "view size is not compatible
    with input tensor's size and stride": the host replayed ``view`` on the downloaded base,
    which comes back contiguous, not in the leaf's (transposed, channels-last) layout on which
    the traced ``view`` passed. Replayed as ``reshape``, it reads eager's values
    (lazy_core/view_reads.py ``apply``)."""
    make_base, view = _VIEWS_OF_LAID_OUT_BASES[name]
    expected = view(make_base("cpu"))
    base = make_base("lazy")
    v = view(base)
    assert v.stride() == expected.stride() and base.stride() == make_base("cpu").stride()
    lazy_core.mark_step()
    lazy_core.metrics.reset()
    got = v.cpu()
    assert got.shape == expected.shape and got.stride() == expected.stride()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
    assert lazy_core.metrics.counter("host_view_read") == 1
    assert lazy_core.metrics.counter("execute") == 0
