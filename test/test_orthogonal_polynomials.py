"""The orthogonal polynomials of ``torch.special`` compile whole on every backend, with eager's
values (lowering/orthogonal_polynomials.py: eager's recurrences as a ``while_loop``,
lowering/loops.py).

Each ran eagerly and cut its graph (twelve OpInfos of issue 15's sweep). The loop's trip count
is data (the order ``n`` is a tensor); a number for ``n`` failed to compile on iree-cpu until
graphs with loops took ``convert-scf-to-cf`` (backends/iree/loops.py), so both forms are here.
"""

from __future__ import annotations

import pytest
import torch

import lazy_core
from lazy_core import metrics

NAMES = [
    *(f"{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw"),
    "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
]


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    special = torch.tensor([1.0, -1.0, 0.0, 0.5, 0.25, float("inf"), -float("inf"), 1.0000001, 2.0, -3.0],
                           dtype=dtype)
    x = torch.cat([special, torch.empty(150, dtype=dtype).uniform_(-9, 9, generator=g),
                   torch.empty(150, dtype=dtype).uniform_(-1.2, 1.2, generator=g)])
    n = torch.randint(-3, 24, x.shape, generator=g).to(dtype)
    n[::5] += 0.5  # eager truncates the order
    n[:10] = torch.tensor([3.0, 4.0, 7.0, 9.0, 12.0, 3.0, 2.0, 400.0, float("nan"), 200.0], dtype=dtype)
    n[10] = float("inf")
    n[11] = 1e30  # beyond int64: counts as negative, as in eager on x86
    n[12] = 129.0  # above float32's Hermite limit: NaN
    return x, n


def _check(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    assert got.dtype == want.dtype, name
    # The recurrences are eager's operations in eager's order (its fused multiply-adds
    # included): exact in practice. The closed forms (``sin((n + 1) acos(x)) / sin(acos(x))``)
    # multiply an ulp of ``acos`` by the order: eager's own float32 U_20(-0.8238147) is 5e-5
    # from the true value, and a backend's acos is another ulp away.
    # Near a zero of the polynomial the same error is absolute (1e-4 of values of order 1).
    tol = 1e-4 if want.dtype == torch.float32 else 1e-10
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_orthogonal_polynomials_compile_and_equal_eager(backend: lazy_core.BackendImpl, dtype: torch.dtype) -> None:
    if dtype == torch.float64 and backend.name == "iree-vulkan":
        pytest.skip("iree-vulkan has no float64 (SPIR-V's GLSL set takes 16/32-bit floats)")
    x, n = _inputs(dtype)
    lx, ln = x.to("lazy"), n.to("lazy")
    results = {name: getattr(torch.special, name)(lx, ln) for name in NAMES}
    lazy_core.mark_step()  # one graph, twelve loops: a fallback fails the test (conftest)
    assert not any(k.startswith("fallback") for k in metrics.counters()), metrics.counters()
    for name in NAMES:
        _check(results[name].cpu(), getattr(torch.special, name)(x, n), name)


def test_orthogonal_polynomials_with_a_number_or_an_integer_order(backend: lazy_core.BackendImpl) -> None:
    x, n = _inputs(torch.float32)
    lx = x.to("lazy")
    got = {
        "t_number": torch.special.chebyshev_polynomial_t(lx, 5),
        "t_int": torch.special.chebyshev_polynomial_t(lx, n.long().to("lazy")),
        "p_number_x": torch.special.legendre_polynomial_p(0.3, n.to("lazy")),
        "h_0d": torch.special.hermite_polynomial_h(lx, torch.tensor(6.0).to("lazy")),
    }
    lazy_core.mark_step()
    want = {
        "t_number": torch.special.chebyshev_polynomial_t(x, 5),
        "t_int": torch.special.chebyshev_polynomial_t(x, n.long()),
        "p_number_x": torch.special.legendre_polynomial_p(0.3, n),
        "h_0d": torch.special.hermite_polynomial_h(x, torch.tensor(6.0)),
    }
    for k in want:
        _check(got[k].cpu(), want[k], k)


def test_half_precision_orthogonal_polynomials_raise_eagers_error(eager_backend: lazy_core.BackendImpl) -> None:
    x = torch.ones(3, dtype=torch.float16)
    for name in ("chebyshev_polynomial_t", "hermite_polynomial_h", "legendre_polynomial_p"):
        fn = getattr(torch.special, name)
        with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for \'Half\''):
            fn(x, x)
        with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for \'Half\''):
            fn(x.to("lazy"), x.to("lazy"))
        with pytest.raises(NotImplementedError, match="BFloat16"):
            fn(x.bfloat16().to("lazy"), 2)


def test_a_second_shape_traces_a_loop_with_no_extra_inputs(backend: lazy_core.BackendImpl) -> None:
    """The OpInfo sweep: a polynomial of a 0-d ``x`` and then of a 5-element one gave an invalid
    module ("region branch point has 9 operands, but region successor needs 5 inputs"):
    ``torch._higher_order_ops.while_loop`` traces through ``torch.compile``, whose automatic
    dynamic shapes lifted the second trace's sizes into extra loop inputs. The decomposition
    calls the HOP itself."""
    for x, n in ((torch.tensor(0.7), torch.tensor(3.0)), (torch.linspace(-3, 3, 5), torch.tensor(3.6)),
                 (torch.linspace(-2, 2, 12).view(3, 4), torch.arange(4.0))):
        got = torch.special.hermite_polynomial_h(x.to("lazy"), n.to("lazy")).cpu()
        _check(got, torch.special.hermite_polynomial_h(x, n), f"shape {tuple(x.shape)}")
