"""Buffer donation: which graph inputs' buffers may receive which results.

A training step replaces every parameter and every optimizer-state tensor
with a new value of the same shape. Functionally each new value needs a
fresh buffer while the old one is still an input; donating the old buffer
lets the compiled step write the new value into it instead, which halves
the peak memory of weights and optimizer state and saves the allocations.

The LazyTensor paper's two safety conditions decide when that is allowed:

1. the computation runs at a step barrier (``mark_step()``), not for a
   partial read, so
2. every live tensor with pending work is part of it: after it runs, the
   only holders of device data are the live tensors' storages.

An input buffer is then donatable when no live storage holds it as its
value after the step (its tensor moved on to a new value, or died), and no
view holds it as a materialized value (``DeviceData.pinned``). Backends
must also never return a buffer that is shared with an argument or another
result (see ``BackendImpl.supports_donation``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .ir import DeviceData, TensorMeta

if TYPE_CHECKING:
    from .graph import LazyGraph
    from .views import Storage


def dead_inputs(graph: LazyGraph, live: Iterable[Storage]) -> list[DeviceData]:
    """The graph's device-data inputs that nothing can read after it runs.

    At a full barrier (see above) these are the inputs no live storage holds
    and no view pinned: their buffers may be donated, and the executor drops
    its own references to them once the execution has its arguments, so the
    last graph (kept for diagnostics) does not keep old weights alive.
    """
    held = {id(s.value.node) for s in live}
    return [leaf for leaf in graph.inputs
            if isinstance(leaf, DeviceData) and not leaf.pinned and id(leaf) not in held]


def plan_donations(
    graph: LazyGraph, live: Iterable[Storage], dead: list[DeviceData] | None = None
) -> dict[int, int]:
    """``{device-data input index: result index}`` for buffers that may be reused.

    Input indices count only the graph's ``DeviceData`` inputs (the order in
    which a backend receives buffers); result indices follow
    ``graph.outputs``. Call only at a full barrier (condition 1 above),
    while the storages' values are still the pending outputs: a storage
    whose value is an input keeps that input alive.

    Pairing: a dead input goes first to the new value of the storage that
    held it (a parameter's or a moment's update: compilers can write that
    in place elementwise), then to the first unpaired result of its shape
    and dtype, so the plan is the same for every step that traces the same
    program. ``dead`` is ``dead_inputs(graph, live)`` if the caller has it.
    """
    live = list(live)
    dead_ids = {id(leaf) for leaf in (dead_inputs(graph, live) if dead is None else dead)}
    index: dict[int, int] = {}
    k = -1
    for leaf in graph.inputs:
        if not isinstance(leaf, DeviceData):
            continue
        k += 1
        if id(leaf) in dead_ids:
            index[id(leaf)] = k
    if not index:
        return {}
    result_of = {id(out): r for r, out in enumerate(graph.outputs)}
    plan: dict[int, int] = {}
    taken: set[int] = set()
    for s in live:
        prev = s.previous() if s.previous is not None else None
        r = result_of.get(id(s.value))
        if prev is None or r is None or r in taken or id(prev) not in index:
            continue
        k = index[id(prev)]
        if k in plan or not _same_type(prev.metas[0], graph.outputs[r].meta):
            continue
        plan[k] = r
        taken.add(r)
    free: dict[tuple, list[int]] = {}
    for leaf in graph.inputs:
        k = index.get(id(leaf), -1)
        if k >= 0 and k not in plan:
            meta = leaf.metas[0]
            free.setdefault((meta.shape, meta.dtype), []).append(k)
    for r, out in enumerate(graph.outputs):
        if r in taken:
            continue
        slots = free.get((out.meta.shape, out.meta.dtype))
        if slots:
            plan[slots.pop(0)] = r
    return dict(sorted(plan.items()))


def _same_type(a: TensorMeta, b: TensorMeta) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype
