"""Shared pytest fixtures: which lazy backends to test, and a clean runtime per test.

``LAZY_TEST_BACKENDS`` (comma-separated) picks the backends parametrized
into backend-generic tests; by default every backend that can run here:
``eager``, ``reference``, ``iree-cpu`` and ``iree-vulkan`` when a Vulkan
driver is present. A backend that cannot run skips with the reason.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path and os.path.isdir(os.path.join(ROOT, "lazy_core")):  # a source checkout, not the wheel
    sys.path.insert(0, ROOT)

import lazy_core  # noqa: E402

# LAZY_REQUIRE_BACKENDS: CI fails when a backend it requires skipped (test/require_backends.py).
pytest_plugins = ["require_backends"]

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


@pytest.fixture(params=requested_backends())
def backend(request: pytest.FixtureRequest) -> lazy_core.BackendImpl:
    """Each backend in turn, activated, with an empty cache and fresh metrics."""
    b = use_backend(request.param)
    yield b
    lazy_core.mark_step()


@pytest.fixture
def eager_backend() -> lazy_core.BackendImpl:
    return use_backend("eager")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
