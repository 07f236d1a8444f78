"""lazy_core.autocast and lazy_core.GradScaler against torch.autocast("cpu") + torch.amp.GradScaler("cpu").

Per op: the result dtype under lazy autocast equals CPU autocast's, values agree within the
low dtype's tolerance, and so do gradients. A 20-step float16 training loop with the
sync-free GradScaler matches CPU autocast with its GradScaler and runs one graph per step.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

import lazy_core
from lazy_core import metrics

LOW = [torch.bfloat16, torch.float16]

# name -> (fn, input shapes); the first op of each kind exercises lower / fp32 / promote / none.
OPS = {
    "mm": (lambda a, b: a @ b, [(4, 8), (8, 3)]),
    "matmul_method": (lambda a, b: a.matmul(b), [(2, 4, 8), (8, 3)]),
    "linear": (lambda a, w, b: F.linear(a, w, b), [(4, 8), (3, 8), (3,)]),
    "bmm": (lambda a, b: torch.bmm(a, b), [(2, 4, 8), (2, 8, 3)]),
    "addmm": (lambda c, a, b: torch.addmm(c, a, b), [(4, 3), (4, 8), (8, 3)]),
    "baddbmm": (lambda c, a, b: torch.baddbmm(c, a, b), [(2, 4, 3), (2, 4, 8), (2, 8, 3)]),
    "sdpa": (lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [(1, 2, 4, 8)] * 3),
    "conv2d": (lambda x, w: F.conv2d(x, w), [(1, 2, 6, 6), (3, 2, 3, 3)]),
    "mse_after_mm": (lambda a, b, t: F.mse_loss(a @ b, t), [(4, 8), (8, 3), (4, 3)]),
    "cross_entropy_after_mm": (lambda a, b: F.cross_entropy(a @ b, torch.arange(4, device=a.device) % 3),
                               [(4, 8), (8, 3)]),
    "softmax_after_mm": (lambda a, b: F.softmax(a @ b, -1), [(4, 8), (8, 3)]),
    "layer_norm_after_mm": (lambda a, b: F.layer_norm(a @ b, (3,)), [(4, 8), (8, 3)]),
    "prod_after_mm": (lambda a, b: (a @ b).prod(), [(2, 2), (2, 2)]),
    "cat_promote": (lambda a, b, c: torch.cat([a @ b, c]), [(4, 8), (8, 3), (2, 3)]),
    "stack_promote": (lambda a, b, c: torch.stack([a @ b, c]), [(4, 8), (8, 3), (4, 3)]),
    "add_after_mm": (lambda a, b, c: (a @ b) + c, [(4, 8), (8, 3), (4, 3)]),
    "relu_plain": (lambda a: a.relu(), [(4, 3)]),
    # F.pad is one function for every mode; ATen's CPU fp32 list names reflect's and replicate's kernels.
    "pad_reflect_after_mm": (lambda a, b: F.pad((a @ b)[None], (1, 1), mode="reflect"), [(4, 8), (8, 3)]),
    "pad_replicate_after_mm": (lambda a, b: F.pad((a @ b)[None], (1, 1), "replicate"), [(4, 8), (8, 3)]),
    "pad_constant_after_mm": (lambda a, b: F.pad(a @ b, (1, 1)), [(4, 8), (8, 3)]),
}


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 3e-3, "rtol": 3e-3}


def _run(name: str, dtype: torch.dtype, lazy: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    fn, shapes = OPS[name]
    g = torch.Generator().manual_seed(1)
    leaves = [torch.randn(s, generator=g).requires_grad_() for s in shapes]
    if lazy:
        leaves = [t.detach().to("lazy").requires_grad_() for t in leaves]
        with lazy_core.autocast(dtype=dtype):
            out = fn(*leaves)
    else:
        with torch.autocast("cpu", dtype=dtype):
            out = fn(*leaves)
    out.float().sum().backward()
    return out, [t.grad for t in leaves]


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", list(OPS))
def test_autocast_op_matches_cpu_autocast(backend, name: str, dtype: torch.dtype) -> None:
    want, want_grads = _run(name, dtype, lazy=False)
    got, got_grads = _run(name, dtype, lazy=True)
    assert got.dtype == want.dtype, f"{name}: lazy {got.dtype}, CPU autocast {want.dtype}"
    torch.testing.assert_close(got.cpu(), want, **_tol(dtype))
    for g, w in zip(got_grads, want_grads):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, **_tol(dtype))


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
def test_autocast_runs_ffts_and_linalg_in_float32_as_cpu_autocast(eager_backend, dtype: torch.dtype) -> None:
    """The FFTs and ``torch.linalg`` solvers are on ATen's CPU float32 list; lazy autocast left
    them out, so ``torch.fft.rfft(a @ b)`` raised "Unsupported dtype BFloat16" (an adversarial probe)."""
    def calls(a: torch.Tensor, b: torch.Tensor) -> list:
        h = a @ b
        eye = torch.eye(4, device=h.device)
        return [torch.fft.rfft(h), torch.fft.fft2(h), torch.fft.irfft(h), torch.linalg.inv(h + 4 * eye),
                torch.linalg.solve(h + 4 * eye, h), torch.linalg.svdvals(h), torch.linalg.eigvalsh(h + h.T)]

    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with torch.autocast("cpu", dtype=dtype):
        want = [t.dtype for t in calls(a, b)]
    with lazy_core.autocast(dtype=dtype):
        got = [t.dtype for t in calls(a.to("lazy"), b.to("lazy"))]
    assert got == want


def test_autocast_nested_disabled_and_restored(eager_backend) -> None:
    a, b = torch.randn(3, 4).to("lazy"), torch.randn(4, 2).to("lazy")
    with lazy_core.autocast(dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.bfloat16
        with lazy_core.autocast(enabled=False):
            assert (a @ b).dtype == torch.float32
        with lazy_core.autocast(dtype=torch.float16):
            assert (a @ b).dtype == torch.float16
        assert (a @ b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32


def test_autocast_leaves_cpu_tensors_and_float64_alone(eager_backend) -> None:
    a = torch.randn(3, 4)
    with lazy_core.autocast(dtype=torch.bfloat16):
        assert (a @ a.T).dtype == torch.float32
        d = torch.randn(3, 4, dtype=torch.float64).to("lazy")
        assert (d @ d.T).dtype == torch.float64


def test_autocast_cuda_policy_runs_softmax_in_float32(eager_backend) -> None:
    h = torch.randn(3, 4).to(torch.bfloat16).to("lazy")
    with lazy_core.autocast(dtype=torch.bfloat16, policy="cuda"):
        assert F.softmax(h, -1).dtype == torch.float32
        assert h.exp().dtype == torch.float32
    with lazy_core.autocast(dtype=torch.bfloat16):  # the CPU lists: as torch.autocast("cpu")
        assert F.softmax(h, -1).dtype == torch.bfloat16


def test_torch_autocast_lazy_is_refused_by_pytorch() -> None:
    """Why lazy_core.autocast exists; if PyTorch starts accepting "lazy", revisit docs/amp.md."""
    assert not torch.amp.autocast_mode.is_autocast_available("lazy")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _train(init_scale: float, growth_interval: int) -> None:
    dt = torch.float16
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(8, 16, generator=g) for _ in range(20)]
    ys = [torch.randint(0, 4, (8,), generator=g) for _ in range(20)]
    ref = _model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    want = []
    for x, y in zip(xs, ys):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dt):
            loss = F.cross_entropy(ref(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        want.append(loss.detach())

    model = _model().to("lazy")
    lopt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lscaler = lazy_core.GradScaler("lazy", init_scale=init_scale, growth_interval=growth_interval)
    got = []
    lazy_core.mark_step()
    for x, y in zip(xs, ys):
        metrics.reset()
        lopt.zero_grad()
        with lazy_core.autocast(dtype=dt):
            loss = F.cross_entropy(model(x.to("lazy")), y.to("lazy"))
        lscaler.scale(loss).backward()
        lscaler.step(lopt)
        lscaler.update()
        got.append(loss.detach())
        lazy_core.mark_step()
        executions = {k: v for k, v in metrics.counters().items() if k.startswith("execute_reason::")}
        assert executions == {"execute_reason::mark_step": 1}, f"host syncs in the step: {executions}"
    torch.testing.assert_close(torch.stack([t.cpu() for t in got]), torch.stack(want), atol=2e-3, rtol=2e-3)
    assert lscaler.get_scale() == scaler.get_scale()
    for a, b in zip(ref.parameters(), model.parameters()):
        # 20 momentum steps of float16 rounding that differs by accumulation order: 1e-2.
        torch.testing.assert_close(b.detach().cpu(), a.detach(), atol=1e-2, rtol=1e-2)


# (init_scale, growth_interval): "grow" doubles the scale every 3 clean steps without reaching
# float16's overflow; "overflow_skips" starts at 2**24, so the first steps overflow and must be
# skipped in the graph. (A scale that keeps growing into the overflow edge is left out: whether a
# borderline product overflows float16 depends on the accumulation order, so CPU and a compiled
# backend may then legitimately skip different steps.)
@pytest.mark.parametrize("init_scale,growth_interval", [(2.0**8, 3), (2.0**24, 1000)],
                         ids=["grow", "overflow_skips"])
def test_grad_scaler_fp16_training_matches_cpu_with_no_host_sync(backend, init_scale: float,
                                                                growth_interval: int) -> None:
    _train(init_scale, growth_interval)


def test_grad_scaler_detects_nan_gradients(backend) -> None:
    """Regression: the scaler used ~isfinite(g), and the compiled backends lower isfinite(nan) to
    True, so a NaN gradient was not caught and the step wrote NaN into the weights."""
    p = torch.nn.Parameter(torch.ones(3).to("lazy"))
    p.grad = torch.tensor([1.0, float("nan"), 1.0]).to("lazy")
    opt = torch.optim.SGD([p], lr=0.1)
    s = lazy_core.GradScaler()
    s.step(opt)
    s.update()
    lazy_core.mark_step()
    torch.testing.assert_close(p.detach().cpu(), torch.ones(3))
    assert s.get_scale() == 2.0**15


def test_grad_scaler_unscale_twice_raises(eager_backend) -> None:
    p = torch.nn.Parameter(torch.randn(3).to("lazy"))
    p.grad = torch.ones(3).to("lazy")
    opt = torch.optim.SGD([p], lr=0.1)
    s = lazy_core.GradScaler()
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        s.unscale_(opt)


_FIRST_STEP_OPTIMIZERS = {
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.1),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=0.1),
    "nadam": lambda ps: torch.optim.NAdam(ps, lr=0.1),
    "radam": lambda ps: torch.optim.RAdam(ps, lr=0.1),
    "adamax": lambda ps: torch.optim.Adamax(ps, lr=0.1),
    "adadelta": lambda ps: torch.optim.Adadelta(ps, lr=0.5),
    "rprop": lambda ps: torch.optim.Rprop(ps, lr=0.1),
    "asgd": lambda ps: torch.optim.ASGD(ps, lr=0.1),
    "sgd_dampening": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.5),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
}


def _skipped_first_step(dev: str, make: Any) -> tuple[torch.Tensor, dict]:
    w = torch.nn.Parameter(torch.ones(2).to(dev))
    opt = make([w])
    scaler = torch.amp.GradScaler("cpu") if dev == "cpu" else lazy_core.GradScaler()
    for i in range(3):
        x = torch.tensor([float("inf") if i == 0 else 1.0, 2.0]).to(dev)
        opt.zero_grad()
        scaler.scale((w * x).sum()).backward()
        scaler.step(opt)
        scaler.update()
        if dev == "lazy":
            lazy_core.mark_step()
    state = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in opt.state[w].items()}
    return w.detach().cpu(), state


def _check_skipped_first_step(name: str) -> None:
    want_w, want_state = _skipped_first_step("cpu", _FIRST_STEP_OPTIMIZERS[name])
    got_w, got_state = _skipped_first_step("lazy", _FIRST_STEP_OPTIMIZERS[name])
    torch.testing.assert_close(got_w, want_w)
    if name != "sgd_momentum":  # its skipped first step keeps a zero buffer (steps as an absent one)
        assert sorted(got_state) == sorted(want_state)
    for k, v in want_state.items():
        torch.testing.assert_close(got_state[k], v, msg=lambda m, k=k: f"state {k!r}: {m}")


@pytest.mark.parametrize("name", sorted(_FIRST_STEP_OPTIMIZERS))
def test_grad_scaler_skipped_first_step_leaves_no_state(eager_backend, name: str) -> None:
    """Found by an adversarial sweep: a skipped first step (inf gradients) left the state that
    ``optimizer.step()`` created as zeros and dropped its host entries. The next step raised
    KeyError ('step': Adam, AdamW, RAdam, Adamax, Adadelta, Rprop, RMSprop; 'mu_product': NAdam),
    ASGD lost its next update (``eta`` of 0), and SGD with dampening started from a zero
    buffer (w 0.95 against eager's 0.9). Such a step now reads found-inf once and leaves the
    state absent, as torch.amp.GradScaler does (lazy_core/grad_scaler.py)."""
    _check_skipped_first_step(name)


@pytest.mark.parametrize("name", ["adam", "asgd", "sgd_dampening"])
def test_grad_scaler_skipped_first_step_on_every_backend(backend, name: str) -> None:
    _check_skipped_first_step(name)


def test_a_cast_made_under_no_grad_is_not_reused_with_grad_on(backend) -> None:
    """A no-grad pass (a teacher, an EMA probe) through a weight inside the region cached a cast
    with no grad_fn; the training pass then took it and the layer got no gradient."""
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
    x = torch.randn(3, 5)
    grads = {}
    for device in ("cpu", "lazy"):
        model = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))
        model.load_state_dict(ref.state_dict())
        model = model.to(device)
        region = (torch.autocast("cpu", dtype=torch.bfloat16) if device == "cpu"
                  else lazy_core.autocast(dtype=torch.bfloat16))
        with region:
            with torch.no_grad():
                model[0](x.to(device))
            loss = model(x.to(device)).float().square().mean()
        loss.backward()
        grads[device] = [p.grad.cpu() if p.grad is not None else None for p in model.parameters()]
    assert all(g is not None for g in grads["lazy"])
    torch.testing.assert_close(grads["lazy"], grads["cpu"], **_tol(torch.bfloat16))


def test_grad_scaler_unscales_bf16_gradients_with_one_rounding(backend) -> None:
    """unscale_ rounded the inverse scale to bf16 first: with a scale that is no power of two a
    third of the gradients came out one bf16 ulp off eager's."""
    torch.manual_seed(0)
    c = torch.randn(512)
    w0 = torch.randn(512, dtype=torch.bfloat16)
    grads = {}
    for device in ("cpu", "lazy"):
        w = w0.clone().to(device).requires_grad_()
        opt = torch.optim.SGD([w], lr=1.0)
        scaler = (torch.amp.GradScaler("cpu", init_scale=3.0) if device == "cpu"
                  else lazy_core.GradScaler(init_scale=3.0))
        scaler.scale((w.float() * c.to(device)).sum()).backward()
        scaler.unscale_(opt)
        grads[device] = w.grad.cpu()
    assert torch.equal(grads["lazy"], grads["cpu"])
