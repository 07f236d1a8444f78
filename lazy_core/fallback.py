"""Ops that are not simply recorded: transfers, reads, random numbers, fallbacks.

* ``copy_``/``_to_copy`` across devices are the only host<->device transfers.
* ``_local_scalar_dense`` (``.item()``, ``bool()``) must materialize.
* Random ops draw their numbers on the CPU with PyTorch's generator, so a
  seeded lazy program gets exactly the numbers the same CPU program gets.
* Everything the tracer cannot record (data-dependent output shapes, ops the
  backend does not support, ops without a meta kernel) runs eagerly on the
  CPU on materialized inputs; tracing continues from the result. Each one is
  counted as ``fallback::<op>`` with the user's source line.
"""

from __future__ import annotations

from typing import Any

import torch

from . import metrics, source_location
from . import tensor as _t
from .executor import executor

aten = torch.ops.aten


def _lazy_leaves(x: Any, out: list) -> None:
    if isinstance(x, _t.LazyTensor):
        out.append(x)
    elif isinstance(x, list | tuple):
        for v in x:
            _lazy_leaves(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _lazy_leaves(v, out)


def _replace(x: Any, table: dict[int, torch.Tensor]) -> Any:
    if isinstance(x, _t.LazyTensor):
        return table[id(x)]
    if isinstance(x, list):
        return [_replace(v, table) for v in x]
    if isinstance(x, tuple):
        return tuple(_replace(v, table) for v in x)
    if isinstance(x, torch.device) and x.type == "lazy":
        return torch.device("cpu")
    if isinstance(x, str) and x.startswith("lazy"):
        return "cpu"
    return x


def run_eagerly(func: Any, args: tuple, kwargs: dict, why: str = "") -> Any:
    """Run ``func`` on the CPU with materialized inputs; continue lazily from its results."""
    loc = source_location.current(3)
    name = str(func)
    metrics.record_fallback(name, str(loc) if loc else None)
    lazies: list = []
    _lazy_leaves((args, kwargs), lazies)
    uniq = list({id(t): t for t in lazies}.values())
    with executor().reason(f"fallback {name}"):
        hosts = executor().to_host_many(uniq, f"fallback {name}")
    p = _t.plan(func)
    mutated_ids: set[int] = set()
    for m in p.mutated:
        idx = p.arg_index[m]
        target = args[idx] if idx < len(args) else kwargs.get(m)
        for t in target if isinstance(target, list | tuple) else [target]:
            if isinstance(t, _t.LazyTensor):
                mutated_ids.add(id(t))
    table: dict[int, torch.Tensor] = {}
    for t, h in zip(uniq, hosts):
        h = h.detach()
        # Host copies may alias device buffers: never write into them.
        table[id(t)] = h.clone() if id(t) in mutated_ids else h
    cpu_args = _replace(args, table)
    cpu_kwargs = {k: _replace(v, table) for k, v in kwargs.items()}
    result = func(*cpu_args, **cpu_kwargs)
    # Write in-place results back to their lazy tensors.
    by_cpu: dict[int, Any] = {}
    for t in uniq:
        if id(t) in mutated_ids:
            t._lz_assign(_t.upload(table[id(t)], loc))
            by_cpu[id(table[id(t)])] = t
    return _wrap_result(result, by_cpu, loc)


def _wrap_result(result: Any, by_cpu: dict[int, Any], loc: Any) -> Any:
    if isinstance(result, torch.Tensor):
        if id(result) in by_cpu:
            return by_cpu[id(result)]
        if result.device.type != "cpu":
            return result
        return _t.wrap_output(_t.upload(result, loc))
    if isinstance(result, list | tuple):
        return type(result)(_wrap_result(r, by_cpu, loc) for r in result)
    return result


_FILLERS = {"normal_", "uniform_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_"}


def run_random(func: Any, p: Any, args: tuple, kwargs: dict) -> Any:
    """Random ops: numbers come from the CPU generator (bit-identical to eager CPU)."""
    kind = func._schema.name.split("::")[-1]
    self = args[0] if args else None
    if isinstance(self, _t.LazyTensor) and (kind in _FILLERS or (kind == "bernoulli_" and func._overloadname == "float")):
        # The old value of ``self`` does not matter: fill a fresh CPU tensor.
        host = torch.empty(tuple(self.shape), dtype=self.dtype)
        func(host, *_replace(args[1:], {}), **_replace(kwargs, {}))
        metrics.counter_add(f"random::{func}")
        self._lz_assign(_t.upload(host, source_location.current(2)))
        return self
    if kind == "native_dropout":
        return _native_dropout(args, kwargs)
    return run_eagerly(func, args, kwargs, why="random")


def _native_dropout(args: tuple, kwargs: dict) -> Any:
    bound = dict(zip(("input", "p", "train"), args))
    bound.update(kwargs)
    x, prob, train = bound["input"], float(bound["p"]), bound.get("train")
    if not train or prob == 0.0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    keep = 1.0 - prob
    mask_host = torch.empty(tuple(x.shape), dtype=x.dtype).bernoulli_(keep)
    metrics.counter_add("random::aten.native_dropout.default")
    mask = _t.from_cpu(mask_host.to(torch.bool))
    scale = 0.0 if keep == 0 else 1.0 / keep
    return x * mask * scale, mask


# -- special handlers -----------------------------------------------------------


def _copy_(func: Any, args: tuple, kwargs: dict) -> Any:
    return copy_into(args[0], args[1])


def copy_into(dst: Any, src: Any) -> Any:
    """``dst.copy_(src)`` where at least one side is lazy: the only transfer points."""
    if isinstance(dst, _t.LazyTensor):
        if isinstance(src, _t.LazyTensor):
            dst._lz_assign(src._lz_value())
        else:
            host = src.detach().to(dtype=dst.dtype).expand(tuple(dst.shape)).contiguous()
            dst._lz_assign(_t.upload(host, source_location.current(2)))
        return dst
    host = executor().to_host(src, "copy to cpu")
    dst.copy_(host)
    return dst


def _to_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    src = args[0]
    device = kwargs.get("device")
    target_lazy = device is not None and torch.device(device).type == "lazy"
    if isinstance(src, _t.LazyTensor):
        if device is None or target_lazy:
            rest = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "pin_memory")}
            if rest.get("dtype", src.dtype) == src.dtype and len(rest) <= 1 and "memory_format" not in rest:
                return _t.dispatch(aten.clone.default, (src,), {})
            # Record it directly: dispatch() would route _to_copy back here.
            node, template = _t.record(aten._to_copy.default, (src,), rest)
            return _t._wrap(node, template, src._lz_storage.device)
        host = executor().to_host(src, "to cpu")
        rest = {k: v for k, v in kwargs.items() if k != "device"}
        return aten._to_copy.default(host, device=device, **rest)
    # A CPU tensor moving to the lazy device.
    rest = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "non_blocking")}
    host = aten._to_copy.default(src, **rest)
    return _t.from_cpu(host)


def _item(func: Any, args: tuple, kwargs: dict) -> Any:
    return executor().to_host(args[0], "item").item()


def _unsupported(func: Any, args: tuple, kwargs: dict) -> Any:
    raise NotImplementedError(
        f"{func} changes a tensor's storage or size in place; lazy tensors have fixed shapes. "
        "Create a new tensor instead."
    )


def _resize(func: Any, args: tuple, kwargs: dict) -> Any:
    # Resizing to the size a tensor already has is a no-op (out= helpers do it).
    self, size = args[0], args[1]
    shape = tuple(size.shape) if isinstance(size, torch.Tensor) else tuple(size)
    if isinstance(self, _t.LazyTensor) and tuple(self.shape) == shape:
        return self
    return _unsupported(func, args, kwargs)


def _compatible_shallow_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    # Asked by ``t.data = other`` (and in-place view ops): no data is needed to answer.
    return isinstance(args[0], _t.LazyTensor) and isinstance(args[1], _t.LazyTensor)


def _lift(func: Any, args: tuple, kwargs: dict) -> Any:
    return args[0]


SPECIAL_HANDLERS: dict[Any, Any] = {
    aten.copy_.default: _copy_,
    aten._to_copy.default: _to_copy,
    aten._local_scalar_dense.default: _item,
    aten.set_.source_Tensor: _unsupported,
    aten.set_.source_Storage: _unsupported,
    aten.set_.source_Storage_storage_offset: _unsupported,
    aten.resize_.default: _resize,
    aten.resize_as_.default: _resize,
    aten.lift_fresh.default: _lift,
    aten._has_compatible_shallow_copy_type.default: _compatible_shallow_copy,
}

# Collectives (torch.distributed's c10d ops) are cut points run on the host: lazy_core.distributed.
# DDP's bucket views (as_strided chunks) as views every backend lowers: lazy_core.strided.
from .distributed import HANDLERS as _COLLECTIVES  # noqa: E402
from .strided import HANDLERS as _STRIDED  # noqa: E402

SPECIAL_HANDLERS.update(_COLLECTIVES)
SPECIAL_HANDLERS.update(_STRIDED)
