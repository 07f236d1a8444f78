"""lazy_core: record eager PyTorch on device ``lazy``, run it as compiled graphs.

The public API::

    import lazy_core
    lazy_core.init("iree-cpu")          # or LAZY_BACKEND=..., default "iree-cpu"
    x = torch.randn(4, 4).to("lazy")
    y = (x @ x).relu()
    lazy_core.mark_step()               # one compiled graph for all pending work
    print(y.cpu())
    print(lazy_core.metrics.report())

    with lazy_core.step(max_graphs=1, full_graph=True):   # a step that must be one graph
        ...                                               # (ends with mark_step)
    lazy_core.add_step_closure(log, (loss,))  # runs after the next mark_step, no extra sync
    # with lazy_core.autocast(dtype=torch.bfloat16): ...   # mixed precision (docs/amp.md)
    # LAZY_DEBUG=1: why each graph recompiled; LAZY_DUMP_DIR=dir: IR, MLIR, stacks per graph

lazy_core imports nothing of MLIR or any backend: backends are plugins found
by name (``lazy_core.backends`` entry points or ``register_backend``).
"""

from __future__ import annotations

from typing import Any

from . import bucketing, checks, config, debug, device_module, interop, metrics
from .autocast import autocast  # mixed precision: torch.autocast("lazy") is refused by PyTorch
from .backend import BackendData, BackendDevice, BackendImpl, CompileError
from .executor import GraphExecutor, executor
from .factories import register as _register_factories
from .grad_scaler import GradScaler
from .graph import LazyGraph
from .ir import DeviceData, Node, Output, ScalarParam, TensorMeta
from .registry import active_backend, available_backends, create_backend, init, register_backend
from .tensor import LazyTensor

# A bad LAZY_* value fails at import, naming the variable (not mid-run).
config.validate()
_register_factories()
checks.install()
interop.install()
device_module.register()  # torch.lazy, which torch.utils.checkpoint looks up

# Diagnostics register their executor hooks on import (recompile causes, dumps,
# step closures, step guards, the graph-size safety net).
from . import closures, diagnostics, dump, graph_limits, step_guard  # noqa: E402
from .closures import add_step_closure  # noqa: E402
from .step_guard import StepGuardError, step  # noqa: E402

__all__ = [
    "BackendData", "BackendDevice", "GradScaler", "autocast", "BackendImpl", "CompileError", "DeviceData", "GraphExecutor",
    "StepGuardError", "add_step_closure", "closures", "diagnostics", "dump", "graph_limits", "step",
    "step_guard",
    "LazyGraph", "LazyTensor", "Node", "Output", "ScalarParam", "TensorMeta", "active_backend",
    "available_backends", "bucketing", "create_backend", "debug", "init", "last_computation", "mark_step",
    "metrics", "register_backend", "sync", "wait_device_ops",
]


def mark_step() -> None:
    """The step barrier: compile (or reuse) and run one graph of all pending work."""
    executor().mark_step()


def sync(tensors: list[Any]) -> None:
    """Materialize just ``tensors`` (and live tensors sharing work with them)."""
    executor().to_host_many(list(tensors), "sync")


def wait_device_ops() -> None:
    """Block until every queued execution and the active backend's work are done."""
    executor().wait()
    active_backend().synchronize()
    checks.verify()  # a failed device-side index/divisor check raises here at the latest


def last_computation() -> Any:
    """The computation that ran last (MLIR backends: ``.mlir`` is its torch-dialect text)."""
    return executor().last_computation()
