"""``LAZY_DUMP_DIR=dir``: everything about each compiled computation, in files.

When a graph is compiled (a cache miss) and has run, this writes, named by
its graph hash (``lazy_graph_<hash>``):

* ``.ir.txt``      the lazy IR, one op per line with its user line, and what
                   forced the execution and why it recompiled;
* ``.dot``         the same graph for Graphviz (and ``.svg`` when ``dot`` is installed);
* ``.torch.mlir``  the torch-dialect MLIR with ``loc(...)`` source locations;
* ``.<target>.mlir`` the MLIR lowered to the backend's contract
                   (``linalg-on-tensors`` ...), when the backend offers
                   ``lower_to_target``;
* ``.error.txt``   why it could not compile, when it ran eagerly instead;
* ``.stack.txt``   the Python stack of the barrier;
* ``.metrics.txt`` the metrics delta of this compile and run, and since the
                   previous dump (the tracing of the step);

and appends one line per computation to ``index.txt``. Nothing is written
(and nothing costs) when the variable is unset. The directory is read at
each compile, so tests and tools may set it at run time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import traceback
import warnings
from typing import Any

from . import config, diagnostics, metrics
from .debug import graph_dot, graph_text
from .executor import executor
from .graph import LazyGraph
from .registry import active_backend

__all__ = ["dump_dir", "write_computation"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_state: dict[str, Any] = {"before": None, "graph": None, "previous": None, "count": 0}
_warned_dirs: set[str] = set()


def dump_dir() -> str | None:
    """The dump directory (``LAZY_DUMP_DIR``), or None when dumps are off."""
    return config.get("LAZY_DUMP_DIR") or None


def _write(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def _barrier_stack() -> str:
    """The Python stack up to the barrier, without this package's own frames at the end."""
    frames = traceback.extract_stack()
    while frames and frames[-1].filename.startswith(_PKG_DIR):
        frames.pop()
    return "".join(traceback.format_list(frames))


def _svg(dot_path: str) -> None:
    exe = shutil.which("dot")
    if exe is None:
        return
    try:
        subprocess.run([exe, "-Tsvg", dot_path, "-o", dot_path[: -len(".dot")] + ".svg"],
                       check=True, capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pass  # a drawing is a convenience; the .dot file is there


def write_computation(directory: str, graph: LazyGraph, entry: Any, exe: diagnostics.Execution | None) -> list[str]:
    """Write the dump files of one computation; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    name = graph.name
    label = exe.label if exe else "?"
    header = [f"// {name}: {len(graph.nodes)} ops, {len(graph.inputs)} inputs, {len(graph.outputs)} outputs",
              f"// executed for: {label}"]
    if exe is not None and exe.recompile is not None:
        header.append("// " + exe.recompile.message.replace("\n", "\n// "))
    paths = [_write(directory, f"{name}.ir.txt", "\n".join(header) + "\n" + graph_text(graph) + "\n")]
    dot = _write(directory, f"{name}.dot", graph_dot(graph) + "\n")
    paths.append(dot)
    _svg(dot)
    if os.path.exists(dot[: -len(".dot")] + ".svg"):
        paths.append(dot[: -len(".dot")] + ".svg")
    computation = getattr(entry, "computation", None)
    if getattr(entry, "eager", False):
        paths.append(_write(directory, f"{name}.error.txt",
                            f"{getattr(entry, 'error', None)}\n(ran eagerly on the CPU instead)\n"))
    else:
        mlir = getattr(computation, "mlir", None)
        if mlir:
            paths.append(_write(directory, f"{name}.torch.mlir", mlir))
        paths += _lowered(directory, name, computation)
    stack = "".join(f"  {loc.filename}:{loc.line} in {loc.function}\n" for loc in (exe.stack if exe else []))
    paths.append(_write(directory, f"{name}.stack.txt",
                        f"barrier: {label}\nuser frames (innermost first):\n{stack}\n"
                        f"full Python stack:\n{_barrier_stack()}"))
    text = "This computation (compile + first run):\n"
    text += metrics.delta(_state["before"]) if _state["before"] else "n/a\n"
    if _state["previous"] is not None:
        text += "\nSince the previous dump (tracing, transfers, other executions):\n"
        text += metrics.delta(_state["previous"])
    paths.append(_write(directory, f"{name}.metrics.txt", text))
    _state["count"] += 1
    recompile = "; ".join(exe.recompile.differences) if exe and exe.recompile else ""
    with open(os.path.join(directory, "index.txt"), "a") as f:
        f.write(f"{_state['count']:04d} {name} {len(graph.nodes)} ops  {label}"
                f"{'  RECOMPILE: ' + recompile if recompile else ''}\n")
    return paths


def _lowered(directory: str, name: str, computation: Any) -> list[str]:
    backend = active_backend()
    lower = getattr(backend, "lower_to_target", None)
    target = getattr(backend, "lowering_target", None)
    if lower is None or not target or target == getattr(computation, "form", "torch"):
        return []
    try:
        lowered = lower(computation)
        text = getattr(lowered, "mlir", None) or str(lowered)
    except Exception as e:  # the dump must never break the program it describes
        return [_write(directory, f"{name}.{target}.error.txt", f"{type(e).__name__}: {e}\n")]
    return [_write(directory, f"{name}.{target}.mlir", text)]


def _pre(graph: LazyGraph, reason: str, is_cache_miss: bool) -> None:
    if is_cache_miss and dump_dir():
        _state["before"] = metrics.snapshot()
        _state["graph"] = id(graph)


def _post(graph: LazyGraph, entry: Any, reason: str) -> None:
    directory = dump_dir()
    if not directory or _state["before"] is None or _state["graph"] != id(graph):
        return
    exe = diagnostics.last_execution()
    try:
        write_computation(directory, graph, entry, exe)
    except OSError as e:
        # A dump must never stop the program it describes: warn once per directory.
        if directory not in _warned_dirs:
            _warned_dirs.add(directory)
            warnings.warn(f"LAZY_DUMP_DIR={directory!r}: cannot write the dump files ({e}); "
                          "going on without them", RuntimeWarning, stacklevel=2)
    finally:
        _state["before"] = _state["graph"] = None
        _state["previous"] = metrics.snapshot()


executor().pre_hooks.append(_pre)
executor().hooks.append(_post)
