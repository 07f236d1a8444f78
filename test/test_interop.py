"""Interop that users hit at once (issue 14, item 10; ``lazy_core.interop``).

``Module.to("lazy")`` with a CPU output of the module alive, safetensors and
``save_pretrained`` on lazy models, ``torch.load(..., map_location="lazy")``:
each behaves as on the CPU (or as ``.to("cuda")`` does).
"""

from __future__ import annotations

import os

import pytest
import torch
from conftest import requested_backends, use_backend

import lazy_core


@pytest.fixture(params=[b for b in requested_backends() if b in ("eager", "reference")])
def some_backend(request: pytest.FixtureRequest) -> lazy_core.BackendImpl:
    return use_backend(request.param)


def test_module_to_lazy_while_a_cpu_output_is_alive(some_backend: lazy_core.BackendImpl) -> None:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(64, 2))
    x = torch.randn(2, 3, 6, 6)
    out = m(x)  # its autograd graph holds the CPU weights
    weight = m[0].weight
    m.to("lazy")
    assert m[0].weight is weight and weight.device.type == "lazy"  # the same Parameter, as with cuda
    torch.testing.assert_close(m(x.to("lazy")).cpu(), out.detach())
    # The stale CPU graph cannot send gradients to the moved parameters silently.
    with pytest.raises(RuntimeError, match="swap_tensors|moved to the lazy device"):
        out.sum().backward()
    # Training on lazy works afterwards.
    m(x.to("lazy")).sum().backward()
    assert m[0].weight.grad is not None and m[0].weight.grad.device.type == "lazy"


def test_module_to_lazy_keeps_tied_parameters_tied(some_backend: lazy_core.BackendImpl) -> None:
    a, b = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)
    b.weight = a.weight
    m = torch.nn.Sequential(a, b)
    held = m(torch.randn(1, 3))  # noqa: F841 - holds the weight, forcing the fallback swap
    m.to("lazy")
    assert m[0].weight is m[1].weight and m[0].weight.device.type == "lazy"


def test_data_ptr_and_storage_identify_sharing(eager_backend: lazy_core.BackendImpl) -> None:
    x = torch.randn(3, 4).to("lazy")
    y = torch.randn(3, 4).to("lazy")
    assert x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    assert x.untyped_storage().nbytes() == 48
    assert x[1].data_ptr() - x.data_ptr() == 16
    assert x.t().untyped_storage() == x.untyped_storage()
    assert x[:, 2].storage_offset() == 2
    # Never overlapping: y starts after x ends.
    ends = sorted([(x.data_ptr(), x.data_ptr() + 48), (y.data_ptr(), y.data_ptr() + 48)])
    assert ends[0][1] <= ends[1][0]


def test_safetensors_save_file_round_trip(eager_backend: lazy_core.BackendImpl, tmp_path: os.PathLike) -> None:
    from safetensors.torch import load_file, save_file

    cpu = {"a": torch.randn(3, 4), "b": torch.arange(5)}
    save_file({k: v.to("lazy") for k, v in cpu.items()}, str(tmp_path / "x.safetensors"))
    back = load_file(str(tmp_path / "x.safetensors"))
    assert back.keys() == cpu.keys() and all(torch.equal(back[k], cpu[k]) for k in cpu)
    # Shared tensors are refused as on the CPU (same error, found by storage identity).
    w = torch.randn(2, 2)
    with pytest.raises(RuntimeError, match="share memory") as on_cpu:
        save_file({"p": w, "q": w}, str(tmp_path / "c.safetensors"))
    lw = w.to("lazy")
    with pytest.raises(RuntimeError, match="share memory") as on_lazy:
        save_file({"p": lw, "q": lw}, str(tmp_path / "l.safetensors"))
    assert str(on_cpu.value).replace("cpu", "X") == str(on_lazy.value).replace("lazy:0", "X")


def test_save_pretrained_with_tied_weights(eager_backend: lazy_core.BackendImpl, tmp_path: os.PathLike) -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=37, vocab_size=99, max_position_embeddings=16)
    torch.manual_seed(0)
    cpu_model = transformers.BertForMaskedLM(cfg).eval()
    cpu_model.save_pretrained(tmp_path / "cpu")
    lazy_model = transformers.BertForMaskedLM(cfg).eval()
    lazy_model.load_state_dict(cpu_model.state_dict())
    lazy_model.to("lazy")
    lazy_model.save_pretrained(tmp_path / "lazy")
    from safetensors.torch import load_file

    want = load_file(str(tmp_path / "cpu" / "model.safetensors"))
    got = load_file(str(tmp_path / "lazy" / "model.safetensors"))
    assert got.keys() == want.keys()  # the tied decoder weight is left out, as on the CPU
    assert all(torch.equal(got[k], want[k]) for k in want)
    reloaded = transformers.BertForMaskedLM.from_pretrained(tmp_path / "lazy").eval()
    ids = torch.tensor([[1, 5, 7, 2]])
    torch.testing.assert_close(reloaded(ids).logits, cpu_model(ids).logits)


def test_torch_load_map_location_lazy(eager_backend: lazy_core.BackendImpl, tmp_path: os.PathLike) -> None:
    base = torch.randn(4, 3)
    state = {"w": torch.randn(3), "t": base.t(), "row": base[2], "i": torch.arange(4)}
    torch.save(state, tmp_path / "a.pt")
    for location in ("lazy", torch.device("lazy"), {"cpu": "lazy"}):
        loaded = torch.load(tmp_path / "a.pt", map_location=location)
        for k, v in state.items():
            assert loaded[k].device.type == "lazy", k
            assert loaded[k].shape == v.shape and loaded[k].dtype == v.dtype
            assert torch.equal(loaded[k].cpu(), v), k
    # Into a lazy module, as users do.
    lin = torch.nn.Linear(3, 2)
    torch.save(lin.state_dict(), tmp_path / "lin.pt")
    lazy_lin = torch.nn.Linear(3, 2).to("lazy")
    lazy_lin.load_state_dict(torch.load(tmp_path / "lin.pt", map_location="lazy"))
    x = torch.randn(5, 3)
    torch.testing.assert_close(lazy_lin(x.to("lazy")).cpu(), lin(x))


def test_torch_save_of_lazy_tensors_loads_on_cpu(eager_backend: lazy_core.BackendImpl, tmp_path: os.PathLike) -> None:
    x = torch.randn(3).to("lazy") * 2
    torch.save({"x": x}, tmp_path / "b.pt")
    loaded = torch.load(tmp_path / "b.pt")
    assert loaded["x"].device.type == "cpu"
    torch.testing.assert_close(loaded["x"], x.cpu())


def _copies_and_checkpoints(dev: str, tmp_path: os.PathLike) -> list[tuple]:
    """What ``deepcopy`` and a ``torch.save``/``torch.load`` round trip keep of tensors made on ``dev``."""
    import copy

    torch.manual_seed(0)
    rows: list[tuple] = []
    w = torch.randn(3, device=dev, requires_grad=True)
    (w * 2).sum().backward()
    w.note = "kept"
    c = copy.deepcopy(w)
    rows.append(("tensor", isinstance(c, torch.nn.Parameter), getattr(c, "note", None), c.requires_grad, c.is_leaf,
                 c.grad is not None and torch.equal(c.grad.cpu(), w.grad.cpu())))
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(w * 2)
    p = torch.nn.Parameter(torch.randn(2, device=dev))
    (p * 3).sum().backward()
    p.no_decay = True
    q = copy.deepcopy(p)
    rows.append(("parameter", isinstance(q, torch.nn.Parameter), q.grad, getattr(q, "no_decay", None), q.requires_grad))
    m = copy.deepcopy(torch.nn.Linear(2, 2).to(dev))
    rows.append(("module", [isinstance(x, torch.nn.Parameter) for x in m.parameters()]))
    z = torch.zeros(2, device=dev)
    z.tag = [1]
    pair = copy.deepcopy([z, z])
    rows.append(("memo", pair[0] is pair[1], pair[0].tag))
    shallow = copy.copy(w)  # the same storage: a write through the copy is seen by ``w``
    with torch.no_grad():
        shallow.add_(1)
    rows.append(("copy", shallow.device == w.device, torch.equal(w.detach().cpu(), shallow.detach().cpu()),
                 shallow.requires_grad, shallow.is_leaf, getattr(shallow, "note", None)))
    rows.append(("copy parameter", isinstance(copy.copy(p), torch.nn.Parameter), copy.copy(w * 2).is_leaf))
    for i, obj in enumerate((w, p, {"a": p, "b": p})):
        path = os.path.join(tmp_path, f"{dev}{i}.pt")
        torch.save(obj, path)
        got = torch.load(path)  # weights_only, PyTorch's default
        if isinstance(got, dict):
            rows.append(("saved dict", got["a"] is got["b"], isinstance(got["a"], torch.nn.Parameter)))
        else:
            rows.append(("saved", isinstance(got, torch.nn.Parameter), getattr(got, "note", None),
                         getattr(got, "no_decay", None), got.requires_grad, got.device.type))
    return rows


def test_deepcopy_and_save_keep_what_eager_keeps(some_backend: lazy_core.BackendImpl, tmp_path: os.PathLike) -> None:
    """``copy.deepcopy`` of a lazy Parameter returned a plain tensor (``isinstance(q,
    nn.Parameter)`` False), dropped ``grad`` and attributes such as ``p.no_decay``, and copied a
    non-leaf tensor eager refuses; ``torch.save`` of a lazy Parameter loaded as a plain tensor
    without its attributes; ``copy.copy`` returned a detached CPU tensor. Each now keeps what the
    CPU keeps (``LazyTensor.__deepcopy__``, ``__copy__``, ``__reduce_ex__``). Views still do not share after a deepcopy: PyTorch clones ``lazy`` and
    ``xla`` tensors the same way."""
    assert _copies_and_checkpoints("lazy", tmp_path) == _copies_and_checkpoints("cpu", tmp_path)


def test_a_zero_dim_tensor_formats_as_its_number(eager_backend: lazy_core.BackendImpl) -> None:
    """``f"{loss:.4f}"`` raised "unsupported format string passed to LazyTensor.__format__"
    (found by the adversarial sweep): PyTorch formats a 0-d tensor as its number only when its
    type is exactly ``Tensor``. Other tensors keep eager's behavior."""
    for value in (torch.tensor(2.5) * 2, torch.tensor(7), torch.tensor(True)):
        lazy = value.to("lazy")
        for spec in (".3f", ">8", "", "e") if value.is_floating_point() else ("", ">4", "d" if value.dtype != torch.bool else ""):
            assert format(lazy, spec) == format(value, spec)
    assert f"{torch.ones(2).to('lazy')}" == str(torch.ones(2).to("lazy"))
    with pytest.raises(TypeError):
        format(torch.ones(2).to("lazy"), ".2f")


def test_a_tensor_built_from_zero_dim_lazy_tensors_reads_their_values(eager_backend: lazy_core.BackendImpl) -> None:
    """``torch.tensor([a[0], a[1]])`` of lazy elements raised "Could not run
    'aten::_local_scalar_dense' with arguments from the 'Lazy' backend" (found by the
    adversarial sweep): the constructor reads each element in C++ below Python dispatch.
    ``factories._local_scalar_dense`` is that read on the Lazy key."""
    for values in (torch.tensor([1.5, 2.5]) * 2, torch.tensor([3, -4]), torch.tensor([True, False])):
        a = values.to("lazy")
        assert torch.equal(torch.tensor([a[0], a[1]]), torch.tensor([values[0], values[1]]))
        got = torch.tensor([a[1]], device="lazy")
        assert got.device.type == "lazy" and torch.equal(got.cpu(), torch.tensor([values[1]]))


def test_views_of_a_normal_tensor_in_inference_mode(eager_backend: lazy_core.BackendImpl) -> None:
    """``x[0]``, ``x.view(8)`` or ``x.t()`` of a tensor made outside ``torch.inference_mode()``
    raised "Cannot set version_counter for inference tensor" inside it, and so did
    ``nn.MultiheadAttention`` in eval (found by the adversarial sweep). As eagerly, such a view
    is a normal tensor, and a new result is an inference tensor."""
    x0 = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    mha = torch.nn.MultiheadAttention(4, 2, batch_first=True).eval()
    q = torch.randn(1, 3, 4, generator=torch.Generator().manual_seed(1))
    want_attn = mha(q, q, q)[0]
    lazy_mha = mha.to("lazy")
    for d in ("cpu", "lazy"):
        x = x0.to(d)
        with torch.inference_mode():
            views = [x.view(8), x[0], x.t(), x[:, 1:]]
            new = x * 2
            if d == "lazy":
                got_attn = lazy_mha(q.to(d), q.to(d), q.to(d))[0]
        if d == "cpu":
            want = ([v.is_inference() for v in views], new.is_inference(), [v.clone() for v in views])
        else:
            got = ([v.is_inference() for v in views], new.is_inference(), [v.cpu() for v in views])
    assert got[:2] == want[:2]
    for g, w in zip(got[2], want[2], strict=True):
        assert torch.equal(g, w)
    torch.testing.assert_close(got_attn.cpu(), want_attn)


@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_recomputes_eagers_values(some_backend: lazy_core.BackendImpl,
                                                           reentrant: bool) -> None:
    """Adversarial sweep: ``torch.utils.checkpoint`` of a function of lazy tensors raised "module
    'torch' has no attribute 'lazy'" (it takes RNG states from the device's module; HF models call
    it under ``gradient_checkpointing_enable()``). ``torch.lazy`` is lazy_core.device_module; the
    recompute replays the forward's dropout mask (lazy draws come from the CPU generator)."""
    from torch.utils.checkpoint import checkpoint

    def run(d: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        lin = torch.nn.Linear(4, 4).to(d)
        x = torch.randn(3, 4).to(d).requires_grad_()
        y = checkpoint(lambda t: torch.nn.functional.dropout(lin(t).relu(), 0.3), x, use_reentrant=reentrant)
        (y * torch.arange(4.0).to(d)).sum().backward()
        return [y.detach().cpu(), x.grad.cpu(), lin.weight.grad.cpu()]

    for got, want in zip(run("lazy"), run("cpu"), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_recomputes_under_the_forwards_autocast(some_backend: lazy_core.BackendImpl,
                                                           reentrant: bool) -> None:
    """A region checkpointed under ``lazy_core.autocast`` recomputed in float32 during the
    backward (checkpoint re-enters autocast with ``torch.autocast(device_type)``, which refuses
    ``lazy``): non-reentrant raised CheckpointError ("different metadata"), reentrant gave other
    gradients than eager's ``torch.autocast("cpu")``. torch.lazy's device state carries the
    settings (lazy_core.device_module); after the backward no autocast mode is left pushed."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils.checkpoint import checkpoint

    from lazy_core.autocast import is_autocast_enabled

    def run(d: str) -> list[torch.Tensor]:
        torch.manual_seed(0)
        lin = torch.nn.Linear(8, 8).to(d)
        x = torch.randn(4, 8).to(d).requires_grad_()
        region = (lazy_core.autocast(dtype=torch.bfloat16) if d == "lazy"
                  else torch.autocast("cpu", dtype=torch.bfloat16))
        with region:
            y = checkpoint(lambda t: lin(t).relu() * 2, x, use_reentrant=reentrant)
        assert y.dtype == torch.bfloat16
        y.float().sum().backward()
        return [y.detach().float().cpu(), x.grad.cpu(), lin.weight.grad.cpu()]

    for got, want in zip(run("lazy"), run("cpu"), strict=True):
        torch.testing.assert_close(got, want)
    assert not is_autocast_enabled()
    assert not _get_current_function_mode_stack()


def test_a_training_step_under_set_default_device_lazy_compiles(some_backend: lazy_core.BackendImpl) -> None:
    """Adversarial sweep: after ``torch.set_default_device("lazy")`` (as users write it for
    "cuda") every graph failed to build, "two devices, meta and lazy": the lowering's
    decompositions make device-less constants, which the default device made lazy. The
    lowering makes them on the CPU (lowering/context.py, ``build_fx``); the step compiles."""

    def program(d: str | None) -> list[torch.Tensor]:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        torch.nn.functional.cross_entropy(m(torch.randn(5, 4)), torch.tensor([0, 1, 1, 0, 1])).backward()
        opt.step()
        if d is not None:
            assert m[0].weight.device.type == d
            lazy_core.mark_step()
        return [p.detach().cpu() for p in m.parameters()]

    want = program(None)
    torch.set_default_device("lazy")
    try:
        got = program("lazy")
    finally:
        torch.set_default_device(None)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_forward_mode_ad_matches_eager(some_backend: lazy_core.BackendImpl) -> None:
    """Adversarial sweep: forward-mode AD on lazy tensors raised "Could not run
    'aten::_efficientzerotensor' ... 'Lazy' backend" (its zero tangents); lazy_core.factories makes
    them plain zeros. ``torch.func.jvp`` and ``forward_ad`` dual numbers give eager's tangents."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import jvp

    def run(d: str) -> list[torch.Tensor]:
        x = torch.randn(3, generator=torch.Generator().manual_seed(0)).to(d)
        w = torch.randn(3, 3, generator=torch.Generator().manual_seed(1)).to(d)
        with fwAD.dual_level():
            dx = fwAD.make_dual(x, torch.ones(3).to(d))
            y = fwAD.unpack_dual(((w @ dx).sin() * 2 + dx.abs() + torch.nn.functional.gelu(dx)).sum())
        _, tangent = jvp(lambda a: (a.exp() * a).sum(0), (w,), (torch.ones(3, 3).to(d),))
        return [y.primal.cpu(), y.tangent.cpu(), tangent.cpu()]

    for got, want in zip(run("lazy"), run("cpu"), strict=True):
        torch.testing.assert_close(got, want)


def test_a_sparse_gradient_raises_a_clear_error(some_backend: lazy_core.BackendImpl) -> None:
    """Adversarial sweep: ``nn.Embedding(sparse=True)``'s backward failed deep in the backend
    ("unsupported memory format option Contiguous") uploading its sparse gradient. Lazy tensors
    are dense: it raises NotImplementedError naming the way out."""
    emb = torch.nn.Embedding(5, 3, sparse=True).to("lazy")
    loss = emb(torch.tensor([0, 2, 2]).to("lazy")).sum()
    with pytest.raises(NotImplementedError, match="sparse=False"):
        loss.backward()
