"""LazyTensor: the ``torch.Tensor`` subclass on device ``lazy`` that records ops.

``__torch_dispatch__`` sits below autograd, so forward, backward and
optimizer ops all arrive here as ATen ops. Each one becomes a ``Node``
(shapes from a cached meta-kernel call, so ``.shape`` never forces
execution); views share their base's ``Storage``; in-place and ``out=`` ops
are replaced by their functional variant plus a write-back; ops that cannot
be traced (data-dependent output shapes, unsupported by the backend) run
eagerly on the CPU through ``lazy_core.fallback``.
"""

from __future__ import annotations

import copy as _copy
import functools
import math
import warnings
from collections.abc import Callable
from typing import Any

import torch

from . import (
    checks,
    config,
    cpu_results,
    fallback,
    half_steps,
    host_eval,
    interop,
    meta_kernels,
    metrics,
    source_location,
    storage_growth,
)
from . import registry as _registry
from .eager_views import EagerViewStep
from .executor import TRACE_LOCK, executor
from .ir import DeviceData, Node, Output, ScalarParam, TensorMeta, new_static_id
from .metrics import _counters
from .op_schema import INDEX_ARGS, OpPlan, check_cast, plan
from .out_dtype import check_out_dtypes
from .overlap import check_no_partial_overlap, check_on_cpu, shares_memory
from .registry import active_backend
from .views import (
    INTERNAL_OVERLAP,
    Storage,
    ViewStep,
    broadcasts,
    has_internal_overlap,
    split_views,
    write_by_index,
)

aten = torch.ops.aten
LAZY = "lazy"


_devices: dict[int, torch.device] = {}


def lazy_device(index: int = 0) -> torch.device:
    # Called for every new tensor; building a torch.device costs ~2 µs.
    dev = _devices.get(index)
    if dev is None:
        _registry.check_device_index(index)
        dev = _devices[index] = torch.device(LAZY, index)
    return dev


def _is_parameter(t: torch.Tensor) -> bool:
    """``nn.Parameter(lazy)`` is the lazy tensor itself, marked ``_is_param`` (how PyTorch makes
    a Parameter of a tensor subclass); ``isinstance(t, nn.Parameter)`` reads that mark."""
    return isinstance(t, torch.nn.Parameter)


def _user_attributes(t: torch.Tensor) -> dict[str, Any]:
    """Attributes set on ``t`` by its users (``p.no_decay = True``), without this module's own
    state and the Parameter mark (a copy that is a Parameter is made one by ``nn.Parameter``)."""
    return {k: v for k, v in t.__dict__.items() if not k.startswith("_lz_") and k != "_is_param"}


class LazyTensor(torch.Tensor):
    """A tensor whose value is an IR value (pending) or device data (materialized)."""

    _lz_storage: Storage
    _lz_view: tuple[ViewStep, ...]
    _lz_cache: tuple[Output, Output] | None

    @staticmethod
    def __new__(cls, storage: Storage, view: tuple[ViewStep, ...], meta: TensorMeta) -> LazyTensor:
        t = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.shape,
            strides=meta.stride,
            dtype=meta.dtype,
            device=lazy_device(storage.device),
            requires_grad=False,
        )
        t._lz_storage = storage
        t._lz_view = view
        t._lz_cache = None
        return t

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    # ``t.data = other``: PyTorch's setter swaps the C++ tensor's metadata (shape, strides,
    # dtype) but knows nothing of the Python state that holds a lazy tensor's value, so the
    # tensor kept its old value under the new shape (``nn.utils.vector_to_parameters`` did
    # nothing). As eagerly, ``t`` then aliases ``other``'s storage.
    @property
    def data(self) -> torch.Tensor:
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        if not isinstance(new, LazyTensor):
            torch.Tensor.data.__set__(self, new)  # PyTorch's own error for another tensor type
            raise RuntimeError(f"cannot set the data of a lazy tensor to a {new.device} tensor; "
                               "move it to the lazy device first")
        torch.Tensor.data.__set__(self, new)
        self._lz_storage = new._lz_storage
        self._lz_view = new._lz_view
        self._lz_cache = None

    # -- values ------------------------------------------------------------------
    def _lz_value(self) -> Output:
        """The IR value this tensor currently stands for."""
        storage = self._lz_storage
        if not self._lz_view:
            return storage.value
        cache = self._lz_cache
        base = storage.value
        if cache is not None and cache[0] is base:
            return cache[1]
        value = base
        for step in self._lz_view:
            value = step.apply(record_output, value)
        self._lz_cache = (base, value)
        return value

    def _lz_set_materialized(self, value: Output) -> None:
        """Remember a materialized value of a view (its base did not change)."""
        if self._lz_view:
            self._lz_cache = (self._lz_storage.value, value)
            if isinstance(value.node, DeviceData):
                value.node.pinned = True
        else:
            self._lz_storage.value = value

    def _lz_assign(self, new: Output, writer: Any = None) -> None:
        """Make ``new`` the value of this tensor (in-place semantics, views included).
        ``writer`` is the in-place op, where it decides eager's overlap check."""
        shape, dtype = tuple(self.shape), self.dtype
        if new.meta.dtype != dtype:
            new = record_output(aten._to_copy.default, (new,), {"dtype": dtype})
        if new.meta.shape != shape:
            try:
                fits = torch.broadcast_shapes(new.meta.shape, shape) == shape
            except RuntimeError:
                fits = False
            if not fits:
                raise RuntimeError(
                    f"an in-place op would resize a lazy tensor from {list(shape)} to "
                    f"{list(new.meta.shape)}; lazy tensors have fixed shapes"
                )
            new = record_output(aten.expand.default, (new, list(shape)), {})
            new = record_output(aten.clone.default, (new,), {})
        storage = self._lz_storage
        if isinstance(storage.value.node, DeviceData):
            # The last good value, held until the execution of the pending value takes it
            # over (it rolls back to it if that fails, Note [Failed executions are
            # transactions] in async_exec) and forgets it.
            last_good = storage.value.node
            storage.previous = lambda: last_good
        if not self._lz_view:
            storage.value = _in_layout(new, storage.meta)
            executor().track(storage)
            return
        if broadcasts(self._lz_view, shape):
            if has_internal_overlap(shape, tuple(self.stride())):
                _check_overlapping_write(writer)
            index = from_cpu(torch.arange(math.prod(storage.value.meta.shape)).view(storage.value.meta.shape))
            storage.value = _in_layout(
                write_by_index(record_output, self._lz_view, storage.value, index._lz_storage.value, new), storage.meta)
            self._lz_cache = (storage.value, new) if new.meta.stride == tuple(self.stride()) else None
            executor().track(storage)
            return
        values = [storage.value]
        for step in self._lz_view[:-1]:
            values.append(step.apply(record_output, values[-1]))
        updated = new
        for step, below in zip(reversed(self._lz_view), reversed(values), strict=True):
            updated = step.invert(record_output, below, updated)
        # In the storage's memory order: a write through ``x.t()`` inverts to a transposed
        # value, and a view of ``x`` read after it (``x.view(-1)``) failed to apply to it
        # (stateful fuzz seed 9522).
        updated = _in_layout(updated, storage.meta)
        storage.value = updated
        # The view's value is ``new`` only where ``new`` is laid out as the view: the ops reading
        # the view take their strides from its value (``v.t()``, ``v + 1``, ``v.view(-1)``), and
        # ``new`` has the written op's layout (``v.copy_(src)``: ``src``'s; ``v.mul_(2)`` of a
        # column slice: contiguous). Otherwise the view is re-derived from the updated storage
        # at its next read, in its own strides: a transposed or sliced view then read as
        # contiguous (``v.t().view(-1)`` raised, ``v.view(-1)`` of a column slice passed where
        # eager raises, ``(v + 0).as_strided(...)`` read the wrong elements).
        self._lz_cache = (updated, new) if new.meta.stride == tuple(self.stride()) else None
        executor().track(storage)

    # -- torch integration -------------------------------------------------------
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        with TRACE_LOCK:  # Note [Tracing from several threads] in executor
            return dispatch(func, args, kwargs or {})

    def __tensor_flatten__(self) -> tuple[list[str], Any]:
        return [], (self._lz_storage, self._lz_view, TensorMeta.of(self))

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, outer_size: Any, outer_stride: Any) -> LazyTensor:
        storage, view, meta = ctx
        return LazyTensor(storage, view, meta)

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        host = materialize(self, "print")
        text = torch._tensor_str._str(host, tensor_contents=tensor_contents)
        # Same layout as torch prints for other devices: data, device=, dtype=, ...
        cut = len(text) - 1
        for marker in (", size=", ", dtype=", ", requires_grad=", ", grad_fn="):
            i = text.find(marker)
            if i != -1:
                cut = min(cut, i)
        text = f"{text[:cut]}, device='{self.device}'{text[cut:]}"
        if self.grad_fn is not None:
            text = f"{text[:-1]}, grad_fn=<{type(self.grad_fn).__name__}>)"
        elif self.requires_grad:
            text = f"{text[:-1]}, requires_grad=True)"
        return text

    def to(self, *args: Any, **kwargs: Any) -> Any:
        # ``x.to("lazy")`` of a lazy tensor is ``x`` itself (like cuda:0 -> "cuda"),
        # which keeps tied parameters tied through ``Module.to``.
        copy = kwargs.pop("copy", False)  # _parse_to rejects it
        try:
            device, dtype, _non_blocking, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        except RuntimeError:  # ``copy`` given positionally: to(device, dtype, non_blocking, copy)
            return super().to(*args, **kwargs, **({"copy": True} if copy else {}))
        if copy:
            kwargs["copy"] = True
        if (
            not copy
            and (device is None or (device.type == LAZY and (device.index is None or device.index == self.device.index)))
            and (dtype is None or dtype == self.dtype)
            and memory_format in (None, torch.preserve_format)
        ):
            return self
        return super().to(*args, **kwargs)

    def numpy(self, *, force: bool = False) -> Any:
        """Refused as PyTorch refuses it for every non-CPU tensor (cuda, meta):
        an array sharing memory with a device value cannot exist, and the
        memoized host copy must not be handed out (writes to it would change
        this tensor). ``force=True`` is ``detach().cpu()...numpy()``, a copy,
        as in PyTorch."""
        if not force:
            raise TypeError(
                f"can't convert {self.device.type} device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first."
            )
        return self.detach().cpu().resolve_conj().resolve_neg().numpy()

    def tolist(self) -> Any:
        return materialize(self, "tolist").tolist()

    def __format__(self, format_spec: str) -> str:
        """A 0-d tensor formats as its number (``f"{loss:.4f}"``), as a CPU or CUDA tensor does:
        ``Tensor.__format__`` does so only when ``type(self) is Tensor``, so a subclass raised
        "unsupported format string" (found by the adversarial sweep)."""
        if self.dim() == 0:
            return materialize(self, "format").item().__format__(format_spec)
        return object.__format__(self, format_spec)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        """A copy, always (``np.asarray(t)``, ``np.array(t)``): never the
        memoized host value, which later reads of this tensor return."""
        if copy is False:
            raise ValueError("Unable to avoid copy while creating an array as requested.")
        arr = materialize(self, "numpy").detach().numpy().copy()
        return arr.astype(dtype, copy=False) if dtype is not None else arr

    def __reduce_ex__(self, proto: int) -> Any:
        # Saved as CPU tensors: a checkpoint must not depend on a live backend. A Parameter
        # stays one, and attributes set on the tensor travel with it, as eager saves them.
        host = materialize(self, "save").detach().clone()
        if _is_parameter(self):
            host = torch.nn.Parameter(host, self.requires_grad)
        else:
            host.requires_grad_(self.requires_grad)
        host.__dict__.update(_user_attributes(self))
        return host.__reduce_ex__(proto)

    # Storage identity for libraries that look for shared tensors (safetensors,
    # save_pretrained): stand-in addresses, never memory (lazy_core.interop).
    def untyped_storage(self) -> Any:
        return interop.LazyUntypedStorage(self._lz_storage)

    def data_ptr(self) -> int:
        return interop.data_ptr(self)

    def storage_offset(self) -> int:
        return interop.storage_offset(self)

    def __copy__(self) -> Any:
        """``copy.copy``: a new tensor over the same storage, as eager's rebuild from the same
        storage is (a write through either is seen by both), a leaf with the same
        ``requires_grad`` and attributes; a Parameter again. (Without this, ``copy.copy`` went
        through ``__reduce_ex__`` and returned a detached CPU copy.)"""
        alias = self.detach()
        if _is_parameter(self):
            alias = torch.nn.Parameter(alias, self.requires_grad)
        else:
            alias.requires_grad_(self.requires_grad)
        alias.__dict__.update(_user_attributes(self))
        return alias

    def __deepcopy__(self, memo: dict) -> Any:
        """``torch.Tensor.__deepcopy__`` for a device without storages (PyTorch clones ``lazy``
        and ``xla`` tensors too, so views do not share after the copy), with the rest of its
        contract: non-leaf tensors are refused, ``grad`` and attributes are copied, and a
        Parameter is copied as ``nn.Parameter.__deepcopy__`` does (a Parameter again, no grad)."""
        if not self.is_leaf:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                "because of a torch.nn.utils.weight_norm usage, see https://github.com/pytorch/pytorch/pull/103001")
        copied = dispatch(aten.clone.default, (self.detach(),), {})
        if _is_parameter(self):
            copied = torch.nn.Parameter(copied, self.requires_grad)
            memo[id(self)] = copied
            return copied
        copied.requires_grad_(self.requires_grad)
        memo[id(self)] = copied
        if self.grad is not None:
            copied.grad = _copy.deepcopy(self.grad, memo)
        copied.__dict__.update(_copy.deepcopy(_user_attributes(self), memo))
        return copied


# ---------------------------------------------------------------------------
# Recording


class _Slot:
    """Placeholder for result tensor ``i`` in a cached output structure."""

    __slots__ = ("i",)

    def __init__(self, i: int) -> None:
        self.i = i


# (id(op), arg key, default dtype) -> (metas, output template, static id). The arg key is
# exact: constants are type-tagged (``_const_key``), so the dict's equality
# test is structural identity, and the entry's static id names the signature
# in graph keys (lazy_core.ir, lazy_core.graph).
_shape_cache: dict[tuple, tuple[tuple[TensorMeta | None, ...], Any, int]] = {}
_default_dtype = torch.get_default_dtype
_SHAPE_CACHE_LIMIT = int(config.get("LAZY_SHAPE_CACHE_SIZE"))


class _Untraceable(Exception):
    """The op cannot be recorded; run it eagerly instead."""


def _device_mismatch(other: torch.Tensor) -> RuntimeError:
    return RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, "
        f"lazy:0 and {other.device}!"
    )


class _Converter:
    """Replaces tensors with IR values and lifts scalars, building the cache key."""

    __slots__ = ("operands", "location")

    def __init__(self, location: Any, operands: list[Output]) -> None:
        self.operands = operands
        self.location = location

    def conv(self, x: Any, scalar_ok: bool) -> tuple[Any, Any]:
        if isinstance(x, LazyTensor):
            out = x._lz_value()
            self.operands.append(out)
            return out, out.meta
        if isinstance(x, Output):  # IR values from view inversion / write-back
            self.operands.append(x)
            return x, x.meta
        if isinstance(x, torch.Tensor):
            if x.dim() == 0 and x.device.type == "cpu":
                out = upload(x, self.location)
                self.operands.append(out)
                return out, out.meta
            raise _device_mismatch(x)
        t = type(x)
        if scalar_ok and (t is float or t is int) and x != 0 and x != 1:
            out = Output(ScalarParam(x, self.location))
            self.operands.append(out)
            return out, ("P", t)
        if t is list or t is tuple:
            if not scalar_ok and all(type(v) is int for v in x):
                # Sizes and dims, the common case: one key, no recursion.
                c = t(x)
                return c, (t, tuple(c))
            pairs = [self.conv(v, scalar_ok) for v in x]
            return t(p[0] for p in pairs), (t, tuple(p[1] for p in pairs))
        return x, _const_key(x, t)


def _const_key(x: Any, t: type) -> Any:
    """The shape-cache key of constant ``x``: equal keys only for the same
    value of the same type.

    Python's equality is not identity: ``1 == 1.0 == True``, ``0 == -0.0 ==
    False`` and ``nan != nan``. Each constant is tagged with its type, and a
    float is keyed by its exact bits (``hex()`` keeps -0.0 apart from 0.0 and
    makes NaN equal to itself).
    """
    if t is float:
        return (float, x.hex())
    if t is complex:
        return (complex, x.real.hex(), x.imag.hex())
    return (t, x)


def _meta_arg(x: Any) -> Any:
    if isinstance(x, Output):
        node = x.node
        if isinstance(node, ScalarParam):
            return node.value
        m = x.meta
        return torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta")
    if isinstance(x, list):
        return [_meta_arg(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_meta_arg(v) for v in x)
    return x


def layout_unsupported(layout: torch.layout) -> NotImplementedError:
    """The error for a sparse (or other non-strided) result: lazy tensors are dense. Uploading one
    (``nn.Embedding(sparse=True)``'s gradient) failed deep in the backend."""
    return NotImplementedError(f"{layout} tensors are not supported on lazy tensors; use dense "
                               "tensors (nn.Embedding/EmbeddingBag with sparse=False)")


def _template(result: Any, metas: list[TensorMeta | None]) -> Any:
    if isinstance(result, torch.Tensor):
        if result.layout != torch.strided:
            raise layout_unsupported(result.layout)
        metas.append(TensorMeta.of(result))
        return _Slot(len(metas) - 1)
    if isinstance(result, list | tuple):
        return type(result)(_template(r, metas) for r in result)
    if result is None:
        # Keep positions aligned with the op's returns (e.g. a masked-out grad).
        metas.append(None)
        return None
    raise _Untraceable(f"non-tensor result {type(result).__name__}")


def _infer(op: Any, p: OpPlan, args: tuple, kwargs: dict, key: Any) -> tuple[tuple, Any, int]:
    # id(op): OpOverload.__hash__ is Python code; plans keep every op alive. The default dtype
    # too: it types results no argument does (``int_tensor / 2``, ``int_tensor * 0.5`` are
    # float64 after ``torch.set_default_dtype(torch.float64)``); a key without it kept
    # returning the float32 metas cached before the switch.
    cache_key = (id(op), key, _default_dtype())
    hit = _shape_cache.get(cache_key)
    if hit is not None:
        return hit
    margs = _meta_arg(args)
    mkwargs = {k: _meta_arg(v) for k, v in kwargs.items()}
    if p.has_device_arg:
        mkwargs["device"] = torch.device("meta")
    checked = _cpu_dtype_check(op, p, margs, mkwargs) if p.cpu_dtype_check else None
    with metrics.timed("shape_inference"):
        try:
            result = meta_kernels.shape_function(op)(*margs, **mkwargs)
        except (NotImplementedError, RuntimeError, TypeError, ValueError, IndexError) as e:
            # IndexError too: a meta kernel's dim check is eager's ("Dimension out of
            # range"), not a reason to run the op eagerly.
            msg = str(e)
            if "meta" in msg.lower() or "data-dependent" in msg or "DynamicOutputShape" in type(e).__name__ \
                    or isinstance(e, NotImplementedError):
                raise _Untraceable(f"no meta kernel: {msg.splitlines()[0] if msg else type(e).__name__}") from e
            result = _cpu_verdict(op, margs, mkwargs, e)
            if result is None:
                raise
        except Exception as e:  # DataDependentOutputException and friends
            raise _Untraceable(f"{type(e).__name__}: {e}") from e
    if checked is not None:
        result = _with_cpu_dtypes(result, checked)
    if op._schema.name in _LAYOUT_FROM_CPU and _has_channels_last_operand(margs):
        result = _with_cpu_layout(result, op, margs, mkwargs)
    metas: list[TensorMeta | None] = []
    template = _template(result, metas)
    # The metas follow from the key, so the key alone names the signature.
    entry = (tuple(metas), template, new_static_id())
    if len(_shape_cache) >= _SHAPE_CACHE_LIMIT:
        # Forgotten signatures get new ids when seen again: graphs holding
        # the old ids miss the computation cache once, never match wrongly.
        _shape_cache.clear()
    _shape_cache[cache_key] = entry
    return entry


_INDEX_ARGS = INDEX_ARGS

#: Ops whose meta kernels lay out a result unlike the CPU kernel: ATen's CPU convolutions
#: return channels-last results for a channels-last input or weight (oneDNN and the
#: slow 2-d kernels), their meta kernels contiguous ones, so ``y.view(n, -1)`` passed on lazy
#: where eager raises, and ``y.stride()`` and as_strided reads differed.
_LAYOUT_FROM_CPU = {"aten::convolution", "aten::_convolution", "aten::convolution_backward"}


def _channels_last(x: torch.Tensor) -> bool:
    if x.dim() == 4:
        return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)
    if x.dim() == 5:
        return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last_3d)
    return False


def _has_channels_last_operand(margs: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and _channels_last(a) for a in margs)


def _with_cpu_layout(meta: Any, op: Any, margs: tuple, mkwargs: dict) -> Any:
    """``meta`` with the strides of the CPU kernel's results, run once per signature on
    zeros laid out as the operands. Which layout the CPU kernel picks depends on the
    kernel it chooses (oneDNN or not: the dtype, the sizes, the thread count), so it is
    asked rather than imitated."""
    def cpu(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return torch.zeros_like(torch.empty_strided(x.shape, x.stride(), dtype=x.dtype))
        if isinstance(x, list | tuple):
            return type(x)(cpu(v) for v in x)
        return x

    with metrics.timed("shape_inference"):
        laid_out = op(*[cpu(a) for a in margs], **{k: cpu(v) for k, v in mkwargs.items()})
    return _with_strides(meta, laid_out)


def _with_strides(meta: Any, cpu: Any) -> Any:
    if isinstance(meta, torch.Tensor) and isinstance(cpu, torch.Tensor):
        if meta.shape != cpu.shape or meta.stride() == cpu.stride():
            return meta
        return torch.empty_strided(meta.shape, cpu.stride(), dtype=meta.dtype, device="meta")
    if isinstance(meta, list | tuple) and isinstance(cpu, list | tuple) and len(meta) == len(cpu):
        return type(meta)(_with_strides(m, c) for m, c in zip(meta, cpu))
    return meta


def _negative_integer_power(op: Any, margs: tuple) -> bool:
    """``pow(int_tensor, negative int)``, which the CPU kernel refuses and meta accepts."""
    if len(margs) < 2 or op._schema.name != "aten::pow":
        return False
    base, exponent = margs[0], margs[1]
    if isinstance(base, torch.Tensor) and not base.is_floating_point() and not base.is_complex():
        return isinstance(exponent, int) and not isinstance(exponent, bool) and exponent < 0
    return False


#: The bias-taking products and the dims of their product: the meta kernels broadcast a bias
#: of more dims (``addmm(b3d, m1, m2)`` gave a 3-d result), the CPU kernels raise.
_PRODUCT_DIMS = {"aten::addmm": 2, "aten::addbmm": 2, "aten::addr": 2, "aten::addmv": 1, "aten::baddbmm": 3}


def _bias_of_more_dims(op: Any, margs: tuple, mkwargs: dict) -> bool:
    """An ``addmm``-like op whose ``self`` has more dims than its product, or (``addmm``, ``addmv``:
    their meta kernels return the bias's broadcast shape) does not expand to the product's
    shape: ``F.linear(x[1, 4], w[1, 4], bias[4])`` raised only at the read (fuzz seed 4304)."""
    name = op._schema.name
    dims = _PRODUCT_DIMS.get(name)
    if dims is None or not margs or not isinstance(margs[0], torch.Tensor):
        return False
    if margs[0].dim() > dims:
        return True
    a, b = (margs[1], margs[2]) if len(margs) > 2 else (None, None)
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return False
    if name == "aten::addmm" and a.dim() == 2 and b.dim() == 2:
        product = (a.shape[0], b.shape[1])
    elif name == "aten::addmv" and a.dim() == 2:
        product = (a.shape[0],)
    else:
        return False
    try:
        return tuple(torch.broadcast_shapes(margs[0].shape, product)) != product
    except RuntimeError:
        return True


_MASK_INDEXED = ("aten::index_put", "aten::index_put_", "aten::_index_put_impl_")


def _odd_index_dtype(op: Any, schema_args: Any, margs: tuple, mkwargs: dict) -> bool:
    """An index operand that is not int64/int32 (a float; a mask, except where masks index)."""
    ok = (torch.int64, torch.int32, torch.bool, torch.uint8) if op._schema.name in _MASK_INDEXED \
        else (torch.int64, torch.int32)
    named = [(schema_args[i].name if i < len(schema_args) else None, a) for i, a in enumerate(margs)]
    for name, a in (*named, *mkwargs.items()):
        if name in _INDEX_ARGS:
            for t in a if isinstance(a, list | tuple) else (a,):
                if isinstance(t, torch.Tensor) and t.dtype not in ok:
                    return True
    return False


def _max_of_empty(op: Any, margs: tuple) -> bool:
    """``max``/``min`` (all elements, or over a dim) of an empty tensor."""
    return (op._schema.name in ("aten::max", "aten::min") and bool(margs) and isinstance(margs[0], torch.Tensor)
            and margs[0].numel() == 0)


def _arg(op: Any, margs: tuple, mkwargs: dict, name: str, default: Any = None) -> Any:
    """Argument ``name`` of a call of ``op``, positional or keyword."""
    for i, a in enumerate(op._schema.arguments):
        if a.name == name:
            return margs[i] if i < len(margs) else mkwargs.get(name, default)
    return default


def _bad_conv_params(op: Any, margs: tuple, mkwargs: dict) -> bool:
    """A convolution whose stride, padding, dilation, output padding or groups eager refuses.

    The meta kernel computes a shape from any of them: on iree-cpu ``conv2d(dilation=-1)``
    and ``conv_transpose2d(stride=0)`` returned values and ``conv1d(dilation=0)`` raised
    only at the read (OpInfo's error inputs); ATen's ``check_shape_forward`` and the
    transposed kernels' shape checks refuse them at the call.
    """
    def ints(name: str) -> list[int]:
        v = _arg(op, margs, mkwargs, name, ())
        return [v] if isinstance(v, int) else list(v or ())

    stride, dilation, output_padding = ints("stride"), ints("dilation"), ints("output_padding")
    if any(s <= 0 for s in stride) or any(d <= 0 for d in dilation) or any(p < 0 for p in ints("padding")):
        return True
    if any(p < 0 for p in output_padding) or (_arg(op, margs, mkwargs, "groups", 1) or 1) <= 0:
        return True
    return bool(_arg(op, margs, mkwargs, "transposed", False)) and any(
        p >= s and p >= d for p, s, d in zip(output_padding, stride, dilation))


def _strided_past_the_end(op: Any, margs: tuple, mkwargs: dict) -> bool:
    """``as_strided_scatter`` whose view reaches past ``self``'s elements (eager's setStorage error)."""
    self, size, stride = margs[0], _arg(op, margs, mkwargs, "size", ()), _arg(op, margs, mkwargs, "stride", ())
    if not isinstance(self, torch.Tensor) or any(n == 0 for n in size):
        return False
    offset = _arg(op, margs, mkwargs, "storage_offset") or 0
    return offset + sum((n - 1) * s for n, s in zip(size, stride)) >= self.numel()


def _select_index_out_of_range(op: Any, margs: tuple, mkwargs: dict) -> bool:
    """``select_scatter`` at an index outside ``self.size(dim)``: its meta kernel makes the
    slice without a bounds check, so iree-cpu and reference returned ``self`` unchanged
    where eager raises select()'s IndexError at the call (an adversarial bad-input sweep)."""
    self, dim, index = margs[0] if margs else None, _arg(op, margs, mkwargs, "dim"), _arg(op, margs, mkwargs, "index")
    if not isinstance(self, torch.Tensor) or type(dim) is not int or type(index) is not int or self.dim() == 0:
        return False
    if not -self.dim() <= dim < self.dim():
        return False  # the meta kernel raises eager's dim error
    n = self.shape[dim]
    return not -n <= index < n


def _index_add_shape_mismatch(op: Any, margs: tuple, mkwargs: dict) -> bool:
    """``index_add`` of a ``source`` whose shape differs from ``self``'s outside ``dim``: its meta
    kernel lets it pass, and the graph failed at the read where eager raises at the call."""
    self, source, dim = margs[0] if margs else None, _tensor_arg(op, margs, mkwargs, "source"), \
        _arg(op, margs, mkwargs, "dim")
    if not isinstance(self, torch.Tensor) or source is None or type(dim) is not int:
        return False
    if self.dim() != source.dim():
        return True
    if self.dim() == 0 or not -self.dim() <= dim < self.dim():
        return False
    d = dim % self.dim()
    return any(a != b for i, (a, b) in enumerate(zip(self.shape, source.shape, strict=True)) if i != d)


def _tensor_arg(op: Any, margs: tuple, mkwargs: dict, name: str) -> torch.Tensor | None:
    t = _arg(op, margs, mkwargs, name)
    return t if isinstance(t, torch.Tensor) else None


def _non_bool_mask(op: Any, margs: tuple, mkwargs: dict) -> bool:
    mask = _tensor_arg(op, margs, mkwargs, "mask")
    return mask is not None and mask.dtype != torch.bool


#: Operands whose meta kernels accept what the CPU kernel refuses, by schema name: the
#: predicate says when to ask the CPU kernel (``_cpu_dtype_check``). Found with OpInfo's
#: ``error_inputs`` run on iree-cpu: each returned a value or raised only at the read.
_CPU_CHECK_WHEN: dict[str, Callable[[Any, tuple, dict], bool]] = {
    "aten::convolution": _bad_conv_params,
    "aten::_convolution": _bad_conv_params,
    "aten::bucketize": lambda op, a, k: (b := _tensor_arg(op, a, k, "boundaries")) is not None and b.dim() != 1,
    "aten::masked_scatter": _non_bool_mask,
    "aten::masked_scatter_": _non_bool_mask,
    "aten::as_strided_scatter": _strided_past_the_end,
    "aten::select_scatter": _select_index_out_of_range,
    "aten::index_add": _index_add_shape_mismatch,
    "aten::index_add_": _index_add_shape_mismatch,
}


def _dim_out_of_range(p: OpPlan, margs: tuple, mkwargs: dict) -> bool:
    """Whether a ``dim`` the meta kernel does not check lies outside its first operand's dims."""
    if p.dim_index < 0 or not margs or not isinstance(margs[0], torch.Tensor):
        return False
    dim = mkwargs.get("dim", margs[p.dim_index] if p.dim_index < len(margs) else None)
    if type(dim) is not int:
        return False  # a default (None) or a type the meta kernel already refused
    n = max(margs[0].dim(), 1)  # a 0-d tensor takes dim 0 and -1, as in c10::maybe_wrap_dim
    return not -n <= dim < n


#: Stand-ins larger than this (elements, all operands) are not made for an error's class.
_CPU_ERROR_ELEMENTS = 1 << 22


def _cpu_verdict(op: Any, margs: tuple, mkwargs: dict, meta_error: Exception) -> Any:
    """The CPU kernel's say when the meta kernel raised ``meta_error``.

    A meta kernel written in Python may fail in its own way: ``int_t.masked_fill(m, nan)``
    raised ValueError ("cannot convert float NaN to integer") from ``_refs``, where eager
    raises RuntimeError ("value cannot be converted to type int64_t without overflow"),
    so ``except RuntimeError`` around the call stopped working on lazy (fuzz seed 21);
    ``log_softmax`` of an empty bool tensor raised where eager returns an empty tensor.
    The op runs on stand-ins (ones; zeros for indices) of the operands' shapes and strides: an error
    of another class is raised in place of the meta kernel's; success returns the
    result's types (as meta tensors) for the tracer; None keeps the meta error (the
    same class, or operands too large to stand in for).
    """
    schema_args = op._schema.arguments
    total = 0

    def cpu(x: Any, name: str | None) -> Any:
        nonlocal total
        if isinstance(x, torch.Tensor):
            total += x.numel()
            # The operand's strides too: ``t().view(-1)`` must fail here as it does in eager.
            zero = name in _INDEX_ARGS and x.dtype != torch.bool  # a mask selects all
            return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype).fill_(0 if zero else 1)
        if isinstance(x, list | tuple):
            return type(x)(cpu(v, name) for v in x)
        return x

    args = [cpu(a, schema_args[i].name if i < len(schema_args) else None) for i, a in enumerate(margs)]
    kwargs = {k: cpu(v, k) for k, v in mkwargs.items()}
    if total > _CPU_ERROR_ELEMENTS:
        return None
    try:
        result = op(*args, **kwargs)
    except Exception as cpu_error:  # noqa: BLE001 - whichever the kernel raises is eager's
        if type(cpu_error) is not type(meta_error):
            raise cpu_error from None
        return None
    return _as_meta(result)


def _as_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, list | tuple):
        return type(x)(_as_meta(v) for v in x)
    return x


def _with_cpu_dtypes(meta: Any, cpu: Any) -> Any:
    """``meta`` with the dtypes of the CPU kernel's result where they differ.

    The CPU kernel is the reference: the meta kernel of ``pow`` promotes a bool
    base with a bool exponent to int64 (``_refs.pow``'s BOOL_TO_LONG rule),
    while eager's ``mask ** True`` is a bool, so indexing with it selected
    rows by position (fuzz seed 21).
    """
    if isinstance(meta, torch.Tensor) and isinstance(cpu, torch.Tensor):
        if meta.dtype == cpu.dtype:
            return meta
        return torch.empty_strided(meta.shape, meta.stride(), dtype=cpu.dtype, device="meta")
    if isinstance(meta, list | tuple) and isinstance(cpu, list | tuple) and len(meta) == len(cpu):
        return type(meta)(_with_cpu_dtypes(m, c) for m, c in zip(meta, cpu))
    return meta


def _cpu_dtype_check(op: Any, p: OpPlan, margs: tuple, mkwargs: dict) -> Any:
    """Raise the CPU kernel's own error for an op whose meta kernel skips its
    dtype checks (``op_schema._CPU_DTYPE_CHECKED``), when its tensor operands
    have mixed dtypes (index operands aside: they are integers by design), for
    an integer-only op (``op_schema._INTEGRAL_ONLY``) given a float, for an op
    whose kernel refuses bools (``op_schema._BOOL_REFUSED``) given one (a
    Python bool too), for one that may refuse non-floating operands
    (``_NON_FLOAT_CHECKED``) given one, for an ``alpha`` that is not an int,
    or for a ``dim`` out of range that the meta kernel lets pass (``_DIM_CHECKED``).

    The op runs once on ones of the operands' shapes and dtypes (zeros for
    indices and targets); a kernel that rejects the dtypes raises before
    computing, and one that accepts them costs one small computation per new signature (the shape cache
    remembers signatures that passed; one that raised is not remembered, so
    every call raises). Returns the CPU result (None when no check ran), whose
    dtypes win over the meta kernel's.
    """
    schema_args = op._schema.arguments
    dtypes = set()
    for i, a in enumerate(margs):
        if isinstance(a, torch.Tensor) and (i >= len(schema_args) or schema_args[i].name not in _INDEX_ARGS):
            dtypes.add(a.dtype)
    for name, a in mkwargs.items():
        if isinstance(a, torch.Tensor) and name not in _INDEX_ARGS:
            dtypes.add(a.dtype)
    refused_float = p.integral_only and (
        any(d.is_floating_point or d.is_complex for d in dtypes)
        or any(isinstance(a, float | complex) for a in margs)
    )
    refused_bool = p.bool_refused and (torch.bool in dtypes or any(type(a) is bool for a in margs)
                                       or any(type(a) is bool for a in mkwargs.values()))
    refused_non_float = p.non_float_checked and any(not (d.is_floating_point or d.is_complex) for d in dtypes)
    alpha = mkwargs.get("alpha", margs[p.alpha_index] if 0 <= p.alpha_index < len(margs) else 1)
    odd_alpha = p.alpha_index >= 0 and type(alpha) is not int
    if (len(dtypes) < 2 and not (refused_float or refused_bool or refused_non_float or odd_alpha)
            and not _negative_integer_power(op, margs) and not _dim_out_of_range(p, margs, mkwargs)
            and not _bias_of_more_dims(op, margs, mkwargs) and not _max_of_empty(op, margs)
            and not _odd_index_dtype(op, schema_args, margs, mkwargs)
            and not (op._schema.name in _CPU_CHECK_WHEN and _CPU_CHECK_WHEN[op._schema.name](op, margs, mkwargs))):
        return None

    # Zeros for indices and targets (always in range); ones elsewhere: zeros made
    # ``int_t % mask`` divide by zero (fuzz seed 6).
    def cpu(x: Any, name: str | None) -> Any:
        if isinstance(x, torch.Tensor):
            zero = name in _ZERO_STAND_INS and x.dtype != torch.bool  # a mask selects all
            return (torch.zeros if zero else torch.ones)(x.shape, dtype=x.dtype)
        if isinstance(x, list | tuple):
            return type(x)(cpu(v, name) for v in x)
        return x

    return op(*[cpu(a, schema_args[i].name if i < len(schema_args) else None) for i, a in enumerate(margs)],
              **{k: cpu(v, k) for k, v in mkwargs.items()})


_ZERO_STAND_INS = (*_INDEX_ARGS, "target")


_UNSIGNED = frozenset({torch.uint8, torch.uint16, torch.uint32, torch.uint64})


def _check_value_converts(p: OpPlan, args: tuple, kwargs: dict) -> None:
    """Raise eager's error for a fill value that ``self``'s dtype cannot hold
    (``op_schema._VALUE_CONVERTED``): the CPU kernel converts it with c10's checked
    conversion, which a fill of a CPU stand-in repeats exactly. Small finite values, the
    common case, skip it."""
    i = p.value_index
    value = args[i] if i < len(args) else kwargs.get(p.op._schema.arguments[i].name)
    self = args[0] if args else kwargs.get("self")
    if type(value) not in (int, float) or not isinstance(self, torch.Tensor):
        return
    if (-128 <= value <= 127 and not (value < 0 and type(value) is float and self.dtype in _UNSIGNED)) \
            or (self.is_floating_point() and math.isfinite(value) and abs(value) <= 65504):
        # (c10 refuses every negative float for an unsigned type, -0.5 included, and lets a
        # negative int wrap: ``uint8_t.fill_(-1.0)`` raises where ``fill_(-1)`` writes 255)
        return
    if p.op._schema.name.startswith("aten::scatter"):  # scatter converts only when it writes
        index = args[2] if len(args) > 2 else kwargs.get("index")
        if isinstance(index, torch.Tensor) and index.numel() == 0:
            return
    # fill_ of one element takes a path that lets float16 overflow to inf; the others check.
    one = self.numel() == 1 and p.op._schema.name.startswith("aten::fill")
    torch.empty(1 if one else 2, dtype=self.dtype).fill_(value)


def _normalize_device_kwargs(p: OpPlan, kwargs: dict) -> dict:
    """Drop ``device=lazy`` from factory-like ops: the value lives where the graph runs."""
    if p.has_device_arg:
        dev = kwargs.get("device")
        if dev is not None and torch.device(dev).type == LAZY:
            kwargs = dict(kwargs)
            del kwargs["device"]
    return kwargs


_BOUNDS: dict[torch.dtype, tuple[float, float] | None] = {}


def _bounds(dtype: torch.dtype) -> tuple[float, float] | None:
    """The finite range of ``dtype`` (None for bool and complex: not checked)."""
    b = _BOUNDS.get(dtype, ())
    if b == ():
        if dtype.is_floating_point:
            b = (-torch.finfo(dtype).max, torch.finfo(dtype).max)
        elif dtype.is_complex or dtype == torch.bool:
            b = None
        else:
            b = (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
        _BOUNDS[dtype] = b
    return b


def _out_of_range(v: int | float, floating: bool, lo: float, hi: float) -> bool:
    if floating and type(v) is float and not math.isfinite(v):
        return False  # inf and NaN convert to a floating dtype
    return not lo <= v <= hi


def _check_numbers_fit(op: Any, p: OpPlan, args: tuple, kwargs: dict) -> None:
    """Raise eager's error for a Python number its CPU kernel cannot convert.

    Many CPU kernels convert a number to an operand's dtype with c10's overflow check
    (``half_t.clamp(2, 70000.0)``, ``int8_t.threshold(300, 1)``, ``bf16_t.lerp(t, 1e39)``
    raise "value cannot be converted to type ... without overflow"), others compute with
    it (``half_t * 70000.0`` does not raise), and the meta kernels never check, so a
    compiled backend computed what eager refuses (fuzz seed 4201, the inexact constants).
    A number outside the first tensor operand's range, which is rare, runs the CPU kernel
    on stand-ins for its verdict: pointwise ops on one element per operand, others on
    ones of the operands' shapes (up to ``_CPU_ERROR_ELEMENTS``).
    """
    # Runs for every op with a number argument (``x * 0.5``, each ``mul_`` of an optimizer
    # step): plain loops, no generators, no list unless there is a number.
    n = len(args)
    numbers = None
    for i in p.number_positions:
        if i < n:
            v = args[i]
            if type(v) is float or type(v) is int:
                if numbers is None:
                    numbers = [v]
                else:
                    numbers.append(v)
    if kwargs:
        names = p.number_names
        for k, v in kwargs.items():
            if (type(v) is float or type(v) is int) and k in names:
                if numbers is None:
                    numbers = [v]
                else:
                    numbers.append(v)
    if numbers is None:  # the common case: tensors only
        return
    dtype = None
    for a in args:
        if type(a) is LazyTensor or isinstance(a, torch.Tensor):
            dtype = a.dtype
            break
    if dtype is None:
        return
    bounds = _BOUNDS.get(dtype, ())
    if bounds == ():
        bounds = _bounds(dtype)
    if bounds is None:
        return
    lo, hi = bounds
    for v in numbers:
        if not lo <= v <= hi and _out_of_range(v, dtype.is_floating_point, lo, hi):  # NaN fails the first test only
            break
    else:
        return
    pointwise = torch.Tag.pointwise in op.tags
    total = 0

    def cpu(x: Any, name: str | None) -> Any:
        nonlocal total
        if isinstance(x, torch.Tensor):
            shape = (1,) * x.dim() if pointwise else tuple(x.shape)
            total += math.prod(shape)
            zero = name in _INDEX_ARGS and x.dtype != torch.bool
            return (torch.zeros if zero else torch.ones)(shape, dtype=x.dtype)
        if isinstance(x, list | tuple):
            return type(x)(cpu(v, name) for v in x)
        return x

    names = [a.name for a in op._schema.arguments]
    cargs = [cpu(a, names[i] if i < len(names) else None) for i, a in enumerate(args)]
    ckwargs = {k: cpu(v, k) for k, v in kwargs.items()}
    if total > _CPU_ERROR_ELEMENTS:
        return
    try:
        op(*cargs, **ckwargs)
    except RuntimeError as e:
        if "without overflow" in str(e) or "out of range" in str(e):
            raise type(e)(str(e)) from None


def record(op: Any, args: tuple, kwargs: dict, location: Any = None, p: OpPlan | None = None) -> tuple[Node, Any]:
    """Record ``op`` and return its node and output template.

    This runs for every traced op, so the common case (lazy tensor operands)
    is handled inline; everything else goes through ``_Converter``.
    """
    if p is None:
        p = plan(op)
    if location is None:
        location = source_location.current(3)
    if p.has_device_arg:
        kwargs = _normalize_device_kwargs(p, kwargs)
    if p.value_index >= 0:
        _check_value_converts(p, args, kwargs)
    elif p.number_names:
        _check_numbers_fit(op, p, args, kwargs)
    operands: list[Output] = []
    conv = None
    plain = True  # every positional argument is its own operand, in order (no _Converter)
    sp = p.scalar_positions
    cargs: list[Any] = []
    akeys: list[Any] = []
    for i, a in enumerate(args):
        if type(a) is LazyTensor:
            v = a._lz_value() if a._lz_view else a._lz_storage.value
            operands.append(v)
            cargs.append(v)
            akeys.append(v.meta)
            continue
        ta = type(a)
        if (ta is float or ta is int or ta is bool) and i in sp and (
                p.lifts_every_value or ta is not bool and a != 0 and a != 1):
            # A lifted scalar (x * 0.5): as in _Converter.conv, inlined. A fill's bool is
            # its 0 or 1 (the fill casts it to self's dtype either way).
            if ta is bool:
                a = int(a)
            v = Output(ScalarParam(a, location))
            operands.append(v)
            cargs.append(v)
            akeys.append(("P", type(a)))
            continue
        if conv is None:
            conv = _Converter(location, operands)
        plain = False
        c, k = conv.conv(a, i in sp)
        cargs.append(c)
        akeys.append(k)
    if kwargs:
        if conv is None:
            conv = _Converter(location, operands)
        ckwargs, kkeys = {}, []
        sa = p.scalar_args
        for name, v in kwargs.items():
            tv = type(v)
            if (tv is float or tv is int) and name in sa and v != 0 and v != 1:
                # A lifted keyword scalar (``addcmul_(a, b, value=0.1)``), as in _Converter.conv.
                c = Output(ScalarParam(v, location))
                operands.append(c)
                k = ("P", tv)
            else:
                c, k = conv.conv(v, name in sa)
            ckwargs[name] = c
            kkeys.append((name, k))
        key = (tuple(akeys), tuple(kkeys))
    else:
        ckwargs = {}
        key = (tuple(akeys), ())
    cargs_t = tuple(cargs)
    metas, template, sid = _infer(op, p, cargs_t, ckwargs, key)
    bad = fallback.refused_dtype_of(sid, metas, operands)
    if bad is not None:  # complex/quantized: never compiled (lazy_core.fallback)
        raise _Untraceable(f"dtype {bad} is not supported by backend {active_backend().name}")
    # A node whose arguments are exactly its operands (``mul(x, y)``, ``t(w)``) keeps one tuple
    # for both: a traced step's nodes live until its barrier, so every tuple they hold is
    # promoted to the GC's oldest generation and paid for by full collections (docs/architecture.md).
    node = Node(op, cargs_t, ckwargs, cargs_t if plain and len(operands) == len(cargs_t) else tuple(operands),
                metas, location, sid)
    _counters["trace_op"] += 1
    return node, template


def _in_layout(value: Output, layout: TensorMeta) -> Output:
    """``value`` with the strides of the storage it is written into.

    An in-place write keeps the tensor's strides (``x.copy_(y.t())``), and the
    ops reading ``x`` afterwards take their meta kernels' strides from its value
    (``x + 1`` of a channels-last ``x`` is channels-last in eager). A value laid
    out otherwise is copied into the storage's memory order: a permute into it, a
    contiguous clone, and the inverse permute (values unchanged).
    """
    have = value.meta
    if have.stride == layout.stride or have.shape != layout.shape or all(a == b for a, b, n in zip(have.stride, layout.stride, have.shape) if n > 1):
        return value  # (the same addresses: strides of size-1 dims address nothing)
    from .strided import dense, memory_order

    if not dense(layout.shape, layout.stride):
        return value  # (a gapped or overlapping storage: no memory order to copy into)
    order = memory_order(layout.stride, layout.shape)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    value = record_output(aten.permute.default, (value, order), {})
    value = record_output(aten.clone.default, (value,), {"memory_format": torch.contiguous_format})
    return record_output(aten.permute.default, (value, inverse), {})


def record_output(op: Any, args: tuple, kwargs: dict) -> Output:
    """Record a single-result op on IR values (used for views and write-backs)."""
    node, template = record(op, args, kwargs)
    assert isinstance(template, _Slot)
    return Output(node, template.i)


def _new_tensor(storage: Storage, view: tuple[ViewStep, ...], meta: TensorMeta) -> LazyTensor:
    """``LazyTensor(storage, view, meta)`` without the type call and no-op ``__init__``."""
    t = _make_wrapper_subclass(
        LazyTensor, meta.shape, strides=meta.stride, dtype=meta.dtype, device=_devices.get(storage.device)
        or lazy_device(storage.device), requires_grad=False,
    )
    t._lz_storage = storage
    t._lz_view = view
    t._lz_cache = None
    return t


_make_wrapper_subclass = torch.Tensor._make_wrapper_subclass


def _wrap(node: Node, template: Any, device: int = 0) -> Any:
    if type(template) is _Slot:
        out = Output(node, template.i)
        storage = Storage(out, device)
        executor().track(storage)
        return _new_tensor(storage, (), out.meta)
    if isinstance(template, list | tuple):
        return type(template)(_wrap(node, t, device) for t in template)
    return template


def wrap_output(out: Output, device: int = 0) -> LazyTensor:
    storage = Storage(out, device)
    executor().track(storage)
    return _new_tensor(storage, (), out.meta)


def upload(t: torch.Tensor, location: Any = None) -> Output:
    """Copy a CPU tensor to the backend device as a DeviceData leaf."""
    backend = active_backend()
    # Conjugate/negative views (an eager fallback's result) are lazy bits on
    # the CPU; a device buffer must hold the actual values.
    t = t.detach().resolve_conj().resolve_neg()
    with metrics.timed("transfer_to_device"):
        data = backend.make_backend_data(t, backend.default_device())
    metrics.counter_add("transfer_to_device_bytes", t.numel() * t.element_size())
    leaf = DeviceData(data, TensorMeta.of(t), location)
    if host_eval.small(t):
        # A copy laid out as the device holds it: the caller may write into ``t`` later.
        host_eval.remember(leaf, t.clone(memory_format=torch.contiguous_format))
    return Output(leaf)


def from_cpu(t: torch.Tensor, device: int = 0) -> LazyTensor:
    """A new lazy tensor holding a copy of CPU tensor ``t``."""
    return wrap_output(upload(t), device)


def materialize(t: LazyTensor, reason: str) -> torch.Tensor:
    """The CPU value of ``t``, executing pending work if needed (memoized)."""
    return executor().to_host(t, reason)


# ---------------------------------------------------------------------------
# Dispatch


_COMPOSITE = torch._C.DispatchKeySet(torch._C.DispatchKey.CompositeExplicitAutograd)


# How ``dispatch`` handles each op, by id(op): (_RECORD, plan) for ops recorded
# as they are (the common case), (_VIEW, plan) for view ops, (_GENERAL, None)
# for the rest (special handlers, mutations, random, fallbacks...). Valid for
# one backend: ``supports_op`` is part of the answer.
_RECORD, _VIEW, _MUTATE, _GENERAL = 0, 1, 2, 3
_kinds: dict[int, tuple[int, OpPlan | None]] = {}
_kinds_backend: Any = None


def dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    global _kinds_backend
    backend = _registry._active
    if backend is not _kinds_backend or backend is None:
        _kinds.clear()
        _kinds_backend = backend = active_backend()
    kind = _kinds.get(id(func))
    if kind is None:
        kind = _kinds[id(func)] = _classify(func, backend)
    how, p = kind
    if how == _RECORD:
        try:
            node, template = record(func, args, kwargs, None, p)
        except _Untraceable as e:
            return fallback.run_eagerly(func, args, kwargs, why=str(e))
        return _wrap(node, template, _device_of(args))
    if how == _VIEW:
        return _view(func, p, args, kwargs)
    if how == _MUTATE:
        return _mutate(func, p, args, kwargs)
    return _dispatch_general(func, args, kwargs)


def _classify(func: Any, backend: Any) -> tuple[int, OpPlan | None]:
    """How ``dispatch`` handles ``func``: the checks of ``_dispatch_general``, once per op."""
    p = plan(func)
    general = (
        func in fallback.SPECIAL_HANDLERS
        or p.decompose
        or p.inplace_view
        or p.returns_python_scalar
        or p.dynamic_shape
        or p.random
        or (bool(p.mutated) and p.functional is None)
        or func is _NATIVE_BATCH_NORM
        or func in cpu_results.FIXES
        or func in half_steps.STEPS
        or not backend.supports_op(func)
        or backend.support_depends_on_arguments(func)
        or checks.guarded(func)
    )
    if general:
        return _GENERAL, None
    if p.is_view:
        return _VIEW, p
    return (_MUTATE if p.mutated else _RECORD), p


def _dispatch_general(func: Any, args: tuple, kwargs: dict) -> Any:
    steps = half_steps.STEPS.get(func)
    if steps is not None:
        out = steps(args, kwargs)
        if out is not NotImplemented:
            return out
    fix = cpu_results.FIXES.get(func)
    if fix is not None:
        out = _dispatch_unfixed(func, args, kwargs)
        return fix(args, kwargs, out) if all(isinstance(t, LazyTensor) for t in out) else out
    return _dispatch_unfixed(func, args, kwargs)


def _dispatch_unfixed(func: Any, args: tuple, kwargs: dict) -> Any:
    special = fallback.SPECIAL_HANDLERS.get(func)
    if special is not None:
        return special(func, args, kwargs)
    return dispatch_unspecial(func, args, kwargs)


def dispatch_unspecial(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` past its special handler (a handler that only adjusts the arguments)."""
    p = plan(func)
    if p.decompose:
        # _foreach_* ops: their composite kernel loops over the per-tensor op,
        # which comes back here; backends never see list-valued ops.
        return func.redispatch(_COMPOSITE, *args, **kwargs)
    if p.inplace_view:
        return _inplace_view(func, p, args, kwargs)
    if p.returns_python_scalar or p.dynamic_shape:
        return fallback.run_eagerly(func, args, kwargs, why="data-dependent")
    if p.random:
        return fallback.run_random(func, p, args, kwargs)
    if (p.mutated and p.functional is None) or func is _NATIVE_BATCH_NORM:
        decomposition = _write_decomposition(func, args, kwargs)
        if decomposition is not None:
            return decomposition(*args, **kwargs)
    backend = active_backend()
    if not backend.supports_op(func) or not backend.supports_call(func, args, kwargs):
        return fallback.run_eagerly(func, args, kwargs, why="unsupported by backend")
    if checks.guarded(func):  # safe indices and divisors, device-side checks (lazy_core.checks)
        with checks.transaction():
            return _record_general(func, p, args, kwargs, checks.guard(func, args, kwargs))
    return _record_general(func, p, args, kwargs, (args, kwargs))


def _record_general(func: Any, p: OpPlan, written_args: tuple, written_kwargs: dict,
                    guarded: tuple[tuple, dict]) -> Any:
    """Record ``func`` with the ``guarded`` arguments; ``written_*`` are the caller's."""
    written = written_args, written_kwargs
    args, kwargs = guarded
    if p.is_view:
        return _view(func, p, args, kwargs)
    if p.mutated:
        # The guard may replace ``self`` by a safe value (``x.remainder_(-1)``); the
        # tensors written are still the caller's.
        return _mutate(func, p, args, kwargs, written)
    try:
        node, template = record(func, args, kwargs)
    except _Untraceable as e:
        # The CPU kernel gets the caller's arguments: the guarded ones hold IR values.
        return fallback.run_eagerly(func, written_args, written_kwargs, why=str(e))
    return _wrap(node, template, _device_of(args))


_NATIVE_BATCH_NORM = aten.native_batch_norm.default
_BATCH_NORM_LEGIT = aten._native_batch_norm_legit.default


def _write_decomposition(func: Any, args: tuple, kwargs: dict) -> Any:
    """PyTorch's decomposition of an op that writes its arguments but has no
    functional twin (batch norm's running statistics), or None.

    ``native_batch_norm`` even updates ``running_mean``/``running_var`` in
    training without saying so in its schema; recorded as is, the update
    would be lost. The decompositions compute with traceable ops and write
    back with ``copy_``, which is what functionalization does.
    """
    if func is _NATIVE_BATCH_NORM or func is _BATCH_NORM_LEGIT:
        bound = dict(zip(("input", "weight", "bias", "running_mean", "running_var", "training"), args))
        bound.update(kwargs)
        if not bound.get("training") or bound.get("running_mean") is None:
            # Nothing is written: the plain op (CPU's empty saved statistics included).
            return None if func is _NATIVE_BATCH_NORM else _NATIVE_BATCH_NORM
    from torch._decomp import decomposition_table

    return decomposition_table.get(func)


def _device_of(args: tuple) -> int:
    for a in args:
        if isinstance(a, LazyTensor):
            return a._lz_storage.device
    return 0


_IDENTITY_VIEWS = {aten.detach.default, aten.alias.default}
#: By id: ``OpOverload.__hash__`` is Python code, and ``_view`` runs for every view op.
_IDENTITY_VIEW_IDS = frozenset(id(op) for op in _IDENTITY_VIEWS)


@functools.cache
def _composite_implicit(func: Any) -> bool:
    """Whether view op ``func`` is CompositeImplicitAutograd (remembered per op)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


def _view(func: Any, p: OpPlan, args: tuple, kwargs: dict) -> Any:
    base = args[0]
    if not isinstance(base, LazyTensor):
        # A view of a CPU tensor with lazy arguments elsewhere: not a view of ours.
        return fallback.run_eagerly(func, args, kwargs, why="view of a non-lazy tensor")
    if (torch.is_inference_mode_enabled() or base.is_inference()) and _composite_implicit(func):
        # ``to``, ``chunk``, ...: with autograd skipped (an inference tensor, inference mode)
        # their composite kernel did not run above this key; run it now. ``x.cpu()`` of an
        # inference tensor took ``to.dtype_layout`` for an alias and returned a lazy tensor.
        return func.decompose(*args, **kwargs)
    if torch.is_inference_mode_enabled() and not base.is_inference():
        # A view of a normal tensor is a normal tensor, also in inference mode: autograd then
        # gives it its base's version counter, which an inference tensor cannot take ("Cannot
        # set version_counter for inference tensor": ``x[0]`` under ``torch.inference_mode()``
        # raised; found by the adversarial sweep). So the wrapper is made outside that mode.
        with torch.inference_mode(False):
            return _view(func, p, args, kwargs)
    rest = args[1:]
    if id(func) in _IDENTITY_VIEW_IDS:
        # alias/detach: same value, no node (autograd makes many of these).
        view = _new_tensor(base._lz_storage, base._lz_view + (ViewStep(func, rest, kwargs, tuple(base.shape)),),
                          TensorMeta(tuple(base.shape), base.dtype, tuple(base.stride())))
        view._lz_cache = (base._lz_storage.value, base._lz_value())
        return view
    in_shape = tuple(base.shape)
    try:
        node, template = record(func, args, kwargs, None, p)
    except _Untraceable as e:
        return _eager_view(func, base, rest, kwargs, in_shape, why=str(e))
    if isinstance(template, _Slot):
        step = ViewStep(func, rest, kwargs, in_shape)
        view = _new_tensor(base._lz_storage, base._lz_view + (step,), node.metas[template.i])
        view._lz_cache = (base._lz_storage.value, Output(node, template.i))
        return view
    steps = split_views(func, rest, kwargs, in_shape)
    if steps is None:
        raise NotImplementedError(f"multi-output view op {func} is not supported on lazy tensors")
    return type(template)(_views_of(base, steps))


def _views_of(base: LazyTensor, steps: list[ViewStep]) -> list[LazyTensor]:
    """One view of ``base`` per step (the results of a multi-output view op)."""
    outs = []
    for step in steps:
        value = step.apply(record_output, base._lz_value())
        view = _new_tensor(base._lz_storage, base._lz_view + (step,), value.meta)
        view._lz_cache = (base._lz_storage.value, value)
        outs.append(view)
    return outs


def _eager_view(func: Any, base: LazyTensor, rest: tuple, kwargs: dict, in_shape: tuple[int, ...],
                why: str) -> Any:
    """A view the backend cannot compute (a refused dtype): host-computed steps of the
    base's chain, so writes still reach the base (lazy_core.eager_views)."""
    if any(isinstance(a, torch.Tensor) for a in (*rest, *kwargs.values())):
        return fallback.run_eagerly(func, (base, *rest), kwargs, why=why)
    loc = source_location.current(3)
    metrics.record_fallback(str(func), str(loc) if loc else None)
    returns = func._schema.returns
    single = len(returns) == 1 and str(returns[0].type) == "Tensor"
    if single:
        steps: list[ViewStep] | None = [EagerViewStep(func, rest, kwargs, in_shape)]
    else:
        steps = split_views(func, rest, kwargs, in_shape)
        if steps is None:
            return fallback.run_eagerly(func, (base, *rest), kwargs, why=why)
        steps = [EagerViewStep(s.op, s.rest, s.kwargs, s.in_shape) for s in steps]
    outs = _views_of(base, steps)
    return outs[0] if single else outs


def _inplace_view(func: Any, p: OpPlan, args: tuple, kwargs: dict) -> Any:
    """``squeeze_``, ``unsqueeze_``, ``t_``, ``transpose_``, ``as_strided_``...: the
    tensor becomes a view of its own old value.

    Callers keep the same Python object (``matmul`` squeezes its result in
    place), so its sizes and strides change in place: assigning ``.data`` is a
    metadata-only shallow copy from the view; then it takes the view's chain.
    """
    self = args[0] if args else None
    view_op = p.functional
    if not isinstance(self, LazyTensor) or view_op is None or not plan(view_op).is_view:
        # resize_as_ and set_ change storage, not just the view.
        return fallback.run_eagerly(func, args, kwargs, why="inplace-view")
    handler = fallback.SPECIAL_HANDLERS.get(view_op)  # as_strided_: as_strided's storage semantics
    view = handler(view_op, args, kwargs) if handler else _view(view_op, plan(view_op), args, kwargs)
    if not isinstance(view, LazyTensor):
        raise NotImplementedError(f"{func} on a lazy tensor gave {type(view).__name__}")
    self.data = view
    # The view shares ``self``'s storage, except when it ran eagerly (a dtype
    # the backend refuses, e.g. complex): then it is a copy holding the new
    # layout, and keeping the old storage read the untransposed values
    # (``stft``'s ``transpose_`` returned [2, 27, 5] for [2, 5, 27]).
    self._lz_storage = view._lz_storage
    self._lz_view = view._lz_view
    self._lz_cache = view._lz_cache
    return self


def _written(func: Any, p: OpPlan, args: tuple, kwargs: dict, wargs: tuple,
             wkwargs: dict) -> tuple[list[Any], list[Any], tuple, dict]:
    """The tensors ``func`` writes (as passed, and flattened) and its functional variant's
    arguments, for ``out=`` ops, several written arguments and reordered functional variants."""
    if p.is_out_variant:
        targets = [wkwargs[m] for m in p.mutated]
        fargs, fkwargs = args, {k: v for k, v in kwargs.items() if k not in p.mutated}
        fargs, fkwargs = _reduce_in_out_dtype(func, fargs, fkwargs, targets)
    else:
        targets = [wargs[p.arg_index[m]] if p.arg_index[m] < len(wargs) else wkwargs[m] for m in p.mutated]
        fargs, fkwargs = args, kwargs
        if p.functional_args:  # the same arguments in the functional variant's order
            named = {**dict(zip(p.arg_index, args)), **kwargs}
            fargs, fkwargs = tuple(named[n] for n in p.functional_args), {}
    flat_targets: list[Any] = []
    for t in targets:
        flat_targets.extend(t if isinstance(t, list | tuple) else [t])
    if not all(isinstance(t, LazyTensor) for t in flat_targets):
        bad = next(t for t in flat_targets if not isinstance(t, LazyTensor))
        raise _device_mismatch(bad)
    return targets, flat_targets, fargs, fkwargs


def _mutate(func: Any, p: OpPlan, args: tuple, kwargs: dict, written: tuple[tuple, dict] | None = None) -> Any:
    """Record the functional variant of in-place/out= ``func`` and assign its results to the
    tensors it writes, taken from ``written`` (the caller's arguments) when given."""
    if p.functional is None:
        return fallback.run_eagerly(func, args, kwargs, why="no functional variant")
    wargs, wkwargs = written or (args, kwargs)
    target = None
    if not p.is_out_variant and not p.functional_args and len(p.mutated) == 1:
        # The common case (``x.mul_(2)``, each write of an optimizer step): one written
        # lazy tensor, and the functional variant takes the same arguments.
        i = p.arg_index[p.mutated[0]]
        target = wargs[i] if i < len(wargs) else wkwargs[p.mutated[0]]
    if type(target) is LazyTensor or isinstance(target, LazyTensor):
        targets = flat_targets = [target]
        fargs, fkwargs = args, kwargs
    else:  # out=, several or listed written tensors, a reordered functional variant, bad input
        targets, flat_targets, fargs, fkwargs = _written(func, p, args, kwargs, wargs, wkwargs)
    if p.checks_overlap:
        inputs = [a for a in (*wargs, *wkwargs.values()) if type(a) is LazyTensor]
        if len(inputs) > 1:
            check_no_partial_overlap(flat_targets, inputs)
    elif shares_memory(flat_targets, wargs, wkwargs):
        check_on_cpu(func, wargs, wkwargs)
    try:
        node, template = record(p.functional, fargs, fkwargs, None, p.functional_plan)
    except _Untraceable as e:
        return fallback.run_eagerly(func, wargs, wkwargs, why=str(e))
    slots: list[_Slot] = []
    _collect_slots(template, slots)
    if len(slots) < len(flat_targets):
        raise NotImplementedError(f"cannot map results of {p.functional} onto the outputs of {func}")
    result_dtypes = [node.metas[slot.i].dtype for slot in slots[: len(flat_targets)]]  # type: ignore[union-attr]
    if p.casts_result:
        for target, dtype in zip(flat_targets, result_dtypes):
            check_cast(dtype, target.dtype)
    check_out_dtypes(func, wargs, wkwargs, flat_targets, result_dtypes)
    for target, slot in zip(flat_targets, slots):
        if tuple(target.shape) != node.metas[slot.i].shape and p.is_out_variant:
            if any(a is target for a in wargs):
                # An output that is also an input is not resized: eager's TensorIterator error.
                raise RuntimeError(f"output with shape {list(target.shape)} doesn't match the broadcast "
                                   f"shape {list(node.metas[slot.i].shape)}")
            _resize_out(func, target, Output(node, slot.i))
            continue
        target._lz_assign(Output(node, slot.i), func)
    return _mutation_result(func, p, args, kwargs, targets)


#: ``out=`` reductions that take their dtype from ``out`` when none is given: eager casts the
#: input to it first, so ``sum(x_float, 0, out=int64)`` adds truncated values (3, not 4 for
#: ``[1.5, 2.5, 0.7]``). Their functional variant then gets ``dtype=out.dtype``.

_REDUCES_IN_OUT_DTYPE = frozenset({
    aten.sum.IntList_out, aten.sum.out, aten.nansum.out, aten.prod.int_out, aten.prod.out,
    aten.cumsum.out, aten.cumprod.out, aten.mean.out, aten.mean.dtype_out,
})


def _reduce_in_out_dtype(func: Any, args: tuple, kwargs: dict, targets: list[Any]) -> tuple[tuple, dict]:
    """``args``/``kwargs`` of an ``out=`` reduction's functional variant with ``dtype`` set to
    ``out``'s where eager takes it from there (``_REDUCES_IN_OUT_DTYPE``)."""
    if func not in _REDUCES_IN_OUT_DTYPE or len(targets) != 1 or not isinstance(targets[0], torch.Tensor):
        return args, kwargs
    dtype = targets[0].dtype
    if func in (aten.mean.out, aten.mean.dtype_out) and not (dtype.is_floating_point or dtype.is_complex):
        return args, kwargs  # eager's own cast error, raised by the cast check
    if func is aten.nansum.out and args and args[0].dtype.is_floating_point and not dtype.is_floating_point:
        # The CPU kernel runs in out's dtype and has no integer NaN-skipping loop (the lazy
        # op summed into an int64 ``out`` and gave 3 for [1.5, nan, 2.0]; adversarial sweep).
        raise NotImplementedError(f'"nansum_cpu" not implemented for \'{checks.SCALAR_TYPE_NAMES[dtype]}\'')
    names = [a.name for a in func._schema.arguments]
    i = names.index("dtype") if "dtype" in names else -1
    if 0 <= i < len(args):
        if args[i] is not None:
            return args, kwargs
        return (*args[:i], dtype, *args[i + 1:]), kwargs
    if kwargs.get("dtype") is not None:
        return args, kwargs
    return args, {**kwargs, "dtype": dtype}


def _resize_out(func: Any, target: LazyTensor, value: Output) -> None:
    """Eager resizes an ``out=`` tensor of another shape (with a deprecation warning when it
    had elements), contiguous, over the same storage while it is large enough: the value fills
    the storage's first elements, and the tensor's other views read them (``torch.sub(a, a,
    out=x)`` with ``v = x.t()`` alive: v read x's old values, eager's zeros; fuzz seed 9511).
    A larger value grows the storage: the tensors that share it move onto the grown one
    (``storage_growth``; they kept reading the old values, and a view resized beyond its
    storage was refused). A view is resized from its storage offset, as eager's is."""
    shape = list(value.meta.shape)
    storage = target._lz_storage
    layout = storage.meta
    numel, capacity = math.prod(shape), math.prod(layout.shape)
    offset = target.storage_offset()
    in_order = storage_growth.can_rebase(layout, target.dtype)
    fits = offset + numel <= capacity and in_order
    sharers = [] if fits else storage_growth.tensors_sharing(storage, target)
    if not fits and (target._lz_view or sharers) and not in_order:
        raise NotImplementedError(
            f"{func}: resizing an out= lazy tensor from {list(target.shape)} to {shape} grows a storage "
            f"that other tensors view, laid out as {list(layout.shape)} with strides {list(layout.stride)} "
            f"({layout.dtype}); lazy grows only contiguous storages of the tensor's dtype. Allocate the "
            "right shape"
        )
    if target.numel() > 0:
        warnings.warn(
            f"An output with one or more elements was resized since it had shape {list(target.shape)}, which "
            f"does not match the required output shape {shape}. This behavior is deprecated, and in a future "
            "PyTorch release outputs will not be resized unless they have zero elements. You can explicitly "
            "reuse an out tensor t by resizing it, inplace, to zero elements with t.resize_(0).",
            UserWarning, stacklevel=4,
        )
    if value.meta.dtype != target.dtype:
        value = record_output(aten._to_copy.default, (value,), {"dtype": target.dtype})
    if fits:
        _write_storage_range(target, value, offset, numel)
        return
    if not target._lz_view:
        resized = wrap_output(value, storage.device)
    else:
        # The grown storage keeps the elements before the view's offset (none after it
        # survive: the value ends past the old storage's end).
        old = record_output(aten.reshape.default, (storage.value, [capacity]), {})
        head = record_output(aten.slice.Tensor, (old, 0, 0, offset, 1), {})
        flat = record_output(aten.reshape.default, (value, [numel]), {})
        grown = wrap_output(record_output(aten.cat.default, ([head, flat],), {}), storage.device)
        resized = grown[offset:offset + numel].view(shape)
    target.data = resized  # sizes and strides, as _inplace_view does
    target._lz_storage = resized._lz_storage
    target._lz_view = resized._lz_view
    target._lz_cache = None
    grown_shape = tuple(resized._lz_storage.meta.shape)
    storage_growth.move_onto(sharers, resized._lz_storage,
                             storage_growth.old_layout_steps(tuple(layout.shape), grown_shape))


def _write_storage_range(target: LazyTensor, value: Output, offset: int, numel: int) -> None:
    """``target`` becomes ``value``'s shape, contiguous over its own (contiguous) storage from
    ``offset``: the storage's elements ``offset`` to ``offset + numel`` take ``value`` in
    row-major order, as eager's ``resize_`` then write does; the storage keeps its layout and
    its other views."""
    storage = target._lz_storage
    layout = storage.meta
    capacity = math.prod(layout.shape)
    flat = record_output(aten.reshape.default, (value, [numel]), {})
    if numel < capacity:
        old = record_output(aten.reshape.default, (storage.value, [capacity]), {})
        flat = record_output(aten.slice_scatter.default, (old, flat, 0, offset, offset + numel, 1), {})
    whole = record_output(aten.reshape.default, (flat, list(layout.shape)), {})
    base = target.as_strided(layout.shape, layout.stride, 0)  # the whole storage (as_strided's semantics)
    base._lz_assign(whole)
    view = base.reshape(-1)[offset:offset + numel].view(list(value.meta.shape))
    target.data = view
    target._lz_storage = view._lz_storage
    target._lz_view = view._lz_view
    target._lz_cache = view._lz_cache


#: In-place ops eager lets write a tensor whose elements share memory (a stride-0 dimension):
#: each writes one value everywhere, so the shared element ends up holding it.
_SAME_VALUE_WRITERS = frozenset({aten.fill_.Scalar, aten.zero_.default})
#: Ones eager lets do it with a deprecation warning; which element wins there is the order of
#: eager's loop, which a functional graph does not have.
_DEPRECATED_OVERLAPPING_WRITERS = frozenset({
    aten.masked_fill_.Scalar, aten.masked_fill_.Tensor, aten.index_fill_.int_Scalar,
    aten.index_fill_.int_Tensor, aten.index_put_.default, aten._index_put_impl_.default,
})


def _check_overlapping_write(writer: Any) -> None:
    """Eager's answer to an in-place write to a tensor with internal overlap (ATen's
    ``assert_no_internal_overlap``), for the ops whose answer lazy can give exactly."""
    if writer in _SAME_VALUE_WRITERS:
        return
    if writer in _DEPRECATED_OVERLAPPING_WRITERS:
        raise NotImplementedError(
            f"{writer} on an expanded lazy tensor writes one memory location several times (eager "
            "PyTorch deprecates it, and which write wins there is its loop order); clone() the tensor first"
        )
    raise RuntimeError(INTERNAL_OVERLAP)


def _collect_slots(template: Any, out: list[_Slot]) -> None:
    if isinstance(template, _Slot):
        out.append(template)
    elif isinstance(template, list | tuple):
        for t in template:
            _collect_slots(t, out)


def _mutation_result(func: Any, p: OpPlan, args: tuple, kwargs: dict, targets: list[Any]) -> Any:
    if not p.n_returns:
        return None
    if p.n_returns == 1:
        return targets[0]
    return tuple(targets)
