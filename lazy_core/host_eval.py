"""Small graphs over values the host already holds run on the host, not through the compiler.

A program often asks Python a question about a few numbers it has just put
on the device. HF's ``generate()`` checks its arguments before the first
token: ``torch.isin(eos, pad).any()``, ``(eos < 0).any()``,
``(input_ids < 0).any()``, ``(attention_mask == 1).all()``. Each ``bool()``
cut the pending graph there and compiled a graph of two to six ops: four of
the seven compiles of a first GPT-2 ``generate()`` call, and two more at each
new prompt length (their sizes changed). Their operands were uploaded from
the CPU moments before, and the CPU answers in microseconds what a compile
answers in seconds.

So a ``DeviceData`` leaf keeps a host copy of its value (``DeviceData.host``)
when the value is small (at most ``MAX_ELEMENTS``) and known without a
device read: uploaded from the CPU (``tensor.upload``: ``.to("lazy")``,
``torch.tensor(..., device="lazy")``, an eager fallback's result), computed
here, or read back once (``GraphExecutor._to_host_many``). Leaves are
immutable (an in-place op makes a new node; a donated buffer belongs to a
dead leaf), so the copy stays true.

At a *scalar* read (``item()``, ``bool()``, ``int()``: Python needs the value
to branch) or an eager fallback's read of its operands, a pending graph of
at most ``MAX_NODES`` ops, every value in it small and every leaf known on
the host, is evaluated by ``eager_backend.interpret`` on those copies:
eager's own kernels, so eager's exact values, no compile and no device round
trip. Its results are uploaded (they are small) and keep their copies.

Everything else goes to the backend as before: ``mark_step()``, ``.cpu()``,
``sync()``, collectives, and any graph that reads a value only the device
holds (a model's weights after a step). A training step is what the backend
is for, and ``.cpu()`` of a result is where users and the backend tests look
at what the backend computed. ``LAZY_HOST_EVAL=0`` turns this off; the
counter ``host_eval`` counts the graphs it ran.
"""

from __future__ import annotations

from typing import Any

import torch

from . import config, metrics
from .graph import LazyGraph
from .ir import DeviceData, ScalarParam

#: Elements of the largest value kept on the host or computed there.
MAX_ELEMENTS = 4096
#: Ops of the largest graph evaluated on the host (the interpreter costs ~10 us per op, a
#: graph break far more). T5's decoder mask is 65 ops from the uploaded labels.
MAX_NODES = 256


def small(t: torch.Tensor) -> bool:
    """Whether a value is small enough to keep a host copy of."""
    return t.numel() <= MAX_ELEMENTS


def remember(node: DeviceData, host: torch.Tensor) -> None:
    """Keep ``host`` (a CPU tensor nobody else holds) as ``node``'s host copy when it is small."""
    if small(host) and enabled():
        node.host = host


def enabled() -> bool:
    """Whether reads may be answered on the host (``LAZY_HOST_EVAL``, default on)."""
    return bool(config.get("LAZY_HOST_EVAL"))


def _scalar_read(reason: str) -> bool:
    return reason == "item" or reason.startswith("fallback ")


def eligible(graph: LazyGraph, reason: str) -> bool:
    """A scalar read of a small graph whose every leaf has a host copy."""
    if not _scalar_read(reason) or len(graph.nodes) > MAX_NODES or not enabled():
        return False
    for leaf in graph.inputs:
        if isinstance(leaf, DeviceData):
            if leaf.host is None:
                return False
        elif not isinstance(leaf, ScalarParam):
            return False
    return all(m.numel() <= MAX_ELEMENTS for n in graph.nodes for m in n.metas if m is not None)


#: Reads answered from their own cone (``cone_on_host``) before the pending work must run: a
#: loop that never calls ``mark_step()`` and reads a host-known flag each iteration would
#: otherwise grow one graph without end.
MAX_CONE_READS = 8


def cone_on_host(outputs: list[Any], reason: str) -> bool:
    """Whether a scalar read of ``outputs`` can be answered from their own small, host-known
    cone alone, leaving the other pending work pending.

    HF's attention-mask helpers ask ``fast_all(padding_mask)`` in the middle of a forward: the
    mask comes from the uploaded ``attention_mask``, but the pending graph already holds the
    embeddings (weights), so ``eligible`` said no and the step ran as three graphs (Llama, OPT,
    BART, GPT-BigCode from their configs). Evaluating just the mask's ops on the host keeps the
    step one graph; the mask is computed again inside it, from the same values."""
    if not _scalar_read(reason) or not enabled():
        return False
    seen: set[int] = set()
    ops = 0
    stack = [o.node for o in outputs]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, DeviceData):
            if node.host is None:
                return False
            continue
        if isinstance(node, ScalarParam):
            continue
        if node.is_leaf():
            return False
        ops += 1
        if ops > MAX_NODES or any(m is not None and m.numel() > MAX_ELEMENTS for m in node.metas):
            return False
        stack.extend(o.node for o in node.operands)
    return True


def evaluate(graph: LazyGraph) -> list[torch.Tensor] | None:
    """The graph's outputs computed on the host, or None when the interpreter raised
    (the caller then runs the graph on the backend, which reports what it reports)."""
    from .eager_backend import interpret

    layout = graph.argument_layout
    args: list[Any] = [graph.inputs[i].host for i in layout.device_data]  # type: ignore[attr-defined]
    for dtype, indices in layout.packs():
        args.append(torch.tensor([graph.inputs[i].value for i in indices], dtype=dtype))  # type: ignore[attr-defined]
    try:
        results = interpret(graph, args)
    except Exception:
        metrics.counter_add("host_eval_error")
        return None
    out = []
    for r, o in zip(results, graph.outputs):
        if r.dtype != o.meta.dtype or tuple(r.shape) != tuple(o.meta.shape):
            # The trace's meta and the CPU kernel disagree: let the backend decide.
            metrics.counter_add("host_eval_error")
            return None
        out.append(r.clone(memory_format=torch.contiguous_format))  # never an alias of an input's copy
    return out
