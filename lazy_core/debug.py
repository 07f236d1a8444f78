"""Looking at pending graphs without running them: IR text and Graphviz DOT."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .graph import LazyGraph, build_graph
from .ir import DeviceData, Node, Output, ScalarParam


def _graph_of(tensors: Sequence[Any]) -> LazyGraph:
    return build_graph([t._lz_value() for t in tensors])


def _fmt_arg(x: Any, names: dict[int, str]) -> str:
    if isinstance(x, Output):
        return names[id(x.node)] + (f".{x.index}" if len(x.node.metas) > 1 else "")
    if isinstance(x, list | tuple):
        return "[" + ", ".join(_fmt_arg(v, names) for v in x) + "]"
    return repr(x)


def _names(graph: LazyGraph) -> dict[int, str]:
    """Leaves named as the computation's arguments are (``graph.argument_layout``):
    device data ``%argK``, a scalar parameter ``%argP[i]``, element i of its pack."""
    names: dict[int, str] = {}
    layout = graph.argument_layout
    for k, i in enumerate(layout.device_data):
        names[id(graph.inputs[i])] = f"%arg{k}"
    for p, (_, indices) in enumerate(layout.packs(), start=len(layout.device_data)):
        for j, i in enumerate(indices):
            names[id(graph.inputs[i])] = f"%arg{p}[{j}]"
    for i, n in enumerate(graph.nodes):
        names[id(n)] = f"%{i}"
    return names


def _meta(n: Node) -> str:
    return ", ".join(f"{list(m.shape)}:{str(m.dtype).replace('torch.', '')}" for m in n.metas if m)


def graph_text(graph: LazyGraph) -> str:
    """The graph as readable text, one node per line with its source location."""
    names = _names(graph)
    lines = [f"graph {graph.name} ({len(graph.nodes)} nodes)"]
    for n in graph.inputs:
        kind = "scalar" if isinstance(n, ScalarParam) else "device_data"
        lines.append(f"  {names[id(n)]} = {kind} -> {_meta(n)}")
    for n in graph.nodes:
        args = ", ".join([_fmt_arg(a, names) for a in n.args] + [f"{k}={_fmt_arg(v, names)}" for k, v in n.kwargs.items()])
        loc = f"  # {n.location}" if n.location else ""
        lines.append(f"  {names[id(n)]} = {n.name}({args}) -> {_meta(n)}{loc}")
    lines.append("  return " + ", ".join(_fmt_arg(o, names) for o in graph.outputs))
    return "\n".join(lines)


def ir_text(tensors: Sequence[Any]) -> str:
    """The pending IR that computes ``tensors``."""
    return graph_text(_graph_of(tensors))


def ir_dot(tensors: Sequence[Any]) -> str:
    """The pending IR as a Graphviz DOT digraph."""
    return graph_dot(_graph_of(tensors))


def explain(enable: bool = True) -> None:
    """Print why graphs recompile and what forced each execution (as ``LAZY_DEBUG=1`` does).

    Messages appear as they happen, and a summary is printed at exit; see
    ``lazy_core.diagnostics`` for the records themselves.
    """
    from . import diagnostics

    diagnostics.explain(enable)


def graph_dot(graph: LazyGraph) -> str:
    """``graph`` as a Graphviz DOT digraph (one box per op, with its user line)."""
    names = _names(graph)
    lines = ["digraph lazy {", "  rankdir=TB;"]
    for n in graph.inputs:
        label = "scalar" if isinstance(n, ScalarParam) else "device_data"
        shape = "ellipse" if isinstance(n, DeviceData) else "diamond"
        lines.append(f'  n{id(n)} [label="{names[id(n)]} {label}\\n{_meta(n)}", shape={shape}];')
    for n in graph.nodes:
        loc = f"\\n{n.location}" if n.location else ""
        lines.append(f'  n{id(n)} [label="{n.name}\\n{_meta(n)}{loc}", shape=box];')
        for o in n.operands:
            lines.append(f"  n{id(o.node)} -> n{id(n)};")
    for i, o in enumerate(graph.outputs):
        lines.append(f'  out{i} [label="output {i}", shape=plaintext];')
        lines.append(f"  n{id(o.node)} -> out{i};")
    lines.append("}")
    return "\n".join(lines)
