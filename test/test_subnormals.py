"""Float subnormals: kept as eager keeps them, or flushed where the backend declares it.

Found by the fuzzer's inexact constants (seed 4002): on iree-cpu ``torch.full((3, 4),
1e-40) // logcumsumexp(...)`` gave NaN where eager gives 1.0, and ``zeros < 1e-40`` was
False. IREE's CPU runtime switches on flush-to-zero and denormals-are-zero in every thread
that runs a dispatch, and no flag turns that off, so iree-cpu computes as eager does under
``torch.set_flush_denormal(True)``. The backend declares it
(``BackendImpl.flushes_subnormals``), and this test holds each backend to its declaration
on both sides: a backend that keeps subnormals must equal eager bit for bit, one that
declares flushing must equal eager with flushing on.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

_TINY = 1e-40  # a float32 subnormal (float32's smallest normal is 2**-126 ~ 1.18e-38)

#: Each takes the tensor and the subnormal Python number it may use.
_PROGRAMS = {
    "scale": lambda t, tiny: t * 1.5,
    "divide_by_itself": lambda t, tiny: t / t,
    "divide_by_a_scan": lambda t, tiny: t / torch.logcumsumexp(t, 1),
    "compare_with_a_subnormal_number": lambda t, tiny: torch.zeros_like(t) < tiny,
    "add_a_subnormal_number": lambda t, tiny: t + tiny,
    "sum": lambda t, tiny: t.sum(1),
}


@contextlib.contextmanager
def _flushing(on: bool):
    """Eager's arithmetic with flush-to-zero and denormals-are-zero switched on or not."""
    if on and not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals (torch.set_flush_denormal returned False)")
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@pytest.mark.parametrize("case", sorted(_PROGRAMS))
def test_subnormals_follow_the_backends_declaration(backend, case):
    x = torch.full((3, 4), _TINY)
    x[1] = -3e-42
    x[2] = 1.0
    kept = _PROGRAMS[case](x, _TINY)
    got = _PROGRAMS[case](x.to("lazy"), _TINY).cpu()
    assert got.dtype == kept.dtype
    if not backend.flushes_subnormals:
        torch.testing.assert_close(got, kept, rtol=0, atol=0, equal_nan=True)
        return
    with _flushing(True):
        # Flushing reads a subnormal operand as zero, the number too (eager's scalar
        # path does not flush a Python number, so it is given as 0 here).
        flushed = _PROGRAMS[case](x, 0.0)
    # Which operations see the flush is the hardware's business (a comparison the
    # compiler turns into integer code keeps them): each element is one of the two.
    same = lambda a, b: (a == b) | (a.isnan() & b.isnan()) if a.is_floating_point() else a == b  # noqa: E731
    assert bool((same(got, kept) | same(got, flushed)).all()), (got, kept, flushed)
    assert not torch.equal(kept, flushed), "the case does not tell flushing from keeping"


def test_iree_cpu_declares_the_flushing_its_runtime_does():
    """The declaration is what the fuzzer and the test above trust: a default that said
    "keeps subnormals" on iree-cpu would report every subnormal as a wrong value."""
    from lazy_core.backend import BackendImpl

    assert BackendImpl.flushes_subnormals is False  # PyTorch's default
    pytest.importorskip("iree.runtime")
    from lazy_mlir.backends.iree.backend import IreeBackend

    assert IreeBackend("iree-cpu").flushes_subnormals
    assert not IreeBackend("iree-vulkan").flushes_subnormals


_LOG_PROGRAMS = {
    "log": lambda t: torch.log(t),
    "log2": lambda t: torch.log2(t),
    "log10": lambda t: torch.log10(t),
    "power": lambda t: t.abs() ** (1 / 3),
    "tensor power": lambda t: t.abs() ** torch.linspace(0.25, 2.5, t.numel(), device=t.device).view(t.shape),
}


@pytest.mark.parametrize("case", sorted(_LOG_PROGRAMS))
def test_logs_and_powers_of_subnormals(backend, case):
    """lavapipe reads a subnormal operand of ``log``/``log2``/``log10`` (and of ``pow``, which it
    computes through them) as the smallest normal: ``log(1e-40)`` was -87.34 on iree-vulkan, not
    -92.10, ``1e-40 ** (1/3)`` 2.3e-13, not 4.6e-14 (lowering/subnormal_logs.py). Within the
    backend's float tolerance of eager (lavapipe's ``pow`` is a few ulps off everywhere), or, for
    a backend that flushes, of eager with the subnormals read as zero."""
    x = torch.tensor([[1e-40, 3e-39, 1.4e-45, 1.1e-38], [2e-38, 0.0, -1e-40, 5.0]])
    kept = _LOG_PROGRAMS[case](x)
    got = _LOG_PROGRAMS[case](x.to("lazy")).cpu()
    close = lambda a, b: torch.isclose(a, b, rtol=1e-5, atol=0, equal_nan=True)  # noqa: E731
    if not backend.flushes_subnormals:
        assert close(got, kept).all(), (got, kept)
        return
    # (eager's log does not flush its operand even under set_flush_denormal: zero them here)
    flushed = _LOG_PROGRAMS[case](torch.where(x.abs() < torch.finfo(x.dtype).tiny, x * 0, x))
    assert (close(got, kept) | close(got, flushed)).all(), (got, kept, flushed)
    assert not close(kept, flushed).all(), "the case does not tell flushing from keeping"
