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
    x.view(-1)[-1] = 99 if name.startswith(("amax", "max")) else x.view(-1)[-1]  # the extreme is the last element
    x.view(-1)[-1] = -99 if name.startswith(("amin", "min")) else x.view(-1)[-1]
    got = op(x.to("lazy")).cpu()
    expected = op(x)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected), (got.flatten()[:4], expected.flatten()[:4])


def test_ones_count_their_elements(backend: lazy_core.BackendImpl) -> None:
    for n in (65535, 65536, 65537 * 2, 1 << 20):
        assert torch.ones(n).to("lazy").sum().item() == n
        assert torch.ones(n, 4).to("lazy").sum(0).cpu().tolist() == [float(n)] * 4


_LONG_CALLS: dict[str, tuple[Callable[..., torch.Tensor], tuple[torch.Tensor, ...], str]] = {
    "cumsum_32768": (lambda x: x.cumsum(0), (torch.ones(32768),), "cumsum"),
    "cumprod_100000": (lambda x: x.cumprod(0), (torch.ones(100000),), "cumprod"),
    "any_100000": (lambda x: x.any(), (torch.cat([torch.zeros(99999), torch.ones(1)]),), "any"),
    "all_dim_70000": (lambda x: x.all(1), (torch.cat([torch.ones(2, 69999), torch.zeros(2, 1)], 1),), "all"),
    "conv1d_long_kernel": (lambda x, w: torch.nn.functional.conv1d(x, w),
                           (torch.ones(1, 1, 70002), torch.ones(3, 1, 70000)), "convolution"),
}


@pytest.mark.parametrize("name", sorted(_LONG_CALLS))
def test_a_call_looping_past_the_limit_is_right(backend: lazy_core.BackendImpl, name: str,
                                                request: pytest.FixtureRequest) -> None:
    """Ops the staging does not cover (a scan, ``any``/``all``, a convolution summing more than
    65,535 products per output) were short on lavapipe (``cumsum`` of 32,768 ones ended with two
    zeros); the Vulkan target runs such a call eagerly (``short_loops.long_loop``), and names it."""
    op, inputs, aten_name = _LONG_CALLS[name]
    if "vulkan" in backend.name:
        request.applymarker(pytest.mark.expect_fallback(f"aten.{aten_name}"))
    got = op(*(x.to("lazy") for x in inputs)).cpu()
    assert torch.equal(got, op(*inputs))
    fell_back = any(k.startswith(f"fallback::aten.{aten_name}") for k in lazy_core.metrics.counters())
    assert fell_back == ("vulkan" in backend.name), lazy_core.metrics.counters()


def test_short_calls_stay_compiled_on_vulkan(backend: lazy_core.BackendImpl) -> None:
    x = torch.arange(1000, dtype=torch.float32)
    got = (x.to("lazy").cumsum(0) + x.to("lazy").gt(500).any()).cpu()
    assert torch.equal(got, x.cumsum(0) + x.gt(500).any())
    assert not any(k.startswith("fallback::") for k in lazy_core.metrics.counters()), lazy_core.metrics.counters()
