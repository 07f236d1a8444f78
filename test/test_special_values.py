"""NaN, signed zeros and infinities through activations, pooling and their backwards.

An adversarial sweep of special values found kernels whose torch-mlir
lowering is not eager's: softshrink gave ``x - lambd`` below ``-lambd``,
ReLU6's gradient passed at exactly 0 and 6, several ops turned a NaN into a
number (hardshrink, softplus's and ReLU's gradients), ``nan_to_num(nan=-inf)``
replaced its own replacement, softplus compared with its threshold in float64,
``leaky_relu(x, -0.0)`` dropped the slope's sign, and max pooling gave a
window holding a NaN the index -1, whose backward corrupted the heap
(``adaptive_max_pool2d``: SIGABRT on iree-cpu and reference). Each case runs
forward and backward in one graph and compares values, NaN positions and
signs of zeros with eager on every backend.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from conftest import requested_backends, use_backend

NAN, INF = float("nan"), float("inf")
VALUES = torch.tensor([NAN, -0.0, 0.0, -INF, INF, -3.0, 3.0, 6.0, -0.5, 0.5, 20.5, -20.5])

CASES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "relu6": F.relu6,
    "hardtanh": lambda x: F.hardtanh(x, -3.0, 0.5),
    "threshold": lambda x: F.threshold(x, 0.5, -7.25),
    "softshrink": F.softshrink,
    "softshrink_lambda": lambda x: F.softshrink(x, 3.0),
    "hardshrink": F.hardshrink,
    "hardshrink_lambda": lambda x: F.hardshrink(x, 3.0),
    "softplus": F.softplus,
    "softplus_beta": lambda x: F.softplus(x, beta=2.0, threshold=5.0),
    # 0.5 * float32(0.3) equals float32(0.15) but exceeds the float64 0.15: eager compares in
    # float32 (the log branch); torch-mlir's decomposition compared in float64 and returned x.
    "softplus_tied_threshold": lambda x: F.softplus(x, beta=0.3, threshold=0.15),
    "softplus_tied_negative_beta": lambda x: F.softplus(x, beta=-0.3, threshold=0.15),
    # -1 * -0.0 is 0.0: the slope's sign was dropped (x * 0.0 written as a signed zero).
    "leaky_relu_negative_zero_slope": lambda x: F.leaky_relu(x, -0.0),
    # One choice per element, made on the input: a NaN replaced by -inf was replaced again by
    # the float32 minimum (torch-mlir replaced the NaNs, then the infinities of that).
    "nan_to_num_nan_to_infinity": lambda x: torch.nan_to_num(x, nan=-INF),
    "nan_to_num_swapped": lambda x: torch.nan_to_num(x, nan=INF, posinf=0.0, neginf=NAN),
    "max_pool2d": lambda x: F.max_pool2d(x.view(1, 1, 3, 4), 2, 1),
    "max_pool2d_padded": lambda x: F.max_pool2d(x.view(1, 3, 4), 3, 2, padding=1, ceil_mode=True),
    "adaptive_max_pool2d": lambda x: F.adaptive_max_pool2d(x.view(1, 1, 3, 4), (2, 3)),
    "adaptive_max_pool2d_one": lambda x: F.adaptive_max_pool2d(x.view(1, 1, 3, 4), 1),
    "adaptive_max_pool1d": lambda x: F.adaptive_max_pool1d(x.view(1, 3, 4), 3),
    "adaptive_max_pool3d": lambda x: F.adaptive_max_pool3d(x.view(1, 1, 2, 2, 3), (1, 2, 2)),
}


def _run(fn: Callable[[torch.Tensor], torch.Tensor], device: str) -> list[torch.Tensor]:
    x = VALUES.clone().to(device).requires_grad_()
    y = fn(x)
    weights = torch.linspace(-1.0, 1.0, y.numel()).view(y.shape).to(device)
    (y * weights).sum().backward()
    return [y.detach().cpu(), x.grad.cpu()]


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-6, atol=1e-7)
    zeros = (got == 0) & (want == 0)
    assert torch.equal(got.signbit()[zeros], want.signbit()[zeros]), (got, want)


@pytest.mark.parametrize("name", requested_backends())
@pytest.mark.parametrize("case", sorted(CASES))
def test_special_values_forward_and_backward_as_eager(name: str, case: str) -> None:
    use_backend(name)
    want = _run(CASES[case], "cpu")
    got = _run(CASES[case], "lazy")
    for g, w, what in zip(got, want, ("forward", "gradient"), strict=True):
        try:
            _same(g, w)
        except AssertionError as e:
            raise AssertionError(f"{case} {what}:\n  lazy  {g.flatten().tolist()}\n  eager {w.flatten().tolist()}") from e


@pytest.mark.parametrize("name", requested_backends())
def test_max_pool_indices_of_windows_holding_nan(name: str) -> None:
    """The indices themselves: eager takes the last NaN of a window, and the first of equal maxima."""
    use_backend(name)
    x = torch.tensor([[NAN, 1.0, NAN, 2.0], [-0.0, 0.0, 5.0, 5.0], [-INF, -INF, 1.0, NAN]]).view(1, 1, 3, 4)
    for fn in (lambda t: F.max_pool2d(t, 2, 1, return_indices=True),
               lambda t: F.adaptive_max_pool2d(t, (2, 2), return_indices=True),
               lambda t: F.max_pool2d(t, (2, 3), (1, 2), padding=(1, 1), dilation=(2, 1), return_indices=True)):
        (v, i), (lv, li) = fn(x), fn(x.to("lazy"))
        assert torch.equal(li.cpu(), i), (li.cpu(), i)
        _same(lv.cpu(), v)


@pytest.mark.parametrize("name", requested_backends())
def test_adaptive_max_pooling_compiles_its_backward_and_keeps_nan_in_3d(name: str) -> None:
    """``adaptive_max_pool2d_backward`` and ``adaptive_max_pool3d_backward`` had no lowering: every
    training step through ``nn.AdaptiveMaxPool1d/2d/3d`` ran the backward eagerly (a cut graph).
    ``adaptive_max_pool3d``'s torch-mlir lowering skipped a NaN: the window gave its largest
    other value and that index (eager: NaN and the NaN's index). Values, indices and gradients
    in one graph, none run eagerly (lowering/pooling.py)."""
    from lazy_core import metrics

    use_backend(name)
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).remainder(7).view(2, 3, 4, 5)
    x[0, 1, 1, 1], x[1, 2, 3, 4] = NAN, NAN
    programs = [lambda t: F.adaptive_max_pool1d(t[0], 3, return_indices=True),
                lambda t: F.adaptive_max_pool2d(t, (3, 2), return_indices=True),
                lambda t: F.adaptive_max_pool3d(t.unsqueeze(0), (2, 3, 2), return_indices=True)]

    def run(device: str) -> list[torch.Tensor]:
        leaf = x.clone().to(device).requires_grad_()
        outs = [fn(leaf) for fn in programs]
        sum((v.nan_to_num(0.5) * torch.linspace(-1, 1, v.numel()).view(v.shape).to(device)).sum()
            for v, _ in outs).backward()
        return [t.detach().cpu() for pair in outs for t in pair] + [leaf.grad.cpu()]

    for got, want in zip(run("lazy"), run("cpu"), strict=True):
        if got.is_floating_point():
            _same(got, want)
        else:
            assert torch.equal(got, want), (got, want)
    assert not {k: v for k, v in metrics.counters().items() if k.startswith("fallback::")}, metrics.counters()


@pytest.mark.parametrize("name", requested_backends())
def test_sign_bits_and_bit_reinterpretations_compile(name: str) -> None:
    """``signbit``, ``copysign`` and ``x.view(torch.int32)`` read the bits of a float; the sign of a
    NaN and of -0.0 only that way. On reference every such graph failed to compile and ran eagerly
    (torch-mlir has no linalg lowering of ``aten.view.dtype``, which PyTorch's decompositions of
    ``signbit`` and ``copysign`` emit). Fixed in lowering/tensor_bitcasts.py. Strict: a graph
    that does not compile fails the test."""
    use_backend(name)
    negative_nan = -torch.tensor(NAN)  # the sign bit set
    x = torch.cat([VALUES, negative_nan.view(1)])
    y = torch.linspace(-6.0, 5.0, x.numel())
    ints = torch.tensor([0, -1, 0x3F800000, -0x80000000, 0x7FC00000], dtype=torch.int32)
    programs: dict[str, Callable[..., torch.Tensor]] = {
        "signbit": lambda x, y, ints: torch.signbit(x),
        "copysign": lambda x, y, ints: torch.copysign(y, x),
        "float_as_int": lambda x, y, ints: x.view(torch.int32) + 1,
        "int_as_float": lambda x, y, ints: ints.view(torch.float32) * 2.0,
        "half_as_int16": lambda x, y, ints: x.half().view(torch.int16),
        "zero_dim": lambda x, y, ints: torch.copysign(y[0], x[1]),
    }
    if name != "iree-vulkan":  # no float64 on lavapipe's IREE target
        programs["double_as_int64"] = lambda x, y, ints: x.double().view(torch.int64)
    for what, program in programs.items():
        want = program(x, y, ints)
        got = program(x.to("lazy"), y.to("lazy"), ints.to("lazy")).cpu()
        assert got.dtype == want.dtype and torch.equal(got.view(-1).view(torch.uint8), want.view(-1).view(torch.uint8)), \
            f"{what}: lazy {got} eager {want}"


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.7, 1e-12])
def test_float64_logit_with_eps_compiles_and_clamps_as_eager(cpu_backend, eps: float) -> None:
    """``torch.logit(x_f64, eps)`` failed to compile on every backend (torch-mlir: "'arith.truncf'
    op operand type 'f64' and result type 'f64' are cast incompatible"), so its graph ran op by
    op. Eager's kernel clamps to ``[eps, 1 - eps]``, x below eps taking eps first (so with
    ``eps > 0.5``), and keeps NaN (``decompositions._logit``). Strict: a compile failure fails
    the test."""
    x = torch.tensor([0.1, 0.5, 0.99, 0.0, 1.0, NAN, -0.5, 2.0, 0.05, 0.95], dtype=torch.float64)
    want_x, got_x = x.clone().requires_grad_(), x.to("lazy").detach().requires_grad_()
    want, got = torch.logit(want_x, eps), torch.logit(got_x, eps)
    (want * torch.linspace(-1, 1, 10, dtype=torch.float64)).sum().backward()
    (got * torch.linspace(-1, 1, 10, dtype=torch.float64).to("lazy")).sum().backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), equal_nan=True, rtol=1e-13, atol=0)
    torch.testing.assert_close(got_x.grad.cpu(), want_x.grad, equal_nan=True, rtol=1e-13, atol=0)


@pytest.mark.parametrize("eps", [None, 0.0, 0.1, 0.7])
def test_logit_backward_is_compiled_with_eager_values(cpu_backend, eps: float | None) -> None:
    """``logit_backward`` has no torch-mlir lowering: every training step through ``torch.logit``
    ran it eagerly, cutting the graph. Decomposed for float32 as eager's kernel: NaN outside
    [0, 1] without eps, 0 outside [eps, 1 - eps] with it. Strict: a fallback fails the test;
    half-precision inputs still run it eagerly (their kernel rounds by step). A NaN ``x`` with
    eps is left out: eager's vectorized loop gives 0 there and its scalar tail NaN (by position;
    the decomposition gives the vectorized loop's 0)."""
    x = torch.tensor([0.1, 0.5, 0.99, 0.0, 1.0, NAN if eps is None else 0.2, -0.5, 2.0, 0.05, 0.95, 0.3])
    grad = torch.tensor([1.0, -2.0, 0.0, 1.0, -1.0, 1.0, 1.0, 1.0, 0.0, 3.0, NAN])
    want = torch.ops.aten.logit_backward(grad, x, eps)
    got = torch.ops.aten.logit_backward(grad.to("lazy"), x.to("lazy"), eps).cpu()
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-6, atol=0)
