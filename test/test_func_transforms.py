"""``torch.func`` on lazy tensors: the ops its batching rules make compile and match eager.

``jacrev``, ``hessian`` and ``vmap(grad(f))`` run a function's backward with the unbatched
operand left at its own shape, so backward ops see operands that broadcast against each other
(``tanh_backward(grad [3, 3], y [3])``), a form plain training never makes. Found by
adversary round 40; strict, so a compile failure fails the test instead of running eagerly.
"""

from __future__ import annotations

import pytest
import torch
from torch.func import grad, hessian, jacrev, vmap

import lazy_core


def test_tanh_backward_of_broadcast_operands_matches_eager(cpu_backend: object) -> None:
    gen = torch.Generator().manual_seed(0)
    y, g = torch.randn(3, generator=gen).tanh(), torch.randn(3, 3, generator=gen)
    want = torch.ops.aten.tanh_backward(g, y)
    got = torch.ops.aten.tanh_backward(g.to("lazy"), y.to("lazy")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_tanh_backward_of_broadcast_half_operands_rounds_once_as_eager(cpu_backend: object, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    y, g = torch.rand(5, generator=gen).to(dtype), torch.randn(4, 5, generator=gen).to(dtype)
    want = torch.ops.aten.tanh_backward(g, y)
    got = torch.ops.aten.tanh_backward(g.to("lazy"), y.to("lazy")).cpu()
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_jacrev_and_hessian_of_tanh_match_eager(cpu_backend: object) -> None:
    x = torch.randn(4, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(jacrev(torch.tanh)(x.to("lazy")).cpu(), jacrev(torch.tanh)(x), rtol=1e-5, atol=1e-6)

    def f(v: torch.Tensor) -> torch.Tensor:
        return torch.tanh(v).sum()

    torch.testing.assert_close(hessian(f)(x.to("lazy")).cpu(), hessian(f)(x), rtol=1e-5, atol=1e-6)


def test_vmap_of_grad_through_tanh_matches_eager(cpu_backend: object) -> None:
    gen = torch.Generator().manual_seed(3)
    w, xs = torch.randn(3, generator=gen), torch.randn(5, 3, generator=gen)

    def loss(weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(weights * x).sum()

    per_sample = vmap(grad(loss), in_dims=(None, 0))
    got = per_sample(w.to("lazy"), xs.to("lazy"))
    lazy_core.mark_step()
    torch.testing.assert_close(got.cpu(), per_sample(w, xs), rtol=1e-5, atol=1e-6)
