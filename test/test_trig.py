"""``sin``, ``cos``, ``tan``, ``atan`` and ``atan2`` against eager PyTorch on every backend
(lowering/trig.py).

IREE's ``math.sin``/``math.cos`` reduce their argument with ``floor`` and one
float32 pi/2: small negative arguments and large ones came back 10^4 to
10^9 ulps off on iree-cpu and iree-vulkan; its ``atan`` (and so ``atan2``)
was 40 ulps off near 0.66. The lowering reduces exactly and
evaluates polynomials in float64; these tests hold every backend to one
float32 ulp of the true value (eager is within one too) over every float32
exponent, with eager's NaN, infinities and signs of zeros.
"""

from __future__ import annotations

import pytest
import torch

import lazy_core

_FNS = {"sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "atan": torch.atan}
_TINIEST_NORMAL = torch.finfo(torch.float32).tiny


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> torch.Tensor:
    """|got - exact| in float32 ulps of the exact (float64) value."""
    e = exact.abs().float()
    ulp = (torch.nextafter(e, torch.full_like(e, float("inf"))) - e).double()
    return (got.double() - exact).abs() / ulp


def _check(name: str, *args: torch.Tensor) -> None:
    fn = _FNS.get(name, torch.atan2)
    got = fn(*[a.to("lazy") for a in args])
    lazy_core.mark_step()
    got = got.cpu()
    want = fn(*args)
    assert got.dtype == want.dtype
    assert torch.equal(got.isnan(), want.isnan()), f"{name}: NaN where eager has none, or none where it has"
    zeros = want == 0
    assert torch.equal(got[zeros].signbit(), want[zeros].signbit()), f"{name}: the sign of a zero differs"
    exact = fn(*[a.double() for a in args])
    normal = exact.isfinite() & ((exact.abs() >= _TINIEST_NORMAL) | (exact == 0))  # iree-cpu flushes subnormals
    err = _ulps(got, exact)[normal]
    worst = int(torch.where(normal, _ulps(got, exact), 0).argmax())
    at = ", ".join(repr(float(a[worst])) for a in args)
    assert err.max() <= 1.0, (f"{name}({at}) = {float(got[worst])!r}, eager {float(want[worst])!r}: "
                              f"{float(err.max()):.3g} ulps")


@pytest.mark.parametrize("name", list(_FNS))
def test_small_negative_and_large_arguments_match_eager(backend, name):
    """The values the sweep found: ``sin(-1e-8)`` was 6.2e-08 on iree-cpu (``floor`` put every
    small negative argument in the quadrant below), ``sin(1316.3)`` -3.4e-05 (eager -7.1e-05),
    ``sin(980619.9)`` 0.0248 (eager -0.0025), ``tan(-251614.9)`` -59493.7 (eager 143.2)."""
    x = torch.tensor([-1e-30, -1e-20, -1e-10, -1e-8, -1e-6, -1e-4, -1e-2, 1e-8, -0.1, -1.0, -3.0, 3.1416557,
                      -31.41612, 7.8540754, -26.703598, 1316.3274, 5317.146, 980619.875, 1279192.125,
                      -251614.875, 1e4, -1e4, 102940.375, 1e22, 3.4028235e38, -3.4028235e38, 1.5707964,
                      3.1415927, 6.2831855, 0.0, -0.0, float("inf"), -float("inf"), float("nan")])
    _check(name, x)


@pytest.mark.parametrize("name", list(_FNS))
def test_every_float32_exponent_is_reduced_exactly(backend, name):
    """Random bit patterns cover every exponent, both signs. Subnormal arguments are left
    out: iree-cpu flushes float32 subnormals in all arithmetic (docs/amp.md)."""
    g = torch.Generator().manual_seed(7)
    x = torch.randint(0, 2 ** 31 - 1, (20000,), generator=g).to(torch.int32).view(torch.float32)
    x = torch.cat([x, -x])
    x = x[~((x.abs() < _TINIEST_NORMAL) & (x != 0))]
    _check(name, x)


def test_atan2_over_every_float32_exponent_and_c99_special_values(backend):
    """atan2 was 40 ulps off on IREE (its first-quadrant angle is atan's); quadrants, signed
    zeros and infinities by C99's rules (``atan2(-0.0, -0.0) = -pi``, ``atan2(inf, -inf) = 3pi/4``)."""
    g = torch.Generator().manual_seed(9)
    x = torch.randint(0, 2 ** 31 - 1, (20000,), generator=g).to(torch.int32).view(torch.float32)
    x = torch.cat([x, -x])
    x = x[~((x.abs() < _TINIEST_NORMAL) & (x != 0))]
    y = x[torch.randperm(len(x), generator=g)]
    _check("atan2", y, x)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1.0, -1.0, 0.6593935])
    ys, xs = torch.meshgrid(special, special, indexing="ij")
    _check("atan2", ys.flatten(), xs.flatten())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64], ids=str)
def test_narrow_and_integer_inputs_match_eager(backend, dtype):
    """float16 and bfloat16 are computed in float32 by eager and rounded: equal results;
    an integer tensor's result is float32. ``atan2`` of two of them too."""
    g = torch.Generator().manual_seed(8)
    x = (torch.rand(500, generator=g) * 400 - 200).to(dtype)
    for name, fn in _FNS.items():
        got = fn(x.to("lazy")).cpu()
        want = fn(x)
        assert got.dtype == want.dtype
        if dtype == torch.int64:
            err = _ulps(got, fn(x.double()))
            assert err.max() <= 1.0, name
        else:
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)
    y = x.flip(0)
    got, want = torch.atan2(y.to("lazy"), x.to("lazy")).cpu(), torch.atan2(y, x)
    assert got.dtype == want.dtype
    if dtype != torch.int64:
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg="atan2")


def test_gradient_of_sin_at_large_arguments(backend):
    """The backward is ``cos(x) * grad``: decomposed the same way."""
    x = torch.tensor([1316.3274, 5317.146, -1e-8, 980619.875])
    lx = x.to("lazy").requires_grad_()
    torch.sin(lx).sum().backward()
    got = lx.grad.cpu()
    want = torch.cos(x.double())
    assert _ulps(got, want).max() <= 1.0
