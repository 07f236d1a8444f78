"""Convolution gradients as matmuls over a channels-last im2col (lowering/conv_matmuls.py).

iree-cpu asks the lowering for it (``TargetSpec.conv_gradients_as_matmuls``): the ResNet-18
zoo step graph ran 178 -> 114 ms on one thread. Every form of a 2-d convolution's backward is
compared with eager here on every backend, the forms the rewrite takes (any stride, padding and
dilation for the weight gradient; stride 1 and padding within the window's reach for the input
gradient; per-image matmuls for the weight gradient of fewer than ``MIN_CHANNELS`` input channels)
and those it leaves (the input gradient of few channels, a strided input gradient, a padding wider
than the window, a grouped convolution), and iree-cpu must really rewrite them.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
from conftest import use_backend

import lazy_core
from lazy_core.graph import build_graph
from lazy_mlir.lowering import conv_matmuls

# (batch, in, out, height, width, kernel, stride, padding, dilation, groups, bias)
CASES = {
    "3x3 same": (4, 8, 16, 14, 14, 3, 1, 1, 1, 1, True),
    "strided: weight gradient only": (2, 8, 4, 9, 10, 3, 2, 1, 1, 1, False),
    "dilated": (2, 16, 8, 11, 12, 3, 1, 2, 2, 1, True),
    "1x1 strided (ResNet shortcut)": (2, 8, 8, 8, 9, 1, 2, 0, 1, 1, False),
    "5x5 valid": (2, 12, 5, 10, 11, 5, 1, 0, 1, 1, True),
    "stride 3 over padding 2": (3, 8, 6, 7, 8, 3, 3, 2, 1, 1, True),
    "even kernel": (2, 8, 4, 6, 7, 2, 1, 1, 1, 1, True),
    "3x1 kernel": (2, 8, 4, 6, 7, (3, 1), 1, (1, 0), 1, 1, True),
    "padding wider than the window": (2, 8, 4, 5, 6, 1, 1, 1, 1, 1, True),
    "one input channel: per-image matmuls": (2, 1, 4, 6, 7, 3, 1, 1, 1, 1, True),
    "RGB stem, 7x7 stride 2: per-image matmuls": (2, 3, 8, 15, 16, 7, 2, 3, 1, 1, False),
    "7 channels, dilated, strided: per-image matmuls": (3, 7, 5, 12, 11, 3, 2, 2, 2, 1, True),
    "grouped: left whole": (2, 8, 8, 6, 7, 3, 1, 1, 1, 2, True),
    "batch of one": (1, 8, 3, 5, 5, 3, 1, 1, 1, 1, False),
}


def _conv(case: tuple) -> tuple[torch.nn.Conv2d, torch.Tensor]:
    n, c, f, h, w, k, s, p, d, groups, bias = case
    conv = torch.nn.Conv2d(c, f, k, stride=s, padding=p, dilation=d, groups=groups, bias=bias)
    return conv, torch.randn(n, c, h, w)


def _gradients(conv: torch.nn.Conv2d, x: torch.Tensor, device: str, dtype: torch.dtype = torch.float32) -> list:
    """The parameters' and the input's gradients of a small loss through ``conv``."""
    conv = copy.deepcopy(conv).to(device=device, dtype=dtype)
    x = x.to(device=device, dtype=dtype).requires_grad_()
    (conv(x).tanh() * 3).square().sum().backward()
    if device == "lazy":
        lazy_core.mark_step()
    return [t.grad.cpu().double() for t in (*conv.parameters(), x)]


def assert_as_accurate_as_eager(got: list, eager: list, exact: list) -> None:
    """Each of ``got`` is as close to the float64 ``exact`` as eager's float32 result is, up to a
    factor 4 (another summation order) and a few ulps of the largest value: the weight gradient
    sums hundreds of products of magnitude ~1000, so eager itself is ~1e-3 off."""
    for i, (g, e, x) in enumerate(zip(got, eager, exact, strict=True)):
        bound = 4 * (e - x).abs().max() + 4 * torch.finfo(torch.float32).eps * x.abs().max()
        assert (g - x).abs().max() <= bound, (i, (g - x).abs().max(), bound)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_convolution_gradients_match_eager(backend, case):
    """Weight, bias and input gradients of one convolution inside a small loss, as eager's."""
    torch.manual_seed(0)
    conv, x = _conv(case)
    exact = _gradients(conv, x, "cpu", torch.float64)
    assert_as_accurate_as_eager(_gradients(conv, x, "lazy"), _gradients(conv, x, "cpu"), exact)


@pytest.mark.parametrize("frozen", ["weight", "input"])
def test_one_gradient_asked_for(backend, frozen):
    """A frozen weight (fine-tuning a head) or an input without a gradient: only the other
    gradient is computed, as eager's."""
    torch.manual_seed(0)
    conv, x = _conv(CASES["3x3 same"])
    lconv = copy.deepcopy(conv).to("lazy")
    wants_input = frozen == "weight"
    if frozen == "weight":
        conv.weight.requires_grad_(False)
        lconv.weight.requires_grad_(False)
    xc, xl = x.clone().requires_grad_(wants_input), x.to("lazy").requires_grad_(wants_input)
    conv(xc).square().sum().backward()
    lconv(xl).square().sum().backward()
    lazy_core.mark_step()
    if wants_input:
        torch.testing.assert_close(xl.grad.cpu(), xc.grad, rtol=2e-5, atol=2e-5)
        assert lconv.weight.grad is None
    else:
        torch.testing.assert_close(lconv.weight.grad.cpu(), conv.weight.grad, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(lconv.bias.grad.cpu(), conv.bias.grad, rtol=2e-5, atol=2e-5)


def test_channels_last_input(backend):
    """An input in channels-last memory format (``model.to(memory_format=...)``)."""
    torch.manual_seed(0)
    conv, x = _conv(CASES["3x3 same"])
    x = x.to(memory_format=torch.channels_last)
    exact = _gradients(conv, x, "cpu", torch.float64)
    assert_as_accurate_as_eager(_gradients(conv, x, "lazy"), _gradients(conv, x, "cpu"), exact)


def _lowered_backward(name: str, case: tuple, bias: bool = False) -> str:
    """The torch-dialect MLIR ``name``'s lowering gives one convolution's backward (the input's
    and the weight's gradients; the bias's too if ``bias``)."""
    b = use_backend(name)
    torch.manual_seed(0)
    conv, x = _conv(case)
    conv = conv.to("lazy")
    xl = x.to("lazy").requires_grad_()
    conv(xl).square().sum().backward()
    outputs = [t._lz_value() for t in (xl.grad, conv.weight.grad, *([conv.bias.grad] if bias else []))]
    return b.lower(build_graph(outputs)).mlir


def test_iree_cpu_computes_the_gradients_as_matmuls():
    """iree-cpu lowers both gradients of a stride-1 convolution as matmuls (no
    ``convolution_backward`` computes them), only the weight gradient of a strided one, and
    neither of a convolution with one input channel."""
    mlir = _lowered_backward("iree-cpu", CASES["3x3 same"])
    assert mlir.count("torch.aten.mm ") == 2, mlir
    assert "-> !torch.vtensor<[4,8,14,14],f32>, !torch.vtensor<[16,8,3,3],f32>" not in mlir
    strided = _lowered_backward("iree-cpu", CASES["strided: weight gradient only"])
    assert strided.count("torch.aten.mm ") == 1
    assert "-> !torch.vtensor<[2,8,9,10],f32>, !torch.none, !torch.none" in strided
    thin = _lowered_backward("iree-cpu", CASES["one input channel: per-image matmuls"])
    assert "torch.aten.mm " not in thin
    # The weight gradient: one matmul per image; the input gradient stays convolution_backward's.
    assert thin.count("torch.aten.bmm ") == 1, thin
    assert "-> !torch.vtensor<[2,1,6,7],f32>, !torch.none, !torch.none" in thin
    assert conv_matmuls.MIN_CHANNELS > 1


def test_bias_gradient_sums_planes_then_the_batch():
    """iree-cpu sums the bias gradient per image plane, then over the batch (IREE's one
    reduction over dims 0, 2, 3 took twice as long for ``make demo``'s first convolution)."""
    mlir = _lowered_backward("iree-cpu", CASES["3x3 same"], bias=True)
    # (float32 sums accumulate in float64 on iree-cpu: the dtype argument.)
    assert re.search(r"sum.dim_IntList .*: !torch.vtensor<\[4,16,14,14\],f32>, .* -> !torch.vtensor<\[4,16\],f(32|64)>", mlir)
    assert re.search(r"sum.dim_IntList .*: !torch.vtensor<\[4,16\],f32>, .* -> !torch.vtensor<\[16\],f(32|64)>", mlir)
    assert "torch.aten.convolution_backward" not in mlir


def test_the_reference_backend_keeps_convolution_backward():
    """The correctness oracle lowers PyTorch's op as it is: the rewrite is iree-cpu's choice."""
    mlir = _lowered_backward("reference", CASES["3x3 same"])
    assert "torch.aten.mm " not in mlir
    assert "torch.aten.convolution_backward" in mlir


#: (batch, in, out, height, width, kernel, stride, padding, dilation, bias): forward convolutions
#: with at least ``MIN_FORWARD_POSITIONS`` output positions, which iree-cpu computes as one
#: matmul per image.
FORWARD_CASES = {
    "3x3 same, bias": (2, 8, 16, 14, 14, 3, 1, 1, 1, True),
    "one input channel": (3, 1, 4, 10, 9, 3, 1, 1, 1, True),
    "7x7 stride 2 stem": (2, 3, 8, 23, 22, 7, 2, 3, 1, False),
    "dilated, no padding": (2, 5, 3, 13, 12, 3, 1, 0, 2, True),
    "1x1": (2, 16, 4, 8, 8, 1, 1, 0, 1, False),
}


@pytest.mark.parametrize("case", FORWARD_CASES.values(), ids=FORWARD_CASES.keys())
def test_forward_convolution_matches_eager(backend, case):
    """A forward convolution's value, as eager's to float32 rounding, on every backend."""
    n, c, f, h, w, k, s, p, d, bias = case
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(c, f, k, stride=s, padding=p, dilation=d, bias=bias)
    x = torch.randn(n, c, h, w)
    with torch.no_grad():
        got = conv.to("lazy")(x.to("lazy"))
        lazy_core.mark_step()
        torch.testing.assert_close(got.cpu(), conv.cpu()(x), rtol=1e-5, atol=1e-5)


def test_iree_cpu_computes_large_forward_convolutions_as_batched_matmuls():
    """iree-cpu lowers a convolution with at least ``MIN_FORWARD_POSITIONS`` output positions as
    a matmul per image (no ``convolution`` left) and leaves a smaller one to IREE."""
    def lowered(h: int) -> str:
        b = use_backend("iree-cpu")
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(8, 16, 3, padding=1).to("lazy")
        y = conv(torch.randn(2, 8, h, h).to("lazy"))
        return b.lower(build_graph([y._lz_value()])).mlir

    large = lowered(8)  # 64 positions
    assert "torch.aten.convolution " not in large and "torch.aten.bmm " in large, large
    small = lowered(7)
    assert "torch.aten.convolution " in small and "torch.aten.bmm " not in small, small
    assert conv_matmuls.MIN_FORWARD_POSITIONS == 64


def test_rewritten_convolutions_over_changing_batch_sizes(backend):
    """A network evaluated and trained on batches of changing sizes: the per-image matmuls
    take the batch size from the shapes, so a graph compiled with a dynamic batch (lazy_core's
    dynamic shapes) gives eager's values at every size, on every backend."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 4, 3, stride=2, padding=1))
    lazy_net = copy.deepcopy(net).to("lazy")
    for n in (2, 3, 5, 7, 4):
        x = torch.randn(n, 3, 12, 12)
        with torch.no_grad():
            got = lazy_net(x.to("lazy"))
            lazy_core.mark_step()
            torch.testing.assert_close(got.cpu(), net(x), rtol=1e-5, atol=1e-5)
    for n in (2, 3, 6):
        x = torch.randn(n, 3, 12, 12)
        lazy_net.zero_grad()
        net.zero_grad()
        lazy_net(x.to("lazy")).square().sum().backward()
        lazy_core.mark_step()
        net(x).square().sum().backward()
        for mine, theirs in zip(lazy_net.parameters(), net.parameters(), strict=True):
            torch.testing.assert_close(mine.grad.cpu(), theirs.grad, rtol=1e-4, atol=1e-4)
    if backend.name == "iree-cpu":  # some sizes ran one graph compiled for every batch size
        assert lazy_core.metrics.counter("dynamic_reuse") > 0
