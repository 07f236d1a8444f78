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

from .ir import DeviceData

if TYPE_CHECKING:
    from .graph import LazyGraph
    from .views import Storage


def plan_donations(graph: LazyGraph, live: Iterable[Storage]) -> dict[int, int]:
    """``{device-data input index: result index}`` for buffers that may be reused.

    Input indices count only the graph's ``DeviceData`` inputs (the order in
    which a backend receives buffers); result indices follow
    ``graph.outputs``. Call only at a full barrier (condition 1 above),
    after the storages' values were set to the graph's outputs or are still
    pending: a storage whose value is an input keeps that input alive.
    Each dead input of a result's shape and dtype is paired with the first
    such result not yet paired, so the plan is the same for every step that
    traces the same program.
    """
    held = {id(s.value.node) for s in live}
    free: dict[tuple, list[int]] = {}
    k = -1
    for leaf in graph.inputs:
        if not isinstance(leaf, DeviceData):
            continue
        k += 1
        if leaf.pinned or id(leaf) in held:
            continue
        meta = leaf.metas[0]
        free.setdefault((meta.shape, meta.dtype), []).append(k)
    plan: dict[int, int] = {}
    for r, out in enumerate(graph.outputs):
        meta = out.meta
        slots = free.get((meta.shape, meta.dtype))
        if slots:
            plan[slots.pop(0)] = r
    return plan
