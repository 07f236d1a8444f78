"""Loops in a lowered graph: ``torch._higher_order_ops.while_loop`` bodies and conditions.

Some ATen kernels iterate a data-dependent number of times (the orthogonal polynomials'
three-term recurrences run ``n`` steps, ``n`` a tensor). Unrolling them would bound ``n``;
running them eagerly cut the graph. A decomposition can instead call ``while_loop``:
``make_fx`` records it as a ``higher_order.while_loop`` node whose condition and body are
``get_attr`` references to traced ``GraphModule`` s, and torch-mlir's FX importer turns it
into ``torch.prim.Loop`` (``scf.while`` further down), which the reference backend's and
IREE's pipelines compile.

The lowering's FX graph is a bare ``Graph``; ``adopt`` keeps each subgraph it inlines
with it (a copy: the FX rewrites run on it per backend, and the traced original is
cached across graphs), and ``import_module`` wraps the graph in a ``GraphModule`` whose
children the importer imports as private functions before the graph itself.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, GraphModule

__all__ = ["adopt", "has_loops", "import_module", "subgraphs"]

WHILE_LOOP = torch.ops.higher_order.while_loop


def subgraphs(g: Graph) -> dict[str, GraphModule]:
    """The loop bodies and conditions ``g`` refers to, by attribute name."""
    found = g.__dict__.get("_lazy_subgraphs")
    if found is None:
        found = g.__dict__["_lazy_subgraphs"] = {}
    return found


def has_loops(g: Graph) -> bool:
    return bool(g.__dict__.get("_lazy_subgraphs"))


def adopt(g: Graph, module: Any) -> str:
    """Keep a copy of ``module`` (a traced subgraph) with ``g``; its attribute name there."""
    if not isinstance(module, GraphModule):
        raise NotImplementedError(f"a decomposition refers to a {type(module).__name__} attribute; "
                                  "only loop bodies and conditions (GraphModules) are supported")
    found = subgraphs(g)
    copies = g.__dict__.setdefault("_lazy_subgraph_ids", {})
    name = copies.get(id(module))
    if name is None:
        copy = Graph()
        out = copy.graph_copy(module.graph, {})
        copy.output(out)
        name = f"loop_fn_{len(found)}"
        found[name] = GraphModule(module, copy)
        copies[id(module)] = name
    return name


def import_module(g: Graph) -> GraphModule:
    """``g`` as a ``GraphModule`` owning its subgraphs, for ``FxImporter.import_graph_module``."""
    root = torch.nn.Module()
    for name, module in subgraphs(g).items():
        setattr(root, name, module)
    return GraphModule(root, g)
