"""Special functions compile whole on every backend, with eager's values (lowering/special.py).

torch-mlir lowers none of ``erfc``, ``erfcx``, ``log_ndtr``, ``ndtri``, ``i0``/``i0e``/``i1``/
``i1e``, the ``modified_bessel_*`` and ``scaled_modified_bessel_*`` functions and
``spherical_bessel_j0`` and the Bessel functions J0, J1, Y0, Y1: each ran eagerly and cut its
graph (19 OpInfos of issue 15's sweep).
The test's reference is eager in float64 (the float32 answer
correctly rounded): eager's own float32 ``erfcx`` of a negative argument is 3e-6 off (ours 3e-7).
"""

from __future__ import annotations

import math

import pytest
import torch

import lazy_core

S = torch.special
FUNCTIONS = {
    "erfc": torch.erfc, "erfcx": S.erfcx, "log_ndtr": S.log_ndtr, "ndtri": S.ndtri,
    "i0": torch.i0, "i0e": S.i0e, "i1": S.i1, "i1e": S.i1e,
    "modified_bessel_i0": S.modified_bessel_i0, "modified_bessel_i1": S.modified_bessel_i1,
    "modified_bessel_k0": S.modified_bessel_k0, "modified_bessel_k1": S.modified_bessel_k1,
    "scaled_modified_bessel_k0": S.scaled_modified_bessel_k0,
    "scaled_modified_bessel_k1": S.scaled_modified_bessel_k1, "spherical_bessel_j0": S.spherical_bessel_j0,
}


def _inputs(dtype: torch.dtype, flushes_subnormals: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    special = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 8.0, -8.0, math.inf, -math.inf, math.nan, 1e-30,
               -1e-30, 1e-3, 1e-38, 30.0, -30.0, 90.0, -90.0, 700.0, 0.075, 0.925, 1e-10, 1 - 1e-7, 6.2, -9.0]
    tiny = torch.finfo(dtype).tiny
    x = torch.cat([torch.tensor(special, dtype=dtype), torch.randn(1000, generator=g, dtype=dtype) * 4,
                   torch.rand(1000, generator=g, dtype=dtype), torch.randn(200, generator=g, dtype=dtype) * 40,
                   torch.logspace(math.log10(tiny), 0, 300, dtype=dtype), torch.tensor([tiny / 4], dtype=dtype)])
    if flushes_subnormals:  # iree-cpu reads a subnormal input as 0 (test_subnormals.py)
        x = x[(x.abs() >= tiny) | (x == 0) | torch.isnan(x)]
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_special_functions_compile_and_equal_eager(backend: lazy_core.BackendImpl, dtype: torch.dtype) -> None:
    if dtype == torch.float64 and backend.name == "iree-vulkan":
        pytest.skip("iree-vulkan has no float64 (SPIR-V's GLSL set takes 16/32-bit floats)")
    x = _inputs(dtype, backend.flushes_subnormals)
    lazy_x = x.to("lazy")
    results = {name: fn(lazy_x) for name, fn in FUNCTIONS.items()}
    lazy_core.mark_step()  # one graph for all of them: a fallback fails the test (conftest)
    rtol = 1e-5 if dtype == torch.float32 else 1e-12  # eager float32 log_ndtr is 8e-6 off at x = 12
    for name, fn in FUNCTIONS.items():
        want = fn(x.double()).to(dtype)
        overflowed = ~torch.isfinite(fn(x))  # eager's float32 i0(90) is inf (exp(90) overflows): so is ours
        want[overflowed] = fn(x)[overflowed]
        got = results[name].cpu()
        assert got.dtype == want.dtype, name
        # Results below the smallest normal may be flushed (a backend that flushes), else exact.
        torch.testing.assert_close(got, want, rtol=rtol, atol=torch.finfo(dtype).tiny, equal_nan=True, msg=lambda m, name=name: f"{name}: {m}")
        special = ~torch.isfinite(want) | (want == 0)
        assert torch.equal(got[special].isnan(), want[special].isnan()), name
        assert torch.equal(got[special & ~want.isnan()], want[special & ~want.isnan()]), name  # inf, signs


def test_special_functions_of_other_dtypes_and_their_gradients(backend: lazy_core.BackendImpl) -> None:
    """Integers give the default dtype, half precision stays half (computed in float32) or raises
    eager's NotImplementedError where eager has no half kernel, and the
    gradients (``i0``'s is ``i1``, ``i0e``'s and ``i1e``'s combine both) compile and match."""
    ints = torch.tensor([-3, 0, 1, 2, 5, 9])
    halves = torch.tensor([-3.5, -0.25, 0.0, 0.7, 2.0, 9.0], dtype=torch.float16)
    forms = {}
    for name in ("erfc", "erfcx", "i0", "i1e", "modified_bessel_k0", "spherical_bessel_j0", "log_ndtr"):
        forms[name] = (FUNCTIONS[name](ints), FUNCTIONS[name](ints.to("lazy")))
    for name in ("erfc", "i0", "i0e", "i1", "i1e"):
        forms[f"half {name}"] = (FUNCTIONS[name](halves), FUNCTIONS[name](halves.to("lazy")))
    for name in ("erfcx", "log_ndtr", "ndtri", "modified_bessel_k1", "spherical_bessel_j0"):
        for t in (halves, halves.to(torch.bfloat16)):
            with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for'):
                FUNCTIONS[name](t)
            with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for'):
                FUNCTIONS[name](t.to("lazy"))
    grads = {}
    for device in ("cpu", "lazy"):
        x = torch.tensor([-9.5, -2.0, -0.3, 0.0, 0.4, 1.5, 7.0, 12.0], device=device, requires_grad=True)
        loss = (torch.i0(x) + S.i0e(x) * 2 + S.i1e(x) + torch.erfc(x) + S.erfcx(x.abs()) + S.log_ndtr(x)).sum()
        loss.backward()
        grads[device] = (loss.detach().cpu(), x.grad.cpu())
    lazy_core.mark_step()
    for name, (want, got) in forms.items():
        got = got.cpu()
        assert got.dtype == want.dtype, name
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda m, name=name: f"{name}: {m}")
    torch.testing.assert_close(grads["lazy"], grads["cpu"], rtol=1e-5, atol=1e-5)



BESSEL = {"bessel_j0": S.bessel_j0, "bessel_j1": S.bessel_j1, "bessel_y0": S.bessel_y0, "bessel_y1": S.bessel_y1}


def _bessel_inputs(flushes_subnormals: bool) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    special = [0.0, -0.0, 1e-30, 1e-6, 2.0, -2.0, 4.99999, 5.0, -5.0, 5.0001, 7.0, -7.0, 30.0, 1e4, -1e4, 1e20,
               1e30, -1e30, math.inf, -math.inf, math.nan]
    x = torch.cat([torch.tensor(special), torch.randn(1000, generator=g) * 8, torch.rand(500, generator=g) * 6,
                   torch.randn(200, generator=g) * 1000, torch.logspace(-37, 37, 150)])
    if flushes_subnormals:
        x = x[(x.abs() >= torch.finfo(x.dtype).tiny) | (x == 0) | torch.isnan(x)]
    return x


def test_bessel_functions_compile_and_equal_eager(backend: lazy_core.BackendImpl) -> None:
    """J0, J1, Y0, Y1 in float32 (lowering/special.py): one graph, eager's float32 values. The
    reference is eager's float32 kernel itself, not float64: beyond 5 both round the phase
    ``x - pi/4`` to float32 before its cosine, which decides the digits at large x (at 1e20 eager's
    float32 J0 is 6.02e-11, its float64 6.10e-11). Near the functions' zeros only the absolute
    error is small, hence ``atol``."""
    x = _bessel_inputs(backend.flushes_subnormals)
    results = {name: fn(x.to("lazy")) for name, fn in BESSEL.items()}
    lazy_core.mark_step()  # a fallback fails the test (conftest)
    for name, fn in BESSEL.items():
        want, got = fn(x), results[name].cpu()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-6, equal_nan=True,
                                   msg=lambda m, name=name: f"{name}: {m}")
        special = ~torch.isfinite(want) | (want == 0)
        assert torch.equal(got[special & ~want.isnan()], want[special & ~want.isnan()]), name  # -inf, signs
        assert torch.equal(torch.signbit(got[special]), torch.signbit(want[special])), name


def test_float64_bessel_functions_run_eagerly(backend: lazy_core.BackendImpl, request: pytest.FixtureRequest) -> None:
    """float64 keeps the ATen op (their cosine is not decomposed in float64: lowering/trig.py), so
    it runs eagerly, with eager's values."""
    if backend.name != "eager":
        request.applymarker(pytest.mark.expect_fallback("aten.special_bessel"))
    x = torch.tensor([-3.0, 0.0, 0.5, 4.0, 12.0, 1e6], dtype=torch.float64)
    for fn in BESSEL.values():
        torch.testing.assert_close(fn(x.to("lazy")).cpu(), fn(x), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", BESSEL)
def test_half_bessel_functions_raise_like_eager(backend: lazy_core.BackendImpl, name: str) -> None:
    """Eager has no float16/bfloat16 loop for J0, J1, Y0 and Y1 and raises; lazy
    returned numbers computed in float32 (adversarial run). The lazy call raises eager's error."""
    fn = getattr(S, name)
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.tensor([0.5, 2.0], dtype=dtype)
        with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for'):
            fn(x)
        with pytest.raises(NotImplementedError, match=f'"{name}_cpu" not implemented for'):
            fn(x.to("lazy"))
