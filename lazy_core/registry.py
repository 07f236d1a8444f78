"""Finding and choosing the active backend.

Backends are named. Built-in ones and third-party plugins announce
themselves through the ``lazy_core.backends`` entry-point group (so
``pip install my-vendor-backend`` is enough), or register at run time with
``register_backend``. ``init(name)`` or ``LAZY_BACKEND`` picks one; the
default is ``iree-cpu``, the fastest backend that runs on any machine;
``reference`` is the correctness oracle the others are checked against.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from . import config
from .backend import BackendImpl

DEFAULT_BACKEND = "iree-cpu"
ENTRY_POINT_GROUP = "lazy_core.backends"

_factories: dict[str, Callable[[], BackendImpl]] = {}
_active: BackendImpl | None = None


def register_backend(name: str, factory: Callable[[], BackendImpl]) -> None:
    """Make ``name`` available to ``init``. ``factory()`` builds the backend."""
    _factories[name] = factory


def _discover() -> None:
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name not in _factories:
            _factories[ep.name] = _lazy_entry_point(ep)


def _lazy_entry_point(ep: Any) -> Callable[[], BackendImpl]:
    def factory() -> BackendImpl:
        obj = ep.load()
        return obj()

    return factory


def available_backends() -> list[str]:
    """Names of every registered or installed backend."""
    _discover()
    return sorted(_factories)


def create_backend(name: str) -> BackendImpl:
    """Build (but do not activate) the backend registered as ``name``."""
    _discover()
    if name not in _factories:
        raise ValueError(
            f"unknown lazy backend {name!r}; available: {', '.join(sorted(_factories))}. "
            f"Third-party backends register through the {ENTRY_POINT_GROUP!r} entry-point group."
        )
    backend = _factories[name]()
    if not isinstance(backend, BackendImpl):
        raise TypeError(f"backend factory for {name!r} returned {type(backend).__name__}, not a BackendImpl")
    return backend


def init(backend: str | BackendImpl | None = None) -> BackendImpl:
    """Activate a backend by name or instance (default: ``LAZY_BACKEND`` or ``DEFAULT_BACKEND``).

    Switching backends first syncs pending work on the old one.
    """
    global _active
    if backend is None:
        backend = config.get("LAZY_BACKEND") or DEFAULT_BACKEND
    instance = create_backend(backend) if isinstance(backend, str) else backend
    if _active is not None and _active is not instance:
        from .executor import executor

        executor().on_backend_change(_active, instance)
    _active = instance
    return instance


def active_backend() -> BackendImpl:
    """The active backend, initialising the default one on first use."""
    if _active is None:
        return init()
    return _active


def check_device_index(index: int) -> None:
    """Raise PyTorch's kind of error for ``lazy:N`` beyond the active backend's devices.

    CUDA says ``invalid device ordinal`` for ``cuda:N`` past the last GPU; a
    tensor on a device that does not exist would otherwise be silently
    computed on device 0.
    """
    n = len(active_backend().devices())
    if not 0 <= index < n:
        valid = ", ".join(f"lazy:{i}" for i in range(n))
        raise RuntimeError(
            f"lazy error: invalid device ordinal: lazy:{index}; the active backend "
            f"{active_backend().name!r} has {n} device{'s' if n != 1 else ''} ({valid})"
        )


# The eager debugging backend needs nothing outside lazy_core.
def _make_eager() -> BackendImpl:
    from .eager_backend import EagerBackend

    return EagerBackend()


register_backend("eager", _make_eager)

# lazy-mlir's own backends, by module path as in pyproject.toml's entry points:
# a source checkout, or an editable install whose metadata predates a rename,
# finds the same code. Loaded only when created.
for _name, _target in {
    "reference": "lazy_mlir.backends.reference:ReferenceBackend",
    "iree-cpu": "lazy_mlir.backends.iree:make_iree_cpu",
    "iree-vulkan": "lazy_mlir.backends.iree:make_iree_vulkan",
    "iree-cuda": "lazy_mlir.backends.iree:make_iree_cuda",
}.items():
    register_backend(_name, _lazy_entry_point(EntryPoint(_name, _target, ENTRY_POINT_GROUP)))
