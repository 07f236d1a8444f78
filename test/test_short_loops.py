"""Reductions over more than 65,535 elements equal eager's on every backend.

On iree-vulkan over Mesa's lavapipe, llvmpipe ends every shader loop after 65,535
iterations: ``ones(65536).sum()`` was 65535, ``ones(2**20).sum()`` 524,280,
``ones(n, 4).sum(0)`` 65535 per column and ``arange(65536).amax()`` 65534, with no error.
``lowering/short_loops.py`` stages such reductions on the Vulkan target. The sizes here are
the boundary (65,535 and 65,536), far past it, and shapes whose reduced dims are each short
but long together.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import lazy_core

_CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], tuple[int, ...], torch.dtype]] = {
    "sum_65535": (lambda x: x.sum(), (65535,), torch.float32),
    "sum_65536": (lambda x: x.sum(), (65536,), torch.float32),
    "sum_2pow20": (lambda x: x.sum(), (1 << 20,), torch.float32),
    "sum_dim0_columns": (lambda x: x.sum(0), (131072, 4), torch.float32),
    "sum_keepdim_last": (lambda x: x.sum(-1, keepdim=True), (2, 70000), torch.float32),
    "sum_two_dims": (lambda x: x.sum((0, 2)), (300, 2, 300), torch.float32),
    "mean_all": (lambda x: x.mean(), (512, 256), torch.float32),
    "mean_dims": (lambda x: x.mean((0, 1), keepdim=True), (256, 512, 2), torch.float32),
    "sum_int32": (lambda x: x.sum(), (70000,), torch.int32),
    "sum_int64_dim": (lambda x: x.sum(0), (65536, 3), torch.int64),
    "amax_all": (lambda x: x.amax(), (65536,), torch.float32),
    "amin_dim0": (lambda x: x.amin(0), (131072, 2), torch.float32),
    "max_all": (lambda x: x.max(), (1 << 18,), torch.float32),
    "min_all_int": (lambda x: x.min(), (100000,), torch.int32),
    "any_all": (lambda x: x.eq(99).any(), (100000,), torch.float32),
    "any_dim": (lambda x: x.eq(99).any(0), (70000, 2), torch.float32),
    "all_dims": (lambda x: x.ne(99).all(), (300, 300), torch.float32),
    "all_dim": (lambda x: x.ne(99).all(1), (2, 70000), torch.float32),
}


def _input(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        # Small integers as floats: every sum is exact in any order, so eager's value is the value.
        return torch.randint(-8, 9, shape, generator=g).to(dtype)
    return torch.randint(-100, 101, shape, generator=g, dtype=dtype)


@pytest.mark.parametrize("name", sorted(_CASES))
def test_a_long_reduction_equals_eager(backend: lazy_core.BackendImpl, name: str) -> None:
    op, shape, dtype = _CASES[name]
    x = _input(shape, dtype)
    x.view(-1)[-1] = 99 if name.startswith(("amax", "max", "any", "all")) else x.view(-1)[-1]  # the extreme is the last element
    x.view(-1)[-1] = -99 if name.startswith(("amin", "min")) else x.view(-1)[-1]
    got = op(x.to("lazy")).cpu()
    expected = op(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected), (got.flatten()[:4], expected.flatten()[:4])


def test_ones_count_their_elements(backend: lazy_core.BackendImpl, request: pytest.FixtureRequest) -> None:
    if "vulkan" in backend.name:  # 131,074 = 2 * 65,537 has no divisor to stage at: it runs eagerly
        request.applymarker(pytest.mark.expect_fallback("aten.sum"))
    for n in (65535, 65536, 65537 * 2, 1 << 20):
        assert torch.ones(n).to("lazy").sum().item() == n
        assert torch.ones(n, 4).to("lazy").sum(0).cpu().tolist() == [float(n)] * 4


def _ints(*shape: int) -> torch.Tensor:
    """Small integers as floats: sums of them (and of their products) are exact in any order."""
    return torch.randint(-4, 5, shape, generator=torch.Generator().manual_seed(0)).float()


def _slot_zero(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.long)


def _max_pool_grad(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_()
    F.max_pool2d(x, 2).backward(grad)
    return x.grad


def _put_by_mask(x: torch.Tensor, mask: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """``y[mask] = values``: the k-th true position takes ``values[k]``, a scan of the mask."""
    y = x.clone()
    y[mask] = values
    return y


_N = 131072
_LONG_CALLS: dict[str, tuple[Callable[..., torch.Tensor], Callable[[], tuple[torch.Tensor, ...]], str]] = {
    "cumsum_32768": (lambda x: x.cumsum(0), lambda: (torch.ones(32768),), "cumsum"),
    "cumprod_100000": (lambda x: x.cumprod(0), lambda: (torch.ones(100000),), "cumprod"),
    "conv1d_long_kernel": (lambda x, w: F.conv1d(x, w), lambda: (torch.ones(1, 1, 70002), torch.ones(3, 1, 70000)),
                           "convolution"),
    # Found by an adversarial run, each short on lavapipe before loop_extents (docs/conformance.md).
    "mm_contraction_131072": (lambda a, b: a @ b, lambda: (_ints(2, _N), _ints(_N, 3)), "mm"),
    "dot_2pow20": (torch.dot, lambda: (_ints(1 << 20), _ints(1 << 20)), "dot"),
    "vector_norm_1_2pow20": (lambda x: torch.linalg.vector_norm(x, 1), lambda: (_ints(1 << 20),),
                             "linalg_vector_norm"),
    "mse_loss_131072": (F.mse_loss, lambda: (_ints(_N), _ints(_N)), "mse_loss"),
    "aminmax_131072": (lambda x: torch.stack(torch.aminmax(x)), lambda: (_ints(_N),), "aminmax"),
    "prod_131072": (lambda x: x.abs().clamp(max=1).prod(), lambda: (_ints(_N),), "prod"),
    "log_softmax_131072": (lambda x: x.log_softmax(-1), lambda: (_ints(2, _N),), "_log_softmax"),
    "layer_norm_131072": (lambda x: F.layer_norm(x, (_N,)), lambda: (_ints(2, _N),), "native_layer_norm"),
    "cross_entropy_sum_2pow20_rows": (lambda x, t: F.cross_entropy(x, t, reduction="sum"),
                                      lambda: (_ints(1 << 20, 2), _slot_zero(1 << 20)), "nll_loss_forward"),
    "scatter_add_into_one_slot": (lambda s: torch.zeros(3, device=s.device).scatter_add(0, _slot_zero(70000).to(s.device), s),
                                  lambda: (_ints(70000),), "scatter_add"),
    "index_put_accumulate_into_one_slot": (
        lambda s: torch.zeros(3, device=s.device).index_put((_slot_zero(70000).to(s.device),), s, accumulate=True),
        lambda: (_ints(70000),), "index_put"),
    "sum_of_a_prime_length": (lambda x: x.sum(), lambda: (_ints(1048573),), "sum"),
    # Found by an adversarial run of the rule above: a dim staging cannot split beside a short one
    # (a stage of 65,537), scans in place or into ``out=``, scans over a mask, a sum to another dtype.
    "sum_65537_by_2": (lambda x: x.sum(), lambda: (torch.ones(65537, 2),), "sum"),
    "sum_8_times_65537": (lambda x: x.sum(), lambda: (torch.ones(8 * 65537),), "sum"),
    "amax_65537_by_2": (lambda x: x.amax(), lambda: (torch.arange(131074.0).view(65537, 2),), "amax"),
    "any_65537_by_2": (lambda x: (x > 0).any(), lambda: (torch.cat([torch.zeros(131073), torch.ones(1)]).view(65537, 2),),
                       "any"),
    "cumsum_in_place_40000": (lambda x: x.clone().cumsum_(0), lambda: (torch.ones(40000),), "cumsum_"),
    "cumsum_out_40000": (lambda x: torch.cumsum(x, 0, out=torch.empty_like(x)), lambda: (torch.ones(40000),), "cumsum"),
    "masked_scatter_40000": (lambda x, m, s: x.masked_scatter(m, s),
                             lambda: (torch.zeros(40000), torch.arange(40000) % 2 == 0, torch.arange(40000.0)),
                             "masked_scatter"),
    "index_put_mask_40000": (_put_by_mask, lambda: (torch.zeros(40000), torch.arange(40000) % 2 == 0,
                                                   torch.arange(20000.0)), "index_put_"),
    # Found by a second adversarial run: max-pool's gradient (a scatter of every pooled gradient)
    # came back zeros from flat index 1,617,159 on lavapipe (1024 images of 8x16x16).
    "max_pool_gradient_of_1024_images": (_max_pool_grad, lambda: (_ints(1024, 8, 16, 16), _ints(1024, 8, 8, 8)),
                                         "max_pool2d_with_indices_backward"),
    "sum_to_half_100000": (lambda x: x.sum(dtype=torch.half), lambda: (torch.full((100000,), 0.25),), "sum"),
    # Loops over every dim but one (bounded, not measured short).
    "renorm_slices_of_70000": (lambda x: x.renorm(2, 1, 100.0), lambda: (_ints(70000, 2),), "renorm"),
}


@pytest.mark.parametrize("name", sorted(_LONG_CALLS))
def test_a_call_looping_past_the_limit_is_right(backend: lazy_core.BackendImpl, name: str,
                                                request: pytest.FixtureRequest) -> None:
    """Calls the staging does not cover (a scan, ``any``/``all``, a contraction, a softmax, a
    norm, a loss, an accumulating scatter, a sum of a prime length, ...) were short on lavapipe
    (``cumsum`` of 32,768 ones ended with two zeros, an ``mm`` contracting 131,072 products was
    wrong); the Vulkan target runs a call that could loop that long eagerly
    (``lowering.loop_extents``), and names it."""
    op, inputs, aten_name = _LONG_CALLS[name]
    if "vulkan" in backend.name:
        request.applymarker(pytest.mark.expect_fallback(f"aten.{aten_name}"))
    xs = inputs()
    got = op(*(x.to("lazy") for x in xs)).cpu()
    torch.testing.assert_close(got, op(*xs), rtol=1e-5, atol=1e-4)
    fell_back = any(k.startswith(f"fallback::aten.{aten_name}.") for k in lazy_core.metrics.counters())
    assert fell_back == ("vulkan" in backend.name), lazy_core.metrics.counters()


def _short_calls(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Calls of the looping families over long tensors whose loops stay short."""
    rows = x.view(-1, 16)  # 65,536 rows of 16
    return torch.cat([
        x[:1000].cumsum(0) + x[:1000].gt(500).any(),
        (rows @ w).flatten(),  # a contraction of 16 over many rows
        rows.log_softmax(-1).flatten(),
        F.layer_norm(rows, (16,)).flatten(),
        rows.amax(-1),
        F.embedding(x[:70000].long().remainder(16), rows[:16]).flatten(),
        # Elementwise ops ATen does not tag ``pointwise`` (in place ones, ``hardswish``, ``rsub``).
        F.hardswish(x), x.clone().abs_(), x.clone().eq_(3.0), torch.rsub(x, 1.0), F.mish(x.clone(), inplace=True),
    ])


def test_short_calls_stay_compiled_on_vulkan(backend: lazy_core.BackendImpl) -> None:
    """The Vulkan target refuses a call by its loop, not by its size: long tensors whose calls
    loop over few elements stay compiled."""
    x = torch.arange(1 << 20, dtype=torch.float32).remainder(1000)
    w = _ints(16, 3)
    got = _short_calls(x.to("lazy"), w.to("lazy")).cpu()
    torch.testing.assert_close(got, _short_calls(x, w), rtol=1e-5, atol=1e-4)
    assert not any(k.startswith("fallback::") for k in lazy_core.metrics.counters()), lazy_core.metrics.counters()
