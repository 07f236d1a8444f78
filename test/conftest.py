"""Shared pytest fixtures: which lazy backends to test, and a clean runtime per test.

``LAZY_TEST_BACKENDS`` (comma-separated) picks the backends parametrized
into backend-generic tests; by default every backend that can run here:
``eager``, ``reference``, ``iree-cpu`` and ``iree-vulkan`` when a Vulkan
driver is present. A backend that cannot run skips with the reason.
``broken`` (broken_backend.py, compile always raises) is registered
for test_strict_suite.py.

Strict by default: every test runs with ``LAZY_STRICT=1``, so a graph that
fails to compile raises instead of running op by op on the CPU with a
warning (a test that wants the fallback deletes the variable itself). A
backend-generic test fails on any eager fallback of an op it did not name
with ``@pytest.mark.expect_fallback("aten.nonzero", ...)``: otherwise a
backend that lowers nothing would pass every test that compares values.

Graphs compile on first sight: ``LAZY_TIERED=0`` (lazy_core.tiering; test_tiering.py
turns it on).

Backends answer every read: ``LAZY_HOST_EVAL=0``. By default a small graph of
values the host holds, read by ``item()``, runs on the host with eager's own
kernels (lazy_core.host_eval), so a test that checks a backend's value through
``item()`` would pass on a backend that computes nothing. Tests of that path
(test_host_eval.py, the GPT-2 compile counts, the fuzzer's even seeds) turn
it on themselves.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import traceback

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path and os.path.isdir(os.path.join(ROOT, "lazy_core")):  # a source checkout, not the wheel
    sys.path.insert(0, ROOT)


def _private_disk_cache() -> None:
    """Give the test session its own on-disk cache folder, removed at exit.

    Tests count compiles; with the user's ``~/.cache/lazy-mlir`` they would
    find the executables an earlier run (or an older checkout with the same
    lowering version) left there and count none (CI failed this way). Set
    before ``lazy_core`` is imported, in the pytest-xdist controller first:
    the workers inherit it, so they share one cache as a user's processes
    would. ``LAZY_CACHE_DIR`` set by the caller wins.
    """
    if os.environ.get("LAZY_CACHE_DIR"):
        return
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="lazy-mlir-test-cache-")
    os.environ["LAZY_CACHE_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


_private_disk_cache()

import lazy_core  # noqa: E402
from lazy_core import metrics  # noqa: E402

# A plain module beside this file (shipped in the wheel's lazy_mlir.tests).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from broken_backend import BrokenBackend  # noqa: E402

lazy_core.register_backend("broken", BrokenBackend)

# LAZY_REQUIRE_BACKENDS: CI fails when a backend it requires skipped (test/require_backends.py);
# vulkan_report: the summary says how often the Vulkan signal layer saved the device.
# heavy_variants: the costly second-backend variants make check leaves to make check-slow.
pytest_plugins = ["require_backends", "vulkan_report", "heavy_variants"]

DEFAULT_BACKENDS = ["eager", "reference", "iree-cpu", "iree-vulkan"]


def requested_backends() -> list[str]:
    env = os.environ.get("LAZY_TEST_BACKENDS")
    return [b.strip() for b in env.split(",") if b.strip()] if env else list(DEFAULT_BACKENDS)


_unavailable: dict[str, str | None] = {}


def backend_unavailable_reason(name: str) -> str | None:
    """None if backend ``name`` can run here, else why not."""
    if name not in _unavailable:
        try:
            backend = lazy_core.create_backend(name)
            check = getattr(backend, "unavailable_reason", None)
            _unavailable[name] = check() if check else None
        except Exception as e:  # missing plugin, missing driver ...
            _unavailable[name] = f"{type(e).__name__}: {e}"
    return _unavailable[name]


def use_backend(name: str) -> lazy_core.BackendImpl:
    reason = backend_unavailable_reason(name)
    if reason:
        pytest.skip(f"backend {name} unavailable: {reason}")
    backend = lazy_core.init(name)
    lazy_core.executor().clear_cache()
    lazy_core.metrics.reset()
    return backend


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "expect_fallback(*ops): the eager fallbacks this test expects, by op name prefix "
        "('aten.nonzero' matches 'aten.nonzero.default'); any other fallback fails it",
    )


def expected_fallbacks(request: pytest.FixtureRequest) -> tuple[str, ...]:
    return tuple(op for m in request.node.iter_markers("expect_fallback") for op in m.args)


def check_fallbacks(request: pytest.FixtureRequest) -> None:
    """Fail the test on a fallback it did not name (compile errors included)."""
    expected = expected_fallbacks(request)
    unexpected = {
        k: v for k, v in metrics.counters().items()
        if k.startswith("fallback::") and not any(k[len("fallback::"):].startswith(op) for op in expected)
    }
    if unexpected:
        pytest.fail(f"unexpected eager fallbacks {unexpected} (name expected ones with "
                    "@pytest.mark.expect_fallback)", pytrace=False)
    for op in expected:
        if not any(k.startswith(f"fallback::{op}") for k in metrics.counters()):
            pytest.fail(f"expected a fallback of {op}, none happened: mark and test disagree", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    if call.excinfo is not None and call.excinfo.tb is not None:
        # The report is rendered; the kept traceback would keep the failed test's lazy tensors
        # alive, and their pending work would fail the next test's backend switch (a cascade).
        traceback.clear_frames(call.excinfo.tb)
        tb = call.excinfo.tb
        while tb is not None:  # the locals dict pytest made for its report is separate from the frame
            try:
                tb.tb_frame.f_locals.clear()
            except Exception:
                pass
            tb = tb.tb_next


_CALL_FAILED = pytest.StashKey[bool]()


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getoption("timeout", None) or 0)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """A backstop for pytest-timeout: a hang inside a compiler holds the GIL.

    torch-mlir's pass manager and IREE's compiler do not release it, so
    pytest-timeout's SIGALRM handler (Python code) never runs, and a hung
    compile (fuzz seed 21: a softmax over a dim out of range looped in
    DecomposeComplexOps) held CI until its own limit. faulthandler's watchdog
    is a C thread: past the test's timeout (plus a grace period for
    pytest-timeout to act first) it writes every thread's stack and ends the
    process, which pytest-xdist reports as this test's crash and replaces.
    """
    limit = _timeout_of(item)
    if limit > 0:
        faulthandler.dump_traceback_later(limit * 1.1 + 30, exit=True)
    try:
        yield
    finally:
        if limit > 0:
            faulthandler.cancel_dump_traceback_later()


def finish_test(request: pytest.FixtureRequest) -> None:
    """Run what the test left pending, then check its fallbacks (unless the test already failed)."""
    failed = request.node.stash.get(_CALL_FAILED, False)
    try:
        lazy_core.mark_step()
    except Exception:
        if not failed:
            raise
        return  # the test's own failure says it (often the same error); don't report it twice
    if not failed:
        check_fallbacks(request)


@pytest.fixture(params=requested_backends())
def backend(request: pytest.FixtureRequest) -> lazy_core.BackendImpl:
    """Each backend in turn, activated, with an empty cache and fresh metrics."""
    b = use_backend(request.param)
    yield b
    finish_test(request)


@pytest.fixture(params=["reference", "iree-cpu"])
def cpu_backend(request: pytest.FixtureRequest) -> lazy_core.BackendImpl:
    """The compiling CPU backends in turn (strict, as every test), with the fallback check."""
    b = use_backend(request.param)
    yield b
    finish_test(request)


@pytest.fixture
def eager_backend(request: pytest.FixtureRequest) -> lazy_core.BackendImpl:
    b = use_backend("eager")
    yield b
    finish_test(request)


@pytest.fixture(autouse=True)
def _strict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compile failures are errors (LAZY_STRICT=1), unless a test changes it itself."""
    monkeypatch.setenv("LAZY_STRICT", "1")


@pytest.fixture(autouse=True)
def _compile_on_first_sight(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every graph compiles the first time it runs (LAZY_TIERED=0), unless a test changes it:
    by default a graph seen once runs op by op on the CPU (lazy_core.tiering), so a test that
    runs its program once would check PyTorch's kernels instead of the backend's code."""
    monkeypatch.setenv("LAZY_TIERED", "0")


@pytest.fixture(autouse=True)
def _backend_answers_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read is computed by the backend under test (LAZY_HOST_EVAL=0), unless a test changes it."""
    monkeypatch.setenv("LAZY_HOST_EVAL", "0")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
