"""iree-cpu's performance defaults keep results equal to eager PyTorch.

The CPU defaults (``backends.iree.config``) rewrite convolutions as
im2col + matmul. That changes the code for every convolution, forward and
backward, so each convolution shape family a model may use (1-d, 2-d, 3-d,
strides, dilation, padding, groups, channels of one) is trained one step
here, gradients included, and compared with the CPU. A transposed
convolution is checked forward only: its ``convolution_backward`` does not
lower to IREE with or without these flags (torch-mlir leaves it illegal),
so in a training step it runs eagerly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import use_backend

import lazy_core
from lazy_mlir.backends.iree import IreeBackend
from lazy_mlir.backends.iree.backend import clear_memory_caches
from lazy_mlir.backends.iree.config import CPU, make_config

CONVS = {
    "conv1d": (lambda: torch.nn.Conv1d(3, 5, 3, padding=1), (4, 3, 17)),
    "conv2d_stride_dilation": (lambda: torch.nn.Conv2d(3, 6, 3, stride=2, dilation=2, padding=2), (2, 3, 15, 13)),
    "conv2d_groups": (lambda: torch.nn.Conv2d(4, 8, 3, groups=2, bias=False), (2, 4, 9, 9)),
    "conv2d_depthwise": (lambda: torch.nn.Conv2d(4, 4, 3, groups=4, padding=1), (2, 4, 8, 8)),
    "conv2d_1x1": (lambda: torch.nn.Conv2d(5, 7, 1), (3, 5, 6, 6)),
    "conv2d_single_channel": (lambda: torch.nn.Conv2d(1, 8, 3, padding=1), (4, 1, 12, 12)),
    "conv3d": (lambda: torch.nn.Conv3d(2, 3, 2), (2, 2, 5, 5, 5)),
}


def test_transposed_convolution_forward_like_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")
    use_backend("iree-cpu")
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = conv(x)
        got = conv.to("lazy")(x.to("lazy")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _step(conv: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One SGD step's loss and the updated parameters (ReLU + max-pool as in a CNN)."""
    opt = torch.optim.SGD(conv.parameters(), lr=0.1, momentum=0.9)
    y = conv(x)
    if y.dim() == 4:
        y = F.max_pool2d(F.relu(y), 2, ceil_mode=True)
    loss = (y * y).mean()
    loss.backward()
    opt.step()
    return loss, [p for p in conv.parameters()]


@pytest.mark.parametrize("name", sorted(CONVS))
def test_convolutions_train_like_eager(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")  # a compile failure must fail, not run eagerly
    use_backend("iree-cpu")
    make, shape = CONVS[name]
    torch.manual_seed(0)
    ref = make()
    lazy = make().to("lazy")
    lazy.load_state_dict(ref.state_dict())
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    want_loss, want_params = _step(ref, x)
    got_loss, got_params = _step(lazy, x.to("lazy"))
    lazy_core.mark_step()
    torch.testing.assert_close(got_loss.cpu(), want_loss.detach(), rtol=1e-4, atol=1e-5)
    for got, want in zip(got_params, want_params):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)


def test_cpu_defaults_use_im2col_and_users_can_turn_it_off() -> None:
    """The default is in the flags (so in the cache key); ``=false`` replaces it."""
    assert "--iree-global-opt-use-im2col-for-convs" in IreeBackend("iree-cpu").config.compile_flags
    off = make_config(CPU, ["--iree-global-opt-use-im2col-for-convs=false"]).compile_flags
    assert "--iree-global-opt-use-im2col-for-convs" not in off
    assert "--iree-global-opt-use-im2col-for-convs=false" in off
    assert IreeBackend("iree-cpu").cache_key() != IreeBackend("iree-cpu", flags=list(off)).cache_key()


# -- buffer donation (backend side; the executor does not ask for it yet) ------------------------


def _sgd_graph(backend: IreeBackend, shape: tuple[int, ...] = (4, 5)):
    """A momentum-SGD update traced lazily and lowered, with its argument and result indices.

    Returns (computation, graph inputs, {"p","m","g"} -> argument index,
    {"p","m"} -> result index, CPU tensors p, m, g).
    """
    from lazy_core.graph import build_graph

    gen = torch.Generator().manual_seed(5)
    host = {k: torch.randn(*shape, generator=gen) for k in "pmg"}
    lazy = {k: v.to("lazy") for k, v in host.items()}
    m2 = lazy["m"] * 0.9 + lazy["g"]
    p2 = lazy["p"] - 0.1 * m2
    roots = [p2._lz_value(), m2._lz_value()]
    graph = build_graph(roots)
    comp = backend.lower(graph)
    from lazy_core.ir import DeviceData

    # Argument indices as the computation numbers them: device data first
    # (graph.ArgumentLayout), then the packed scalar parameters.
    data = [leaf for leaf in graph.inputs if isinstance(leaf, DeviceData)]
    leaves = {k: lazy[k]._lz_value().node for k in "pmg"}
    args = {k: next(i for i, leaf in enumerate(data) if leaf is node) for k, node in leaves.items()}
    return comp, graph, args, {"p": 0, "m": 1}, host


def _upload_inputs(backend: IreeBackend, graph, values: dict[int, torch.Tensor]) -> list:
    """Fresh device data for every argument: ``values`` by device-data index, then the scalar packs."""
    device = backend.default_device()
    data, packs = graph.argument_layout.arguments(graph.inputs)
    missing = set(range(len(data))) - set(values)
    assert not missing, f"device-data arguments {sorted(missing)} have no value"
    out = [backend.make_backend_data(values[i], device) for i in range(len(data))]
    out += [backend.make_backend_data(torch.tensor(v, dtype=dtype), device) for v, dtype in packs]
    return out


def _sgd_eager(p: torch.Tensor, m: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m2 = m * 0.9 + g
    return p - 0.1 * m2, m2


def test_donated_results_overwrite_their_arguments_in_place(tmp_path) -> None:
    from lazy_mlir.backends.disk_cache import DiskCache

    use_backend("iree-cpu")  # traces on iree-cpu; the backend below compiles into tmp_path
    backend = IreeBackend("iree-cpu", disk_cache=DiskCache("iree", str(tmp_path)))
    comp, graph, a, r, host = _sgd_graph(backend)
    donate = {a["p"]: r["p"], a["m"]: r["m"]}
    [plain] = backend.compile([comp])
    [handle] = backend.compile([comp], donated=[donate])
    assert handle.donated == donate and not plain.donated
    assert handle.key != plain.key  # donation is part of the cache key
    device = backend.default_device()

    p, m, g = host["p"], host["m"], host["g"]
    args = _upload_inputs(backend, graph, {a["p"]: p, a["m"]: m, a["g"]: g})
    for _ in range(3):  # three training steps, each feeding the last one's results back
        results = backend.execute_computation(handle, args, device)
        p, m = _sgd_eager(p, m, g)
        # In place: the results are the argument buffers, now holding the new values.
        assert results[r["p"]].handle is args[a["p"]].handle
        assert results[r["m"]].handle is args[a["m"]].handle
        torch.testing.assert_close(backend.to_host(results[r["p"]]), p)
        torch.testing.assert_close(backend.to_host(results[r["m"]]), m)
        args = list(args)
        args[a["p"]], args[a["m"]] = results[r["p"]], results[r["m"]]

    # A second backend on the same disk cache loads the donating module and its pattern.
    again = IreeBackend("iree-cpu", disk_cache=DiskCache("iree", str(tmp_path)))
    clear_memory_caches()
    [loaded] = again.compile([comp], donated=[donate])
    assert loaded.donated == donate


def test_a_donated_buffer_passed_twice_is_read_before_it_is_written() -> None:
    """The same buffer as the donated ``p`` and as ``g``: ``g`` gets a private copy."""
    backend = use_backend("iree-cpu")
    comp, graph, a, r, host = _sgd_graph(backend)
    [handle] = backend.compile([comp], donated=[{a["p"]: r["p"]}])
    args = _upload_inputs(backend, graph, {a["p"]: host["p"], a["m"]: host["m"], a["g"]: host["g"]})
    args[a["g"]] = args[a["p"]]
    results = backend.execute_computation(handle, args, backend.default_device())
    want_p, want_m = _sgd_eager(host["p"], host["m"], host["p"])
    torch.testing.assert_close(backend.to_host(results[r["p"]]), want_p)
    torch.testing.assert_close(backend.to_host(results[r["m"]]), want_m)


def test_donation_skips_pairs_iree_cannot_alias() -> None:
    from lazy_mlir.backends.iree.donation import donate_arguments, normalize

    mlir = """
module {
  func.func @f(%arg0: !torch.vtensor<[3],f32>, %arg1: !torch.vtensor<[2],f32>) -> (!torch.vtensor<[3],f32>, !torch.vtensor<[2],f32>) {
    %int1 = torch.constant.int 1
    %0 = torch.aten.add.Tensor %arg0, %arg0, %int1 : !torch.vtensor<[3],f32>, !torch.vtensor<[3],f32>, !torch.int -> !torch.vtensor<[3],f32>
    return %0, %arg1 : !torch.vtensor<[3],f32>, !torch.vtensor<[2],f32>
  }
}
"""
    # arg1 -> result 0: another shape; arg1 -> result 1: the argument itself, unchanged.
    assert donate_arguments(mlir, "f", {1: 0})[1] == {}
    assert donate_arguments(mlir, "f", {1: 1})[1] == {}
    text, applied = donate_arguments(mlir, "f", {0: 0})
    assert applied == {0: 0}
    assert "%arg0: !torch.tensor<[3],f32>" in text and "torch.overwrite.tensor.contents" in text
    with pytest.raises(ValueError):
        normalize({0: 0, 1: 0}, 2, 2)
    with pytest.raises(ValueError):
        normalize({2: 0}, 2, 2)


def test_a_donated_value_read_elsewhere_is_computed_once_behind_a_barrier() -> None:
    """Adam's parameter update reads the new moment that is donated into the old one's buffer.
    IREE may clone the moment's elementwise chain into the update's dispatch and recompute it
    from the argument after another dispatch wrote the new value there (a tiny RoBERTa's
    one-graph AdamW step on iree-vulkan: every parameter off by 0.67 lr). The new value, and a
    returned intermediate of the chain, reach their readers only through
    ``util.optimization_barrier``; values no one else reads are left alone."""
    from lazy_mlir.backends.iree.donation import donate_arguments

    mlir = """
module {
  func.func @f(%arg0: !torch.vtensor<[4],f32>, %arg1: !torch.vtensor<[4],f32>, %arg2: !torch.vtensor<[4],f32>) -> (!torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>) {
    %int1 = torch.constant.int 1
    %0 = torch.aten.mul.Tensor %arg0, %arg2 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32> -> !torch.vtensor<[4],f32>
    %1 = torch.aten.add.Tensor %0, %arg2, %int1 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
    %2 = torch.aten.sub.Tensor %arg1, %1, %int1 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>
    return %1, %2, %0 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>
  }
}
"""
    text, applied = donate_arguments(mlir, "f", {0: 0})
    assert applied == {0: 0}
    lines = text.splitlines()
    barriers = [ln for ln in lines if "util.optimization_barrier" in ln]
    assert len(barriers) == 2, text  # the new value (%1, read by the sub) and the returned %0
    # The sub and the return read the barriers' results, not the values themselves.
    [sub] = [ln for ln in lines if "torch.aten.sub.Tensor" in ln]
    [overwrite] = [ln for ln in lines if "torch.overwrite.tensor.contents" in ln]
    backs = [ln.split("=")[0].strip() for ln in lines if "torch_c.from_builtin_tensor" in ln]
    assert any(b in sub.split("=", 1)[1] for b in backs), text
    assert any(b in overwrite for b in backs), text
    # Only the donated chain: an update read by no one else keeps its plain form.
    plain, applied = donate_arguments(mlir.replace("return %1, %2, %0", "return %1, %arg1, %arg2").replace(
        "%2 = torch.aten.sub.Tensor %arg1, %1, %int1 : !torch.vtensor<[4],f32>, !torch.vtensor<[4],f32>, !torch.int -> !torch.vtensor<[4],f32>\n", ""),
        "f", {0: 0})
    assert applied == {0: 0} and "optimization_barrier" not in plain, plain


def test_an_integer_state_is_not_donated_and_does_not_cost_the_others_their_donation() -> None:
    """IREE's torch input fails on a mutable integer argument, and the whole donating compile with
    it: a step updating BatchNorm's ``num_batches_tracked`` (int64) donated none of its momentum
    buffers. Integer pairs are left out before compiling."""
    use_backend("iree-cpu")
    for dtype in (torch.int64, torch.int32, torch.uint8):
        lazy_core.metrics.reset()
        count = torch.zeros(4, dtype=dtype).to("lazy")
        momentum = torch.ones(16).to("lazy")
        for _ in range(3):
            count.add_(1)
            momentum.mul_(0.5).add_(1.0)
            lazy_core.mark_step()
        c = lazy_core.metrics.counters()
        assert c.get("iree_donation_compile_error", 0) == 0, (dtype, c)
        assert c.get("iree_donating_graphs", 0) >= 1, (dtype, c)
        assert count.cpu().tolist() == [3] * 4
        torch.testing.assert_close(momentum.cpu(), torch.full((16,), 1.875))


#: (name, program of one lazy tensor ``a`` whose first result may take ``a``'s buffer, donated?)
#: IREE 3.13 writes a donated result in place without ordering the other reads of
#: the old value first, so only pure elementwise chains may donate.
HAZARDS = [
    ("elementwise", lambda a: [a * 0.5 + 1.0], True),
    ("elementwise, intermediate also returned", lambda a: [((d := a * 2).abs().sqrt() + 1), d], True),
    ("new value also read by another result", lambda a: [(n := a * 0.9 + 0.1), n / (n.abs() + 1.0)], True),
    ("old value read by another result", lambda a: [a * 2, -a], False),
    ("old value returned", lambda a: [a * 2, a], False),
    ("transpose into itself", lambda a: [a.t() * 1.5], False),
    ("elementwise then transpose", lambda a: [(a * 2).t() + 1], False),
    ("matmul into an operand", lambda a: [a @ a], False),
    ("flip", lambda a: [a.flip(0) + 0.5], False),
    ("cumsum, then an old-value reduction", lambda a: [a.cumsum(0), a.max(1).values], False),
    ("reduction on the way", lambda a: [a - a.mean()], False),
]


@pytest.mark.parametrize(("name", "program", "donates"), HAZARDS, ids=[h[0] for h in HAZARDS])
def test_donation_only_where_iree_cannot_read_the_overwritten_value(name: str, program, donates: bool) -> None:
    from lazy_core.graph import build_graph
    from lazy_core.ir import DeviceData

    use_backend("iree-cpu")
    backend = IreeBackend("iree-cpu")
    host = torch.randn(16, 16, generator=torch.Generator().manual_seed(2))
    a = host.to("lazy")
    leaf = a._lz_value().node
    graph = build_graph([t._lz_value() for t in program(a)])
    comp = backend.lower(graph)
    assert [x for x in graph.inputs if isinstance(x, DeviceData)] == [leaf]
    [handle] = backend.compile([comp], donated=[{0: 0}])  # device data come first: ``a`` is argument 0
    assert bool(handle.donated) == donates
    device = backend.default_device()
    args = _upload_inputs(backend, graph, {0: host})
    results = backend.execute_computation(handle, args, device)
    for got, want in zip(results, program(host)):
        torch.testing.assert_close(backend.to_host(got), want)
