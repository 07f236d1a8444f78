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


_MIXED_HALF_OPERANDS = {
    "bf16 grad [64], f16 y []": (torch.bfloat16, (64,), torch.float16, ()),
    "bf16 grad [64], f32 y []": (torch.bfloat16, (64,), torch.float32, ()),
    "f16 grad [64], bf16 y []": (torch.float16, (64,), torch.bfloat16, ()),
    "f16 grad [4, 64], f32 y []": (torch.float16, (4, 64), torch.float32, ()),
    "bf16 grad [], f16 y [64]": (torch.bfloat16, (), torch.float16, (64,)),
}


@pytest.mark.parametrize("case", list(_MIXED_HALF_OPERANDS))
def test_tanh_backward_casts_each_operand_to_the_result_dtype_first(cpu_backend: object, case: str) -> None:
    """Eager's TensorIterator casts each operand to the common dtype before the float32 math:
    ``tanh_backward(g_bf16 [4], y_f16 [])`` (a bf16 result) uses y rounded to bfloat16. The
    decomposition upcast y straight to float32, and under bf16 emulation a float16 (or 0-d
    float32) operand of a bf16 result was never rounded to bf16 (lowering/context.py
    ``_inline``, bf16.ROUNDS_OPERANDS): every element an ulp or more off (adversary round 41)."""
    g_dtype, g_shape, y_dtype, y_shape = _MIXED_HALF_OPERANDS[case]
    gen = torch.Generator().manual_seed(4)
    g = (torch.randn(g_shape, generator=gen) * 3).to(g_dtype)
    y = torch.randn(y_shape, generator=gen).tanh().to(y_dtype)
    want = torch.ops.aten.tanh_backward(g, y)
    got = torch.ops.aten.tanh_backward(g.to("lazy"), y.to("lazy")).cpu()
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)


def test_tanh_backward_decomposition_casts_to_the_result_dtype_first() -> None:
    """The decomposition itself, on CPU tensors: exact against eager's kernel for mixed dtypes."""
    from lowering.decompositions import _tanh_backward

    gen = torch.Generator().manual_seed(5)
    for g_dtype, y_dtype in ((torch.bfloat16, torch.float16), (torch.bfloat16, torch.float32),
                             (torch.float16, torch.bfloat16), (torch.float16, torch.float64)):
        g = (torch.randn(64, generator=gen) * 3).to(g_dtype)
        y = torch.randn((), generator=gen).tanh().to(y_dtype)
        want = torch.ops.aten.tanh_backward(g, y)
        assert torch.equal(_tanh_backward(g, y), want), (g_dtype, y_dtype)
