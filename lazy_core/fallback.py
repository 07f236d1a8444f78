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

import warnings
from typing import Any

import torch

from . import metrics, multinomial, source_location
from . import registry as _registry
from . import tensor as _t
from .executor import executor
from .overlap import check_no_partial_overlap
from .views import bind_after_self

aten = torch.ops.aten


#: Dtypes compiled backends cannot run: complex numbers reach the compilers as
#: ``complex<f32>`` and ComplexHalf has no MLIR type; quantized tensors have
#: no lowering at all. A graph holding one failed to compile at best and, at
#: worst, aborted the process inside LLVM (``fft.fft2``: "unhandled type or
#: value for getConstantWithGivenDtypeAndValue", SIGABRT). Ops on them run
#: eagerly instead. A backend lists what it cannot run in
#: ``unsupported_dtypes`` (the ``eager`` backend: nothing).
#: The unsigned integers wider than a byte and the float8 types too: torch-mlir's importer
#: has no uint16/uint64 (the graph failed to import), and where a compiler took uint32 it
#: computed ops eager has no kernel for (``uint32 + uint32`` raises NotImplementedError
#: eagerly; adversarial sweep): run eagerly, each gives eager's value or eager's error.
DEFAULT_UNSUPPORTED_DTYPES = frozenset({
    torch.complex32, torch.complex64, torch.complex128,
    torch.qint8, torch.quint8, torch.qint32, torch.quint4x2, torch.quint2x4,
    torch.uint16, torch.uint32, torch.uint64,
    torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
})

_refused: tuple[Any, frozenset] = (None, frozenset())


def refused_dtypes() -> frozenset:
    """Dtypes the active backend cannot compile (asked for every traced op, so cached)."""
    global _refused
    backend = _registry._active
    if _refused[0] is not backend or backend is None:
        backend = _registry.active_backend()
        _refused = (backend, frozenset(getattr(backend, "unsupported_dtypes", DEFAULT_UNSUPPORTED_DTYPES)))
    return _refused[1]


_MISSING = object()
#: Static id of a traced signature (tensor.py's shape cache) -> refused_dtype's answer for it,
#: for the backend in ``_by_signature_backend``: the signature fixes every dtype involved.
_by_signature: dict[int, torch.dtype | None] = {}
_by_signature_backend: Any = None


def refused_dtype_of(sid: int, metas: Any, operands: Any) -> torch.dtype | None:
    """``refused_dtype`` for the traced signature ``sid`` (computed once per signature)."""
    global _by_signature_backend
    backend = _registry._active
    if backend is not _by_signature_backend or backend is None:
        _by_signature.clear()
        _by_signature_backend = backend
    bad = _by_signature.get(sid, _MISSING)
    if bad is _MISSING:
        if len(_by_signature) >= 1 << 16:
            _by_signature.clear()
        bad = _by_signature[sid] = refused_dtype(metas, operands)
    return bad  # type: ignore[return-value]


def refused_dtype(metas: Any, operands: Any) -> torch.dtype | None:
    """The first dtype among an op's results and operands the backend cannot run, or None."""
    refused = refused_dtypes()
    if not refused:
        return None
    for m in metas:
        if m is not None and m.dtype in refused:
            return m.dtype
    for o in operands:
        if o.meta.dtype in refused:
            return o.meta.dtype
    return None


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
            host = table[id(t)]
            if tuple(host.shape) != tuple(t.shape):
                # An out= tensor eager resized (``torch.frexp(x, out=(empty, empty))``): resized
                # here as a traced op resizes it. Eager has already warned, if it had elements.
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    _t._resize_out(func, t, _t.upload(host, loc))
            else:
                t._lz_assign(_t.upload(host, loc))
            by_cpu[id(host)] = t
    return _wrap_result(result, by_cpu, loc)


def _wrap_result(result: Any, by_cpu: dict[int, Any], loc: Any) -> Any:
    if isinstance(result, torch.Tensor):
        if id(result) in by_cpu:
            return by_cpu[id(result)]
        if result.device.type != "cpu":
            return result
        if result.layout != torch.strided:
            raise _t.layout_unsupported(result.layout)
        return _t.wrap_output(_t.upload(result, loc))
    if isinstance(result, list | tuple):
        return type(result)(_wrap_result(r, by_cpu, loc) for r in result)
    return result


_FILLERS = {"normal_", "uniform_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_"}
#: Random factories shaped like a tensor argument (every overload: ``randint_like`` takes bounds).
_LIKE_DRAWS = {"rand_like", "randn_like", "randint_like"}


def run_random(func: Any, p: Any, args: tuple, kwargs: dict) -> Any:
    """Random ops: numbers come from the CPU generator (bit-identical to eager CPU)."""
    kind = func._schema.name.split("::")[-1]
    self = args[0] if args else None
    if isinstance(self, _t.LazyTensor) and (kind in _FILLERS or (kind == "bernoulli_" and func._overloadname == "float")):
        # The old value of ``self`` does not matter: fill a fresh CPU tensor laid out as ``self``
        # is, so the CPU kernel draws in the same order (``t().normal_()`` drew other numbers in a
        # contiguous one) and refuses what it refuses (an expanded ``self``).
        host = torch.empty_strided(tuple(self.shape), tuple(self.stride()), dtype=self.dtype)
        func(host, *_replace(args[1:], {}), **_replace(kwargs, {}))
        metrics.counter_add(f"random::{func}")
        self._lz_assign(_t.upload(host, source_location.current(2)))
        return self
    if kind in _LIKE_DRAWS and isinstance(self, _t.LazyTensor) and kwargs.get("device") in (None, self.device):
        # ``torch.rand_like(x)`` (Phi-MoE's router, ``uniform_`` of it): eager's kernel draws
        # into ``empty_like(x)``; the same kernel on a CPU tensor laid out as ``x`` draws the
        # same numbers, which become device data (it ran eagerly and cut the graph).
        host = torch.empty_strided(tuple(self.shape), tuple(self.stride()), dtype=self.dtype)
        drawn = func(host, *_replace(args[1:], {}), **{k: v for k, v in kwargs.items() if k != "device"})
        metrics.counter_add(f"random::{func}")
        return _t.from_cpu(drawn, self.device.index or 0)
    if kind == "native_dropout":
        return _native_dropout(args, kwargs)
    if func is torch.ops.aten.multinomial.default and multinomial.recordable(args, kwargs):
        metrics.counter_add("random::aten.multinomial.default")
        return multinomial.multinomial(args, kwargs)
    if kind.startswith("rrelu_with_noise"):
        bound = {"self": args[0], **bind_after_self(func, args[1:], kwargs)}
        if not bound.get("training", False):
            return _rrelu_eval(kind, bound)
    return run_eagerly(func, args, kwargs, why="random")


def _rrelu_eval(kind: str, bound: dict[str, Any]) -> Any:
    """``F.rrelu`` in eval draws nothing: the CPU kernel is ``leaky_relu`` with the slope
    ``(lower + upper) / 2``, and ``noise`` stays as it is. Recorded as that, so it compiles."""
    x, noise = bound["self"], bound["noise"]
    slope = (bound.get("lower", 0.125) + bound.get("upper", 1.0 / 3.0)) / 2
    out = torch.ops.aten.leaky_relu.default(x, slope)
    if kind == "rrelu_with_noise_":
        return x.copy_(out)
    if kind == "rrelu_with_noise_functional":
        return out, noise.clone()
    return out


def _like_strides(x: Any) -> tuple[int, ...]:
    """The strides ``torch.empty_like(x)`` gives a tensor of ``x``'s shape and strides."""
    meta = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
    return tuple(torch.empty_like(meta).stride())


def _native_dropout(args: tuple, kwargs: dict) -> Any:
    bound = dict(zip(("input", "p", "train"), args))
    bound.update(kwargs)
    x, prob, train = bound["input"], float(bound["p"]), bound.get("train")
    if not train or prob == 0.0:
        return x.clone(), torch.ones_like(x, dtype=torch.bool)
    keep = 1.0 - prob
    # Eager draws into ``empty_like(input)``, in memory order: a transposed input
    # (nn.LSTM's batch_first output) needs its strides to get the same mask. An input whose
    # elements overlap (expanded: XLNet's relative attention) gets the layout ``empty_like``
    # picks for it, not its own strides (a mask drawn into those raised).
    mask_host = torch.empty_strided(tuple(x.shape), _like_strides(x), dtype=x.dtype).bernoulli_(keep)
    metrics.counter_add("random::aten.native_dropout.default")
    mask = _t.from_cpu(mask_host.to(torch.bool))
    scale = 0.0 if keep == 0 else 1.0 / keep
    return x * mask * scale, mask


# -- special handlers -----------------------------------------------------------


def _copy_(func: Any, args: tuple, kwargs: dict) -> Any:
    if args[1] is args[0]:
        # Eager's copy_ returns at once when the source is the tensor itself, before
        # its overlap check: ``expanded.copy_(expanded)`` is allowed (fuzz seed 0).
        return args[0]
    return copy_into(args[0], args[1])


def copy_into(dst: Any, src: Any) -> Any:
    """``dst.copy_(src)`` where at least one side is lazy: the only transfer points."""
    if isinstance(dst, _t.LazyTensor):
        if isinstance(src, _t.LazyTensor):
            check_no_partial_overlap([dst], [src])
            try:
                dst._lz_assign(src._lz_value())
                return dst
            except _t._Untraceable:  # a dtype conversion the backend cannot run: via the host
                src = executor().to_host(src, "copy")
        host = src.detach().to(dtype=dst.dtype).expand(tuple(dst.shape)).contiguous()
        layout = dst._lz_storage.meta
        if not dst._lz_view and layout.stride != host.stride() and layout.shape == host.shape:
            # Uploaded in the storage's layout (channels-last ``cpu_t.to("lazy")``), so
            # its value's meta has the storage's strides and no relayout op is recorded.
            host = torch.empty_strided(layout.shape, layout.stride, dtype=host.dtype).copy_(host)
        dst._lz_assign(_t.upload(host, source_location.current(2)))
        return dst
    host = executor().to_host(src, "copy to cpu")
    dst.copy_(host)
    return dst


def _dense_layout(t: torch.Tensor) -> bool:
    from .strided import dense

    return dense(tuple(t.shape), tuple(t.stride()))


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
            try:
                node, template = _t.record(aten._to_copy.default, (src,), rest)
            except _t._Untraceable as e:  # to or from a dtype the backend cannot run
                return run_eagerly(func, args, kwargs, why=str(e))
            return _t._wrap(node, template, src._lz_storage.device)
        host = executor().to_host(src, "to cpu")
        rest = {k: v for k, v in kwargs.items() if k != "device"}
        if rest.get("memory_format", torch.preserve_format) == torch.preserve_format \
                and host.stride() != src.stride() and _dense_layout(src):
            # Eager's copy to the CPU keeps a dense layout (a channels-last or transposed tensor).
            host = torch.empty_strided(tuple(src.shape), src.stride(), dtype=host.dtype).copy_(host)
        return aten._to_copy.default(host, device=device, **rest)
    # A CPU tensor moving to the lazy device.
    rest = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory", "non_blocking")}
    host = aten._to_copy.default(src, **rest)
    index = torch.device(device).index if target_lazy else None
    return _t.from_cpu(host, index or 0)


def _index(func: Any, args: tuple, kwargs: dict) -> Any:
    """``x[idx]``: recorded unless an index is a boolean (or uint8) mask.

    ``index.Tensor`` is tagged dynamic-shape for its mask form only; with
    integer indices the result's shape follows from theirs, and HF's
    attention-mask helpers index ``padding_mask[batch_idx, kv_idx]`` that way
    on every forward (run eagerly, it split each step). That form is
    dispatched as ``_unsafe_index`` (the same op without the dynamic tag, and
    without CPU bounds checks: recorded like ``index_select``); the lowering
    turns it back into ``index.Tensor``. CPU index tensors move to the lazy
    device, as PyTorch moves them to ``self``'s device.
    """
    bound = dict(zip(("self", "indices"), args))
    bound.update(kwargs)
    self, indices = bound["self"], list(bound["indices"])
    if any(isinstance(i, torch.Tensor) and (i.is_floating_point() or i.is_complex()) for i in indices):
        # index.Tensor's CPU check, with its class (``_unsafe_index``'s meta kernel raises RuntimeError).
        raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
    masks = any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)
    if masks or not isinstance(self, _t.LazyTensor):
        return run_eagerly(func, args, kwargs, why="data-dependent" if masks else "index of a CPU tensor")
    return _t.dispatch(aten._unsafe_index.Tensor, (self, _on_device_of(self, indices)), {})


def _on_device_of(self: Any, indices: list) -> list:
    """``indices`` with its CPU tensors uploaded to ``self``'s lazy device. A CPU index out of
    range raises eager's IndexError here, at the call: uploaded, its check waited for the data
    and raised at a later, unrelated read (adversarial sweep)."""
    _check_host_indices(tuple(self.shape), indices)
    return [_t.from_cpu(i, self._lz_storage.device)
            if isinstance(i, torch.Tensor) and not isinstance(i, _t.LazyTensor) else i for i in indices]


def _check_host_indices(shape: tuple[int, ...], indices: list) -> None:
    dim = 0
    for i in indices:
        if isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8):
            dim += i.dim()  # a mask covers as many dims as it has
            continue
        if isinstance(i, torch.Tensor) and not isinstance(i, _t.LazyTensor) and dim < len(shape) and i.numel():
            n = shape[dim]
            bad = (i >= n) | (i < -n)
            if bad.any():
                raise IndexError(f"index {i[bad].flatten()[0].item()} is out of bounds for dimension {dim} "
                                 f"with size {n}")
        dim += 1


def _index_put(func: Any, args: tuple, kwargs: dict) -> Any:
    """``x[idx] = v``: CPU index tensors move to the lazy device, as PyTorch moves them to
    ``self``'s device (``x[torch.tensor([0, 2])] = 1.0`` raised "two devices", and with it
    ``nn.init.sparse_``, found by the adversarial sweep)."""
    bound = bind_after_self(func, args[1:], kwargs) if args else {}
    indices = bound.get("indices")
    if not isinstance(args[0] if args else None, _t.LazyTensor) or not indices or not any(
            isinstance(i, torch.Tensor) and not isinstance(i, _t.LazyTensor) for i in indices):
        return _t.dispatch_unspecial(func, args, kwargs)
    moved = _on_device_of(args[0], indices)
    if len(args) > 1:
        args = (args[0], moved, *args[2:])
    else:
        kwargs = {**kwargs, "indices": moved}
    return _t.dispatch_unspecial(func, args, kwargs)


#: Ops whose length tensors PyTorch takes on the CPU whatever the device of the data (as CUDA
#: does), with the results that stay on the CPU: ``pack_padded_sequence``'s ``batch_sizes`` ("batch_sizes
#: should always be on CPU" was raised for a lazy one). ``F.ctc_loss`` with CPU lengths raised "two
#: devices". (``_pad_packed_sequence`` and the packing's backward are composites of ordinary ops.)
_CPU_ARGUMENT_OPS: dict[Any, tuple[int, ...]] = {
    aten._pack_padded_sequence.default: (1,),
    aten._ctc_loss.Tensor: (),
    aten._ctc_loss_backward.Tensor: (),
}


def _cpu_arguments(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``func`` on the CPU where it has CPU tensor arguments, keeping its CPU-side results there."""
    if func is aten._pack_padded_sequence.default:
        lengths = args[1] if len(args) > 1 else kwargs.get("lengths")
        if isinstance(lengths, _t.LazyTensor):
            # PyTorch's own error for lengths on an accelerator (CUDA raises it too); computing
            # batch_sizes on the device raised "batch_sizes should always be on CPU" (ValueError).
            raise RuntimeError(f"'lengths' argument should be a 1D CPU int64 tensor, but got "
                               f"{lengths.dim()}D {lengths.device} {_type_name(lengths.dtype)} tensor")
    flat: list = []
    _lazy_leaves((args, kwargs), flat)
    cpu_args = [a for a in (*args, *kwargs.values())
                if isinstance(a, torch.Tensor) and not isinstance(a, _t.LazyTensor) and a.dim() > 0]
    if not flat or not cpu_args:
        return _t.dispatch_unspecial(func, args, kwargs)
    out = run_eagerly(func, args, kwargs, why="CPU length arguments")
    keep = _CPU_ARGUMENT_OPS[func]
    if not keep:
        return out
    return type(out)(_t.materialize(o, "CPU result") if i in keep else o for i, o in enumerate(out))


def _type_name(dtype: torch.dtype) -> str:
    """PyTorch's scalar type name in messages: ``Long`` for ``torch.int64``."""
    return torch.empty((), dtype=dtype).type().split(".")[-1].replace("Tensor", "")


def _item(func: Any, args: tuple, kwargs: dict) -> Any:
    return executor().to_host(args[0], "item").item()


def _unsupported(func: Any, args: tuple, kwargs: dict) -> Any:
    raise NotImplementedError(
        f"{func} changes a tensor's storage or size in place; lazy tensors have fixed shapes. "
        "Create a new tensor instead."
    )


def _set_storage(func: Any, args: tuple, kwargs: dict) -> Any:
    """``t.set_(storage, offset, size, stride)``: ``torch.load(map_location="lazy")``
    rebuilds each tensor this way, on a storage ``lazy_core.interop`` made over
    the loaded host bytes; the tensor becomes an upload of them."""
    from . import interop

    self = args[0]
    storage = args[1] if len(args) > 1 else kwargs.get("source")
    host_storage = interop.host_storage(storage)
    if not isinstance(self, _t.LazyTensor) or host_storage is None:
        return _unsupported(func, args, kwargs)
    rest = list(args[2:])
    offset = rest[0] if rest else kwargs.get("storage_offset", 0)
    size = rest[1] if len(rest) > 1 else kwargs.get("size", [host_storage.nbytes() // self.element_size()])
    stride = rest[2] if len(rest) > 2 else kwargs.get("stride", None)
    host = torch.empty(0, dtype=self.dtype).set_(host_storage, offset, size, *([stride] if stride is not None else []))
    new = _t.from_cpu(host.clone(), self._lz_storage.device)
    self.data = new  # LazyTensor.data's setter takes new's storage and view
    return self


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
    aten.index.Tensor: _index,
    aten.index_put_.default: _index_put,
    aten.index_put.default: _index_put,
    aten._index_put_impl_.default: _index_put,
    aten._unsafe_index_put.default: _index_put,
    **{op: _cpu_arguments for op in _CPU_ARGUMENT_OPS},
    aten.set_.source_Tensor: _unsupported,
    aten.set_.source_Storage: _set_storage,
    aten.set_.source_Storage_storage_offset: _set_storage,
    aten.resize_.default: _resize,
    aten.resize_as_.default: _resize,
    aten.lift_fresh.default: _lift,
    aten._has_compatible_shallow_copy_type.default: _compatible_shallow_copy,
}

# Collectives (torch.distributed's c10d ops) are cut points run on the host: lazy_core.distributed.
# DDP's bucket views (as_strided chunks) as views every backend lowers: lazy_core.strided.
# cholesky and cholesky_inverse: their _ex forms and a device-side status check.
# F.linear_cross_entropy's chunked custom ops, as the functional math they compute.
from .cholesky_forms import HANDLERS as _CHOLESKY  # noqa: E402
from .distributed import HANDLERS as _COLLECTIVES  # noqa: E402
from .linear_cross_entropy import HANDLERS as _LINEAR_CROSS_ENTROPY  # noqa: E402
from .strided import HANDLERS as _STRIDED  # noqa: E402

SPECIAL_HANDLERS.update(_COLLECTIVES)
SPECIAL_HANDLERS.update(_STRIDED)
SPECIAL_HANDLERS.update(_LINEAR_CROSS_ENTROPY)
SPECIAL_HANDLERS.update(_CHOLESKY)
