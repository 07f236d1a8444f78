"""Collectives on lazy tensors: cut points that run on the host through the real process group.

``torch.distributed`` calls (``all_reduce``, ``broadcast``, ``all_gather``,
``reduce_scatter``, DDP's bucket all-reduces...) reach
``LazyTensor.__torch_dispatch__`` as ``c10d`` dispatcher ops carrying their
``ProcessGroup``. None of our compilers has a collective (IREE has them for
CUDA only), so a collective is a cut in the trace:

1. the inputs are materialized (the pending segment that feeds them runs as
   one graph, exactly like a host read);
2. the same ``c10d`` op runs again on host copies of the tensors, so the
   process group's own CPU backend (gloo) does the communication and its
   semantics (reduce ops, uneven ranks, timeouts) are PyTorch's own;
3. each tensor the op writes gets the result as new device data, and the
   op returns the caller's lazy tensors and a completed ``Work`` whose
   future holds them (what DDP's reducer reads).

Step 2 only *issues* the communication for the collectives in ``IN_FLIGHT``
(``LAZY_DIST_ASYNC``, on by default): the written tensors get placeholders
that the process group's completion fills (``lazy_core.collective_queue``), so
the rest of the backward is traced and run while a DDP bucket is all-reduced.
The returned ``Work`` is complete all the same: its values are lazy tensors,
and reading one waits, like reading any pending result.

Tracing then continues from device data: the optimizer step after DDP's
last bucket is one graph at ``mark_step()``.

Before this module the ops were recorded like any other op: ``all_reduce``
kept each rank's value on iree-cpu, and on backends whose host copies alias
device buffers gloo wrote into a buffer that other tensors may share.

``LAZY_DIST_CHECK=1`` (or ``LAZY_DEBUG=1``) first checks that every rank is
at the same collective (``lazy_core.dist_check``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from . import collective_queue, config, metrics, source_location
from . import tensor as _t
from .executor import executor
from .ir import DeviceData, Output, TensorMeta

__all__ = ["CollectiveSpec", "FUNCTIONAL", "HANDLERS", "SPECS", "handle_collective", "handle_functional"]


@dataclass(frozen=True, slots=True)
class CollectiveSpec:
    """Which positional arguments of a ``c10d`` op it reads and writes.

    ``written``: tensors the op writes (their host copies receive results and
    are copied back). ``overwritten``: written tensors whose old value is
    never read (all-gather outputs): they get an uninitialized host buffer
    instead of being materialized. Every other tensor argument is read only.
    """

    written: tuple[int, ...]
    overwritten: tuple[int, ...] = ()


# By op name (``c10d::<name>``); overload ``default`` everywhere. Position 0 is
# the tensor (list) argument, 1 the second one, as in each op's schema.
SPECS: dict[str, CollectiveSpec] = {
    "allreduce_": CollectiveSpec(written=(0,)),
    "allreduce_coalesced_": CollectiveSpec(written=(0,)),
    "broadcast_": CollectiveSpec(written=(0,)),
    "reduce_": CollectiveSpec(written=(0,)),
    "allgather_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "_allgather_base_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "allgather_coalesced_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "allgather_into_tensor_coalesced_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "reduce_scatter_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "_reduce_scatter_base_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "reduce_scatter_tensor_coalesced_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "alltoall_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "alltoall_base_": CollectiveSpec(written=(0,), overwritten=(0,)),
    # gather/scatter leave the outputs of some ranks untouched: keep their values.
    "gather_": CollectiveSpec(written=(0,)),
    "scatter_": CollectiveSpec(written=(0,)),
    "send": CollectiveSpec(written=()),
    "recv_": CollectiveSpec(written=(0,), overwritten=(0,)),
    "recv_any_source_": CollectiveSpec(written=(0,), overwritten=(0,)),
    # The barrier's tensor is a placeholder that says which device to sync.
    "barrier": CollectiveSpec(written=(), overwritten=(0,)),
    "monitored_barrier_": CollectiveSpec(written=(), overwritten=(0,)),
}


def _leaves(x: Any, out: list) -> None:
    # fallback's walk; its ``_replace`` is not reused: it maps "lazy..." strings to "cpu",
    # and a process group's name or tag may be such a string.
    from .fallback import _lazy_leaves

    _lazy_leaves(x, out)


def _substitute(x: Any, table: dict[int, torch.Tensor]) -> Any:
    if isinstance(x, _t.LazyTensor):
        return table[id(x)]
    if isinstance(x, list):
        return [_substitute(v, table) for v in x]
    if isinstance(x, tuple):
        return tuple(_substitute(v, table) for v in x)
    return x


def _op_name(func: Any) -> str:
    return func._schema.name.split("::", 1)[1]


def handle_collective(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``c10d`` op ``func`` with lazy tensor arguments (see the module docstring)."""
    name = _op_name(func)
    spec = SPECS[name]
    by_position: list[list[_t.LazyTensor]] = []
    for a in args:
        found: list[_t.LazyTensor] = []
        _leaves(a, found)
        by_position.append(found)
    lazies = list({id(t): t for ts in by_position for t in ts}.values())
    written = {id(t) for i in spec.written if i < len(args) for t in by_position[i]}
    read = {id(t) for i, ts in enumerate(by_position) if i not in spec.overwritten for t in ts}
    loc = source_location.current(3)

    from . import dist_check

    if dist_check.enabled():
        dist_check.check(name, args, [t for t in lazies if id(t) in read], loc)

    # A CPU tensor beside the lazy ones is the caller's own memory, read or written by the
    # group until the collective ends: that call waits, as eager's would.
    in_flight = name in IN_FLIGHT and bool(config.get("LAZY_DIST_ASYNC")) and not _has_cpu_tensor((args, list(kwargs.values())))
    to_read = [t for t in lazies if id(t) in read]
    with executor().reason(f"collective {name}"):
        hosts = executor().to_host_many(to_read, f"collective {name}") if to_read else []
    table: dict[int, torch.Tensor] = {}
    for t, h in zip(to_read, hosts, strict=True):
        h = h.detach()
        # Host copies may alias device buffers (shared by other tensors): the collective
        # writes into a private copy, and one still being read when the call returns
        # must not be a buffer the next execution may donate and overwrite.
        table[id(t)] = h.clone() if id(t) in written or in_flight else h
    for t in lazies:
        if id(t) not in table:
            table[id(t)] = torch.empty(tuple(t.shape), dtype=t.dtype)
    host_args = _substitute(args, table)
    host_kwargs = {k: _substitute(v, table) for k, v in kwargs.items()}
    outputs = [t for t in lazies if id(t) in written]
    with metrics.timed("collective"):
        result = func(*host_args, **host_kwargs)
        works: list[Any] = []
        _works(result, works)
        if not in_flight:
            for w in works:
                w.wait()
    metrics.counter_add(f"collective::{name}")
    if in_flight:
        backend = _t.active_backend()
        device = backend.default_device()
        received = collective_queue.issue(
            f"collective {name} at {loc}" if loc else f"collective {name}", works,
            [table[id(t)] for t in outputs], lambda h: backend.make_backend_data(h, device))
        for t, data in zip(outputs, received, strict=True):
            h = table[id(t)]
            t._lz_assign(Output(DeviceData(data, TensorMeta.of(h), loc)))
    else:
        for t in outputs:
            t._lz_assign(_t.upload(table[id(t)], loc))
    back = {id(table[id(t)]): t for t in lazies}
    return _restore(result, back, outputs)


def _has_cpu_tensor(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return not isinstance(x, _t.LazyTensor)
    if isinstance(x, list | tuple):
        return any(_has_cpu_tensor(v) for v in x)
    return False


def _works(result: Any, out: list[Any]) -> None:
    """The ``Work`` objects in a ``c10d`` op's result."""
    if isinstance(result, torch.ScriptObject):
        out.append(torch._C._distributed_c10d.Work.unbox(result))
    elif isinstance(result, list | tuple):
        for r in result:
            _works(r, out)


def _completed_work(values: list[torch.Tensor]) -> Any:
    """A finished ``Work`` whose future holds ``values`` (DDP's reducer reads it)."""
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(values)
    return torch._C._distributed_c10d._create_work_from_future(future).boxed()


def _restore(x: Any, back: dict[int, _t.LazyTensor], outputs: list[_t.LazyTensor]) -> Any:
    """The op's result with host tensors replaced by the caller's lazy ones."""
    if isinstance(x, torch.Tensor):
        # A tensor not in ``back`` is a CPU tensor the caller passed beside lazy ones.
        return back.get(id(x), x)
    if isinstance(x, torch.ScriptObject):
        return _completed_work(outputs)
    if isinstance(x, list):
        return [_restore(v, back, outputs) for v in x]
    if isinstance(x, tuple):
        return tuple(_restore(v, back, outputs) for v in x)
    return x


#: Collectives that return once issued (``LAZY_DIST_ASYNC``, lazy_core.collective_queue):
#: each rank's result arrives while tracing and the next segment go on. Barriers,
#: point-to-point and rooted gather/scatter wait, as in eager.
IN_FLIGHT = frozenset({
    "allreduce_", "allreduce_coalesced_", "broadcast_", "reduce_", "allgather_", "_allgather_base_",
    "allgather_coalesced_", "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_", "alltoall_", "alltoall_base_",
})


# -- functional collectives (torch.distributed._functional_collectives, DTensor) -------------

#: ``_c10d_functional`` ops: they return new tensors (or write the ``(a!)``
#: arguments of their in-place and ``out=`` forms) that ``wait_tensor`` completes.
FUNCTIONAL = (
    "all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_", "all_gather_into_tensor",
    "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced", "reduce_scatter_tensor",
    "reduce_scatter_tensor_out", "reduce_scatter_tensor_coalesced", "all_to_all_single", "broadcast",
    "broadcast_",
)


def _written_args(func: Any, args: tuple, kwargs: dict) -> list[Any]:
    """The values of the arguments ``func``'s schema marks as written (``Tensor(a!)``)."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            out.append(args[i] if i < len(args) else kwargs.get(arg.name))
    return out


def handle_functional(func: Any, args: tuple, kwargs: dict) -> Any:
    """A ``_c10d_functional`` collective on lazy tensors: the same cut as ``handle_collective``.

    Recorded as ordinary ops they used to return each rank's own input."""
    name = _op_name(func)
    lazies: list[_t.LazyTensor] = []
    _leaves((args, list(kwargs.values())), lazies)
    lazies = list({id(t): t for t in lazies}.values())
    written_leaves: list[_t.LazyTensor] = []
    _leaves(_written_args(func, args, kwargs), written_leaves)
    written = {id(t) for t in written_leaves}
    loc = source_location.current(3)
    with executor().reason(f"collective {name}"):
        hosts = executor().to_host_many(lazies, f"collective {name}") if lazies else []
    table = {id(t): (h.detach().clone() if id(t) in written else h.detach()) for t, h in zip(lazies, hosts)}
    host_args = _substitute(args, table)
    host_kwargs = {k: _substitute(v, table) for k, v in kwargs.items()}
    with metrics.timed("collective"):
        result = func(*host_args, **host_kwargs)
        _wait_tensors(result)
    metrics.counter_add(f"collective::{name}")
    for t in lazies:
        if id(t) in written:
            t._lz_assign(_t.upload(table[id(t)], loc))
    back = {id(table[id(t)]): t for t in lazies}
    return _lift(result, back, loc)


def _wait_tensors(x: Any) -> None:
    if isinstance(x, torch.Tensor):
        torch.ops._c10d_functional.wait_tensor.default(x)
    elif isinstance(x, list | tuple):
        for v in x:
            _wait_tensors(v)


def _lift(x: Any, back: dict[int, _t.LazyTensor], loc: Any) -> Any:
    """Results as lazy tensors: the caller's own for written arguments, new device data otherwise."""
    if isinstance(x, torch.Tensor):
        lazy = back.get(id(x))
        return lazy if lazy is not None else _t.wrap_output(_t.upload(x, loc))
    if isinstance(x, list | tuple):
        return type(x)(_lift(v, back, loc) for v in x)
    return x


def _wait_tensor(func: Any, args: tuple, kwargs: dict) -> Any:
    # Collectives on lazy tensors complete before they return.
    return args[0]


def _handlers() -> dict[Any, Any]:
    if not torch.distributed.is_available():
        return {}
    table: dict[Any, Any] = {}
    for name in SPECS:
        packet = getattr(torch.ops.c10d, name, None)
        if packet is not None:
            table[packet.default] = handle_collective
    for name in FUNCTIONAL:
        packet = getattr(torch.ops._c10d_functional, name, None)
        if packet is not None:
            table[packet.default] = handle_functional
    wait = getattr(torch.ops._c10d_functional, "wait_tensor", None)
    if wait is not None:
        table[wait.default] = _wait_tensor
    return table


#: ``c10d`` op -> handler, merged into ``fallback.SPECIAL_HANDLERS``.
HANDLERS: dict[Any, Any] = _handlers()


def _register() -> None:
    from .dist_setup import register_process_group_backend

    register_process_group_backend()


_register()
