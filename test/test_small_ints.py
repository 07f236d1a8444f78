"""uint8 and int8 tensors on every backend, against eager PyTorch on the CPU.

torch-mlir cannot convert values to 8-bit integers inside most op lowerings
and reads uint8 as signed where it converts from it, so these graphs failed
to compile (``torch.ones(5, dtype=torch.uint8)``), gave signed results
(``u8.sum()``, ``u8.float() / 255``) or killed the process (``u8 * 0 + 1``
on the reference backend). ``lowering/small_ints.py`` computes them in int32
between explicit casts. Each test puts a group of ops in one graph (one
compile per backend) and compares every result's dtype and values; the
suite is strict, so a compile failure fails the test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

import lazy_core

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SMALL = [torch.uint8, torch.int8]
#: int16 too where IREE got it wrong: ``-x`` of -32768 (llvm-cpu), ``%`` of it (Vulkan).
WITH_INT16 = [*SMALL, torch.int16]

#: Values at both ends of each range, and the pairs whose results wrap.
_X = {
    torch.uint8: [0, 1, 7, 127, 128, 200, 255, 3],
    torch.int8: [-128, -1, 0, 1, 127, -77, 50, -128],
    torch.int16: [-32768, -1, 0, 1, 32767, -300, 12345, -3],
}
_Y = {
    torch.uint8: [3, 255, 2, 5, 129, 7, 16, 1],
    torch.int8: [3, -1, 2, -5, 7, 7, -128, -1],
    torch.int16: [3, -1, 2, -5, 7, 300, -128, 1],
}
_MASK = [True, False, True, False, False, True, True, False]


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.tensor(_X[dtype], dtype=dtype), torch.tensor(_Y[dtype], dtype=dtype), torch.tensor(_MASK)


def check(fn: Callable[..., list[torch.Tensor]], *inputs: torch.Tensor) -> None:
    """``fn`` on lazy copies of ``inputs``, in one graph, equals ``fn`` on the CPU:
    dtype, shape and values (integers exactly)."""
    expected = fn(*inputs)
    got = fn(*[t.to("lazy") for t in inputs])
    lazy_core.mark_step()
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        torch.testing.assert_close(g.cpu(), e, msg=lambda m, i=i: f"result {i}: {m}")


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_creation(backend, dtype):
    def fn(x, y, m):
        dev = x.device
        return [
            torch.ones(5, dtype=dtype, device=dev), torch.zeros(5, dtype=dtype, device=dev),
            torch.full((5,), 3, dtype=dtype, device=dev), torch.full((2, 3), 127, dtype=dtype, device=dev),
            torch.arange(10, dtype=dtype, device=dev), torch.ones_like(x), torch.zeros_like(x) + x,
            torch.full_like(x, 7), x.new_full((3,), 5), x.new_ones(2), x.clone(),
        ]

    check(fn, *_inputs(dtype))


@pytest.mark.parametrize("dtype", WITH_INT16, ids=str)
def test_arithmetic_wraps(backend, dtype):
    def fn(x, y, m):
        return [x + y, x - y, x * y, x + 3, x - 3, 3 - x, x * 3, x * 100, x * 0 + 1, -x, x.abs(),
                x.clone().add_(5), x.clone().mul_(3), x + (-1), x * y * y]

    check(fn, *_inputs(dtype))


def test_uint8_times_zero_plus_one_does_not_crash_the_process(backend):
    """The reference backend's segfault (torch-mlir's conversion of the scalar
    to a byte returned a null value that the linalg pattern then used), in a
    child process so that a crash fails this test instead of ending the run."""
    code = (
        "import torch, lazy_core\n"
        f"lazy_core.init({backend.name!r})\n"
        "r = (torch.tensor([1, 2], dtype=torch.uint8).to('lazy') * 0 + 1).cpu()\n"
        "assert r.tolist() == [1, 1] and r.dtype == torch.uint8, r\n"
        "print('ok')\n"
    )
    env = dict(os.environ, LAZY_STRICT="1", PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), (p.returncode, p.stderr[-2000:])


@pytest.mark.parametrize("dtype", WITH_INT16, ids=str)
def test_division_and_remainder(backend, dtype):
    def fn(x, y, m):
        return [x // y, x % y, torch.fmod(x, y), torch.div(x, y, rounding_mode="trunc"),
                torch.div(x, y, rounding_mode="floor"), x / y, x // 3, x % 3, x // 7]

    check(fn, *_inputs(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_scalar_operands_wrap_to_the_tensor_dtype(backend, dtype):
    """PyTorch converts a Python scalar to the tensor's dtype before comparing
    or dividing: ``u8 > 300`` compares with 44, ``u8 // -1`` divides by 255."""
    def fn(x, y, m):
        return [x > 300, x == 300 - 256, x < -1, x // 300, x % 300, x // -1, x > 200, x <= -200,
                torch.maximum(x, torch.tensor(300, device=x.device)), x // torch.tensor(300, device=x.device)]

    check(fn, *_inputs(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_comparisons_and_extrema(backend, dtype):
    """Ordering sees 200 as 200 (not -56), and the extrema's initial values
    are 8-bit constants that torch-mlir could not make (a crash on reference)."""
    def fn(x, y, m):
        return [x < y, x > y, x <= y, x >= y, x == y, x != y, x != 0, x < 3, x >= 100, torch.maximum(x, y),
                torch.minimum(x, y), x.clamp(2, 100), x.clamp(min=5), x.clamp(max=-3), x.max(), x.min(),
                torch.maximum(x, m), x == m]

    check(fn, *_inputs(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_bitwise(backend, dtype):
    """``x | 0x40`` and ``x ^= 0x0F`` have no torch-dialect op (they ran
    eagerly); the others, with bool operands too, stay exact in int32."""
    def fn(x, y, m):
        z = x.clone()
        z ^= 0x0F
        return [x & y, x | y, x ^ y, ~x, x & 0x0F, x & -2, ~(x & y), x | 0x40, x ^ 0x0F, x ^ -1, x | m,
                m | 0x10, m ^ True, z, x.clone().bitwise_or_(0x21)]

    check(fn, *_inputs(dtype))


@pytest.mark.parametrize("dtype", [*SMALL, torch.int16, torch.int32, torch.int64], ids=str)
def test_shifts_by_any_amount(backend, dtype):
    """PyTorch defines a shift by a negative amount or by the width or more
    (everything shifted out; the sign stays for a signed right shift);
    ``shli``/``shrsi`` make such a result poison. By a number too: int64
    ``x << 70`` gave ``x << 6`` and ``x >> 64`` gave ``x`` (all backends)."""
    def fn(x, y, m):
        amounts = torch.tensor([0, 1, 7, 8, 9, -1, 70, 3], device=x.device).to(x.dtype)
        return [x << 1, x >> 1, x >> 3, x << 9, x >> 9, x << (y & 7), x >> (y & 7), x << amounts,
                x >> amounts, torch.bitwise_left_shift(x, amounts), torch.bitwise_right_shift(x, amounts),
                x << 70, x >> 70, x << 64, x >> 64, x << 33, x >> 33, x << -1, x >> -1,
                torch.bitwise_left_shift(x, 40), torch.bitwise_right_shift(x, 40)]

    x = torch.tensor(_X.get(dtype, [-(2 ** 30), -1, 0, 1, 2 ** 30, -300, 12345, -3]), dtype=dtype)
    y = torch.tensor(_Y.get(dtype, _Y[torch.int16]), dtype=dtype)
    check(fn, x, y, torch.tensor(_MASK))


@pytest.mark.parametrize("dtype", [*WITH_INT16, torch.int32, torch.int64], ids=str)
def test_integer_fmod_by_a_number(backend, dtype):
    """``torch.fmod(int_tensor, 3)`` failed to compile on every compiled backend
    (torch-mlir lowers no integer ``fmod.Scalar``); it runs as ``fmod.Tensor``
    with a 0-d divisor now (lowering/decompositions.py, ``_fmod``)."""
    def fn(x, y, m):
        return [torch.fmod(x, 3), torch.fmod(x, -3), torch.fmod(x, 1), torch.fmod(x, 7) + x]

    x = torch.tensor(_X.get(dtype, [-(2 ** 30), -1, 0, 1, 2 ** 30, -300, 12345, -3]), dtype=dtype)
    check(fn, x, x, torch.tensor(_MASK))


@pytest.mark.parametrize("dtype", [*WITH_INT16, torch.int32, torch.int64], ids=str)
def test_integer_pow_with_a_tensor_exponent(backend, dtype):
    """``int_t ** int_t`` and ``2 ** int_t`` failed to compile on every compiled
    backend (torch-mlir: "non-floating point dtype"); they are exponentiation by
    squaring now (``_pow_integer_exponent``): wrapping products, negative
    exponents by the CPU kernel's rule (1, +-1 or 0), broadcasting, mixed dtypes."""
    low = -3 if dtype != torch.uint8 else 0
    g = torch.Generator().manual_seed(5)
    base = torch.randint(low, 9, (4, 6), generator=g).to(dtype)
    base[0, :4] = torch.tensor([0, 1, -1 if low else 1, 2])
    exponent = torch.randint(low, 70, (6,), generator=g).to(dtype)
    exponent[:3] = torch.tensor([0, low, 1])

    def fn(b, e, m):
        return [torch.pow(b, e), b ** e.unsqueeze(1)[:4, :1], torch.pow(3, e), torch.pow(-1, e) if low else e,
                torch.pow(b, e.to(torch.int32)), torch.pow(-2 if low else 2, e)]

    check(fn, base, exponent, torch.tensor(_MASK))


def test_xlogy_compiles_and_matches_eager(backend):
    """``xlogy`` (and ``kl_div``'s backward) failed to compile: PyTorch's
    decomposition makes a 0-d f64 NaN literal torch-mlir cannot legalize;
    its Scalar forms ran eagerly (no torch-dialect definition)."""
    def fn(a, b, m):
        ints = a.nan_to_num(4.0, 5.0).int(), b.nan_to_num(6.0, 7.0).int()  # NaN to int: undefined
        return [torch.xlogy(a, b), torch.xlogy(*ints), torch.xlogy(a, 2.0), torch.xlogy(ints[0], 2.5),
                torch.xlogy(3, b), torch.special.xlogy(2.0, ints[1])]

    nan, inf = float("nan"), float("inf")
    a = torch.tensor([0.0, 0.0, 1.5, -2.0, 3.0, nan, 0.0, 2.0])
    b = torch.tensor([0.0, nan, 2.0, 0.5, 0.0, 1.0, inf, -1.0])
    got = fn(a.to("lazy"), b.to("lazy"), None)
    for g, want in zip(got, fn(a, b, None), strict=True):
        torch.testing.assert_close(g.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("dtype", [*WITH_INT16, torch.int32, torch.int64], ids=str)
def test_nan_to_num_of_integers_is_a_copy(backend, dtype):
    """``nan_to_num`` of an integer or bool tensor failed to lower on every backend (torch-mlir
    legalizes only the floating form); eager returns a copy, whatever the replacement values."""
    def fn(x, y, m):
        return [torch.nan_to_num(x), x.nan_to_num(nan=2.0, posinf=1, neginf=-1), m.nan_to_num(), y.nan_to_num() + 1]

    x, y, m = _inputs(dtype if dtype in _X else torch.int16)
    check(fn, x.to(dtype), y.to(dtype), m)
    if dtype in (torch.int32, torch.int64):
        check(lambda x: [x.nan_to_num(), x.nan_to_num(0.0, 0.0, 0.0)], torch.tensor([-(2 ** 31), 5, 2 ** 31 - 1], dtype=dtype))


def test_bool_sorts_false_first(backend):
    """torch-mlir compares i1 as signed (True is -1): ``mask.sort()`` put True
    first and ``descending=True`` False first (reference, iree-cpu). Fixed in
    lowering/decompositions.py (``_sort``): a bool tensor is sorted as uint8."""
    def fn(x, y, m):
        grid = m.reshape(2, 4)
        return [m.sort()[0], m.sort(descending=True)[0], torch.msort(grid), grid.sort(1)[0],
                m.int().sort()[0], (m.sort()[1] >= 0).all()]

    check(fn, *_inputs(torch.uint8))


def test_casts(backend):
    """uint8 to and from every dtype. A float above 127 converts through int32
    as on the CPU (iree-cpu saturated 200.0 to 127), and a cast of a constant
    to uint8 must not become a uint8 constant, which torch-mlir makes invalid."""
    def fn(x, y, m, f):
        dev = x.device
        return [x.float(), x.double(), x.half(), x.long(), x.int(), x.to(torch.int16), x.to(torch.int8),
                x.to(torch.int8).to(torch.uint8), x.bool(), (x.float() * 0.5 + 0.25).to(torch.uint8),
                (x.long() * 3 + 1000).to(torch.uint8), m.to(torch.uint8), y.to(torch.int8).float(),
                f.to(torch.uint8), (f - 128).to(torch.int8), (f * 100).to(torch.int16), f.double().to(torch.uint8),
                torch.zeros(3, device=dev).to(torch.uint8), torch.ones_like(x, dtype=torch.float32).to(torch.uint8),
                torch.ones_like(x), torch.full_like(x, 200).to(torch.int8)]

    # In range only: C++ leaves the conversion of an out-of-range float undefined.
    floats = torch.tensor([0.0, 127.5, 200.7, 255.0, 1.5, 128.0, 99.9, 254.9])
    check(fn, *_inputs(torch.uint8), floats)


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_reductions(backend, dtype):
    """``sum`` of uint8 is int64 in PyTorch, and must see 200 as 200."""
    def fn(x, y, m):
        x2 = x.reshape(2, 4)
        values, indices = x2.max(1)
        return [x.sum(), x2.sum(1), x.sum(dtype=dtype), x2[:, :2].prod(1), x.max(), x.min(), x2.amax(1),
                x2.amin(0), values, indices, x.argmax(), x.argmin(), x.cumsum(0), x.sort()[0], x.sort()[1],
                x.topk(3)[0]]

    check(fn, *_inputs(dtype))


@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_mixed_dtypes(backend, dtype):
    """An 8-bit operand converted to another dtype by promotion (u8 + i8 is
    int16, u8 * f32 is f32) keeps its value: no sign extension of 200."""
    def fn(x, y, m):
        other = torch.int8 if dtype == torch.uint8 else torch.uint8
        dev = x.device
        return [x + y.to(other), x * torch.ones(8, device=dev), x + 1.5, x * 0.5, x + torch.arange(8, device=dev),
                torch.cat([x, torch.arange(3, device=dev)]), torch.where(m, x, torch.tensor(300, device=dev)),
                x.float() @ torch.ones(8, 2, device=dev), x.reshape(2, 4).float() @ y.reshape(4, 2).float()]

    check(fn, *_inputs(dtype))


@pytest.mark.expect_fallback("aten.index.Tensor")
@pytest.mark.filterwarnings("ignore:indexing with dtype torch.uint8")
@pytest.mark.parametrize("dtype", SMALL, ids=str)
def test_masks(backend, dtype):
    """Indexing with a boolean or uint8 mask (its result's size depends on the
    data, so that op runs on the CPU and tracing continues from its result),
    and the mask updates that stay in the graph."""
    def fn(x, y, m):
        z = x.clone()
        z[m] = 200 - 256 * (dtype == torch.int8)
        picked = x[m]
        return [picked, picked * 3, x[m.to(torch.uint8)] // 3, torch.where(m, x, y), x.masked_fill(m, 7),
                z, z.sum(), x.float()[m.to(torch.uint8)] / 255, m[m]]

    check(fn, *_inputs(dtype))


def test_image_preprocessing(backend):
    """The common uint8 image pipeline: HWC bytes to normalized CHW floats, and back."""
    image = torch.arange(4 * 5 * 3, dtype=torch.int64).mul(37).remainder(256).to(torch.uint8).reshape(4, 5, 3)
    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])

    def fn(img, mean, std):
        x = img.permute(2, 0, 1).float() / 255
        normalized = (x - mean[:, None, None]) / std[:, None, None]
        back = (x * 255).round().to(torch.uint8)
        flipped = img.flip(1).to(torch.float32).div_(255)
        return [x, normalized, back, flipped, img.float().mean(), 255 - img, (img > 127).to(torch.uint8) * 255]

    check(fn, image, mean, std)
