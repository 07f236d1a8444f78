"""A read of a view of device data is answered on the host: download the base, then view it.

After ``mark_step()`` a view's base holds device data, but the view itself is
still a chain of view ops over it: a view is re-derived from its base at each
read (``LazyTensor._lz_value``), so that a write to the base is seen. Most
gradients are such views: a ``Linear`` weight's is ``t(t(mm))`` and its
bias's ``view(sum)``. Reading them (``p.grad.cpu()``, logging, a checkpoint)
compiled and ran one tiny graph per parameter: a 2-layer ELECTRA's 29
gradients took 29 executions and 5 compiles.

A view op moves no numbers; the CPU applies it to the downloaded base in
microseconds, with eager's own kernels. So when every value a read asks for
is a chain of the pure view ops below over one device-data leaf (scalar
arguments allowed), the executor downloads the leaf and applies the chain
with PyTorch on the CPU (counter ``host_view_read``). ``LAZY_HOST_EVAL=0`` turns
this off with the rest of ``host_eval``: then the backend answers every read. Ops that address memory
(``as_strided``) or reinterpret bits (``view(dtype)``) are not in the set:
their meaning depends on the buffer's layout, which the backend owns.
"""

from __future__ import annotations

from typing import Any

import torch

from .ir import DeviceData, Node, Output, ScalarParam

aten = torch.ops.aten

#: View ops whose result depends only on the value of their input, not on its layout. ``view``
#: and ``_unsafe_view`` succeed or raise depending on the strides, which the downloaded base does
#: not have (the backend's buffer comes back contiguous; a ``b = x.t() * 2`` leaf's meta is
#: transposed, and ``b.t().view(-1)`` of the download raised). Their node in the chain means the
#: traced view succeeded on the leaf's true layout, where it equals ``reshape``: ``apply`` replays
#: them so (``_AS_RESHAPE``), on a base of any layout.
PURE_VIEWS = frozenset({
    aten.t.default, aten.transpose.int, aten.permute.default, aten.numpy_T.default,
    aten.view.default, aten._unsafe_view.default, aten.reshape.default,
    aten.unsqueeze.default, aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.select.int, aten.slice.Tensor, aten.narrow.default, aten.expand.default,
    aten.alias.default, aten.detach.default, aten.diagonal.default, aten.unfold.default,
    aten.movedim.int, aten.unflatten.int, aten.flatten.using_ints,
})

#: Views replayed on the host as ``reshape``: same values wherever the traced view succeeded.
_AS_RESHAPE = {aten.view.default: aten.reshape.default, aten._unsafe_view.default: aten.reshape.default}

#: Longest chain answered on the host (a longer one is not a view read anyone makes).
MAX_STEPS = 16


def chain(value: Output) -> tuple[DeviceData, list[Node]] | None:
    """The device-data leaf under ``value`` and the view nodes from it up, or None."""
    nodes: list[Node] = []
    node = value.node
    while not isinstance(node, DeviceData):
        if node.op not in PURE_VIEWS or len(nodes) >= MAX_STEPS:
            return None
        tensors = [o for o in node.operands if not isinstance(o.node, ScalarParam)]
        if len(tensors) != 1 or tensors[0].index != 0 or node.args[0] is not tensors[0]:
            return None
        nodes.append(node)
        node = tensors[0].node
    return node, nodes[::-1]


#: A base larger than this (bytes) is downloaded for a view of it only if the view reads most of it.
SMALL_BASE = 1 << 20


def worth_downloading(leaf: DeviceData, value: Output) -> bool:
    """Whether downloading ``leaf`` whole costs about what the view's own transfer would: a row
    of a large table (``table[0]``) is better cut out on the device."""
    base = leaf.metas[0]
    return base.nbytes() <= SMALL_BASE or 2 * value.meta.numel() >= base.numel()


def apply(nodes: list[Node], base: torch.Tensor) -> torch.Tensor:
    """The chain's value on the host: ``base`` viewed by ``nodes``, as a contiguous copy the
    caller owns."""
    value = base
    for node in nodes:
        args = (value, *(_scalar(a) for a in node.args[1:]))
        op = _AS_RESHAPE.get(node.op, node.op)
        value = op(*args, **{k: _scalar(v) for k, v in node.kwargs.items()})
    return value.clone(memory_format=torch.contiguous_format)


def _scalar(x: Any) -> Any:
    if isinstance(x, Output):
        assert isinstance(x.node, ScalarParam)
        return x.node.value
    if isinstance(x, (list, tuple)):
        return type(x)(_scalar(v) for v in x)
    return x
