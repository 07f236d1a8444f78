"""Print the MLIR a traced program emits, for lit + FileCheck tests.

A lit test is a Python script run as ``%PYTHON %s | FileCheck %s``. It traces
with ``lazy_core.init("eager")`` (no compiler needed to produce MLIR text:
lowering is done here, on the graph the tracer built) and calls one of:

- ``emit(tensors)``: the graph whose outputs are exactly ``tensors``.
- ``emit_step()``: ``lazy_core.mark_step()`` and the graph it executed, so the
  outputs are the live tensors only, as in a real training step.

Each prints a ``// signature:`` comment line and the module with every
location inline (``loc("file.py":12:0)`` on each op), so a CHECK line can
match an op, its types and the user line that made it together.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import lazy_core
from lazy_core.graph import LazyGraph, build_graph
from lazy_mlir import lowering


def module_text(computation: lowering.Computation, locations: bool = True) -> str:
    """The module as text; with ``locations``, each op's ``loc(...)`` printed inline."""
    return computation.module.operation.get_asm(enable_debug_info=locations, use_local_scope=True)


def print_computation(computation: lowering.Computation, locations: bool = True,
                      title: str | None = None) -> None:
    """Print a header, the signature and the module, then flush (lit pipes stdout)."""
    out = sys.stdout
    if title:
        out.write(f"// ----- {title}\n")
    out.write(f"// signature: {computation.signature()}\n")
    out.write(f"// form: {computation.form}\n")
    out.write(module_text(computation, locations))
    out.write("\n")
    out.flush()


def lower_graph(graph: LazyGraph, target: str = "torch") -> lowering.Computation:
    """The graph imported to the torch dialect, then lowered to ``target`` (``raw`` = as imported)."""
    computation = lowering.lower_graph(graph)
    if target != "raw":
        computation = lowering.lower(computation, target)
    return computation


def emit(tensors: Sequence[Any], target: str = "raw", locations: bool = True,
         title: str | None = None) -> lowering.Computation:
    """Print the computation whose results are ``tensors`` (pending lazy tensors)."""
    outputs = [t._lz_value() for t in tensors]
    computation = lower_graph(build_graph(outputs), target)
    print_computation(computation, locations, title)
    return computation


def capture_step() -> list[LazyGraph]:
    """Run ``mark_step()`` and return the graphs the executor ran for it."""
    graphs: list[LazyGraph] = []
    hooks = lazy_core.executor().hooks

    def hook(graph: LazyGraph, entry: Any, reason: str) -> None:
        graphs.append(graph)

    hooks.append(hook)
    try:
        lazy_core.mark_step()
    finally:
        hooks.remove(hook)
    return graphs


def emit_step(target: str = "raw", locations: bool = True,
              title: str | None = None) -> list[lowering.Computation]:
    """``mark_step()``, then print each graph it executed (live tensors as outputs)."""
    computations = []
    for graph in capture_step():
        computation = lower_graph(graph, target)
        print_computation(computation, locations, title)
        computations.append(computation)
    return computations
