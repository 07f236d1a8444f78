"""Data checks that never crash: out-of-range indices and integer division by zero.

On the CPU, PyTorch raises when an index is out of range or an integer divisor
is zero. Here the values are unknown while tracing, and the compiled code
does no bounds checks: an index just past the end corrupted the heap
(iree-cpu), read garbage or aborted (reference); ``a % 0`` killed Python
with SIGFPE. The design follows CUDA's device-side assert, but raises
PyTorch's own error and keeps the process usable:

* Each index-consuming op records a flag "some index is out of range" and
  runs on a *safe* index (bad entries replaced by 0, ``nll_loss``'s
  ``ignore_index`` kept), so compiled code never reads or writes out of
  bounds. Integer division divides by a safe divisor (0 -> 1, and
  ``INT_MIN / -1`` -> 1, which traps in hardware too); a remainder by the
  number -1 (always 0) gets a dividend whose INT_MIN is replaced by 0.
* The flags fold into one int64 value, "the first failing check" (0: none),
  an ordinary lazy tensor carried from step to step: one extra output per
  graph, no host sync at ``mark_step()``, so async execution still overlaps.
  Check ids are per op and user line and travel as lifted scalars, so the
  graph, and its cache key, is the same every step.
* A host read that executes pending work reads that value with the rest
  (``executor.to_host_many``), as does ``wait_device_ops()``; a nonzero value
  raises the op's PyTorch error (type and message as on the CPU, with the
  user's line as a note). The values that step produced are unusable: the
  tensors of the raising read, and in async mode every output of the failed
  step, fail when read or used, the way a failed execution's outputs do.

Errors that need no data (a Python divisor of 0, a CPU index, an index into
an empty dimension) raise at the call, as eagerly. So do indices whose values
the host already holds: a small index uploaded from the CPU keeps a host copy
(``DeviceData.host``, ``lazy_core.host_eval``), the labels and token ids of
nearly every training step. Checked there, it raises at the call and records
nothing: the ten ops of a recorded check cost 0.39 ms of a 2.37 ms MLP step.
``LAZY_CHECKS=0`` turns the checks off (the compiled code is then unsafe again).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from . import metrics, source_location
from .ir import DeviceData, Output

if TYPE_CHECKING:
    from .source_location import SourceLocation
    from .tensor import LazyTensor

aten = torch.ops.aten


def _env_enabled() -> bool:
    """``LAZY_CHECKS`` (default on). The one place this variable is read."""
    from . import config

    return bool(config.get("LAZY_CHECKS"))


_enabled = _env_enabled()


def enabled() -> bool:
    return _enabled


def set_enabled(on: bool) -> None:
    """Turn the checks on or off at run time (ops already traced keep theirs)."""
    global _enabled
    _enabled = on
    from . import tensor

    tensor._kinds.clear()


class _Site(NamedTuple):
    """What to raise when a check fails."""

    exc: type[Exception]
    message: str
    op: str
    location: SourceLocation | None


class _State:
    def __init__(self) -> None:
        #: The "first failing check" accumulator (int64, one element), or None before the first check.
        self.acc: LazyTensor | None = None
        #: The accumulator's value last read as 0 (no need to read it again).
        self.clean: Output | None = None
        self.ids: dict[tuple, int] = {}
        self.sites: dict[int, _Site] = {}
        #: Safe indices already made in this segment: key -> (index node, safe value).
        self.memo: dict[tuple, tuple[Any, Output]] = {}
        self.memo_segment: Any = None
        self.reading = False


_state = _State()


# -- recording helpers ---------------------------------------------------------------


def _op(op: Any, args: tuple, loc: SourceLocation | None) -> Output:
    from .tensor import record

    node, template = record(op, args, {}, loc)
    return Output(node, template.i)


def _acc() -> LazyTensor:
    """The accumulator tensor; a new check segment starts when it was executed."""
    from .tensor import from_cpu

    if _state.acc is None:
        # Shape [1], not 0-d: backends may share one buffer among equal 0-d uploads (iree's
        # SharedScalarData), which is never donated. A fresh accumulator then made every checked
        # graph compile twice: once with the shared buffer, once more when the accumulator had
        # become a result of its own and was donated (the same graph, another donation plan).
        _state.acc = from_cpu(torch.zeros(1, dtype=torch.int64))
    acc = _state.acc
    value = acc._lz_storage.value
    if value.node.is_leaf() and _state.memo_segment is not value:
        _state.memo.clear()
        _state.memo_segment = value
    return acc


def _site_id(site: _Site) -> int:
    key = (site.exc, site.message, site.op, site.location)
    k = _state.ids.get(key)
    if k is None:
        k = _state.ids[key] = len(_state.ids) + 2  # 0: no failure; ids >= 2 are lifted scalars
        _state.sites[k] = site
    return k


def _fold(flag: Output, site: _Site) -> None:
    """acc = site id if acc == 0 and flag, else acc (the first failure wins, as eagerly)."""
    acc = _acc()
    loc = site.location
    cur = acc._lz_value()
    hit = _op(aten.logical_and.default, (flag, _op(aten.eq.Scalar, (cur, 0), loc)), loc)
    acc._lz_assign(_op(aten.masked_fill.Scalar, (cur, hit, _site_id(site)), loc))
    metrics.counter_add("checks_recorded")


def check_data(flag: Any, exc: type[Exception], message: str, op: str) -> None:
    """Raise ``exc(message)`` at the next read where the 0-d bool lazy tensor ``flag`` is true,
    as PyTorch raises at the call (for ops recorded in another form: ``multinomial.py``)."""
    if _enabled:
        _fold(_value(flag), _Site(exc, message, op, source_location.current(2)))


# -- argument access -------------------------------------------------------------------


class _Bound:
    """An op's arguments by schema name, with replacement."""

    def __init__(self, func: Any, args: tuple, kwargs: dict) -> None:
        self.func = func
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.schema = {a.name: (i, a) for i, a in enumerate(func._schema.arguments)}

    def get(self, name: str) -> Any:
        i, a = self.schema[name]
        if i < len(self.args):
            return self.args[i]
        if name in self.kwargs:
            return self.kwargs[name]
        return a.default_value if a.has_default_value() else None

    def has(self, name: str) -> bool:
        return name in self.schema

    def set(self, name: str, value: Any) -> None:
        i, _ = self.schema[name]
        if i < len(self.args):
            self.args[i] = value
        else:
            self.kwargs[name] = value


def _is_lazy(x: Any) -> bool:
    from .tensor import LazyTensor

    return isinstance(x, LazyTensor)


def _value(x: Any) -> Output:
    return x if isinstance(x, Output) else x._lz_value()


def _meta_of(x: Any) -> Any:
    if isinstance(x, Output):
        return x.meta
    return x


# -- index checks ------------------------------------------------------------------------


def _safe_index(
    idx: Any, lo: int, n: int, site: _Site, ignore: int | None = None, first_only: bool = False
) -> Any:
    """``idx`` with out-of-range entries replaced by 0, and a recorded check.

    Valid entries lie in ``[lo, n)`` (``lo`` is ``-n`` where negative indices
    wrap); ``ignore`` (``nll_loss``'s ``ignore_index``) is valid too. With
    ``first_only`` only the first entry raises (the kernel reads no other),
    though every entry is made safe.
    """
    if idx is None:
        return idx
    if not (_is_lazy(idx) or isinstance(idx, Output)):
        if isinstance(idx, torch.Tensor) and idx.numel() and idx.dtype not in (torch.bool, torch.uint8):
            _check_on_host(idx, lo, n, site, ignore, first_only)
        return idx
    value = _value(idx)
    meta = value.meta
    if meta.dtype in (torch.bool, torch.uint8) or meta.dtype.is_floating_point or meta.numel() == 0:
        return idx  # masks: data-dependent shapes, not checked here
    if n == 0 and ignore is None:
        raise site.exc(site.message)  # every index of an empty dimension is out of range
    host = _host_copy(idx, value)
    if host is not None and _check_on_host(host, lo, n, site, ignore, first_only):
        # A small index uploaded from the CPU (targets, token ids) is known here: checked now,
        # raising at the call as eagerly, and no check recorded (ten ops; bench/checks_cost.py).
        metrics.counter_add("checks_on_host")
        return idx
    acc = _acc()
    # One check per index value and bound: a backward op (embedding_dense_backward,
    # nll_loss_backward) reuses its forward's safe index.
    key = (id(value.node), value.index, lo, n, ignore, first_only)
    hit = _state.memo.get(key)
    if hit is not None and hit[0] is value.node:
        return hit[1]
    del acc
    loc = site.location
    bad = _op(aten.logical_or.default, (_op(aten.lt.Scalar, (value, lo), loc), _op(aten.ge.Scalar, (value, n), loc)), loc)
    if ignore is not None:
        bad = _op(aten.logical_and.default, (bad, _op(aten.ne.Scalar, (value, ignore), loc)), loc)
    raised = bad
    if first_only:
        raised = _op(aten.slice.Tensor, (_op(aten.view.default, (bad, [-1]), loc), 0, 0, 1), loc)
    _fold(_op(aten.any.default, (raised,), loc), site)
    safe = _op(aten.masked_fill.Scalar, (value, bad, 0), loc)
    _state.memo[key] = (value.node, safe)
    return safe


def _host_copy(idx: Any, value: Output) -> torch.Tensor | None:
    """The value of lazy index ``idx`` (IR value ``value``) as the host knows it, or None: the
    host copy of the uploaded leaf it is or views (``labels.view(-1)``, ``position_ids[:, :n]``),
    through its view steps."""
    if type(value.node) is DeviceData:
        return value.node.host
    if not _is_lazy(idx) or not idx._lz_view:
        return None
    base = idx._lz_storage.value
    host = base.node.host if type(base.node) is DeviceData else None
    # The copy is contiguous; a view step that addresses memory (as_strided) needs the same layout.
    if host is None or tuple(host.stride()) != tuple(base.meta.stride):
        return None
    for step in idx._lz_view:
        if any(isinstance(a, Output | torch.Tensor) for a in (*step.rest, *step.kwargs.values())):
            return None
        try:
            host = step.op(host, *step.rest, **step.kwargs)
        except Exception:  # noqa: BLE001 - a step the CPU views otherwise: the device check decides
            return None
    return host


def _check_on_host(idx: torch.Tensor, lo: int, n: int, site: _Site, ignore: int | None, first_only: bool) -> bool:
    """Raise ``site``'s error if CPU index ``idx`` has an entry out of ``[lo, n)`` (``ignore``
    allowed; with ``first_only`` only the first entry counts). True if every entry is in range,
    so the index needs no safe copy."""
    low, high = torch.aminmax(idx)
    if lo <= int(low) and int(high) < n:
        return True
    bad = (idx < lo) | (idx >= n)
    if ignore is not None:
        bad &= idx != ignore
    if bool((bad.flatten()[:1] if first_only else bad).any()):
        raise site.exc(site.message)
    return not bool(bad.any())


def _dim_size(t: Any, dim: int) -> int:
    shape = tuple(t.shape)
    if not shape:
        return 1
    return shape[dim % len(shape)]


def _bounds_msg(dim: int, n: int, prefix: str = "") -> str:
    # PyTorch names the offending value ("index 5 is ..."); it is on the device.
    return f"{prefix}index is out of bounds for dimension {dim} with size {n}"


def _guard_dim_index(exc: type[Exception], prefix: str = "", negative_ok: bool = False,
                     plain: str | None = None, dim1_kernel: bool = False,
                     outer_dims_only: bool = False, empty_slices_unchecked: bool = False,
                     empty_unchecked: bool = False) -> Callable[[_Bound, str, Any], None]:
    """ops(self, dim, index, ...): index entries in [0, self.size(dim)).

    ``empty_slices_unchecked``: the CPU kernel writes nothing and checks nothing when each index
    addresses an empty slice (``index_copy`` into a [2, 0, 3] tensor along dim 0);
    ``empty_unchecked``: nor when ``self`` has no elements at all (``index_add``). Lazy raised
    for an out-of-range index there (fuzz seeds 9514, 9525, 9526)."""

    def guard(b: _Bound, op: str, loc: Any) -> None:
        self, dim = b.get("self"), b.get("dim")
        n = _dim_size(self, dim)
        d = dim % max(len(self.shape), 1)
        if (empty_unchecked and self.numel() == 0) or (
                empty_slices_unchecked and 0 in [s for i, s in enumerate(self.shape) if i != d]):
            return
        site = _Site(exc, plain or _bounds_msg(d, n, prefix), op, loc)
        if dim1_kernel and d == 1 and len(self.shape) > 1:
            # The CPU's index_select raises RuntimeError along dim 1 of a tensor of rank > 1
            # (its dim-1 kernel, written for embedding_bag) and IndexError along every other dim.
            site = _Site(RuntimeError, f"INDICES element is out of DATA bounds, axis_dim={n}", op, loc)
        if outer_dims_only and not (len(self.shape) > 1 and d in (0, len(self.shape) - 1)):
            # The CPU's index_add checks bounds itself (IndexError) except along the first
            # and last dim of a tensor of rank > 1, where its scatter path raises RuntimeError.
            site = _Site(IndexError, "index out of range in self", op, loc)
        b.set("index", _safe_index(b.get("index"), -n if negative_ok else 0, n, site))

    return guard


def _vector_index(then: Callable[[_Bound, str, Any], None]) -> Callable[[_Bound, str, Any], None]:
    """``index_select``'s index must be a vector (or a scalar): eager's IndexError at the call,
    which the meta kernel skips (lazy raised it at the read; fuzz seed 9532)."""
    def guard(b: _Bound, op: str, loc: Any) -> None:
        if b.get("index").dim() > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        then(b, op, loc)
    return guard


def _guard_embedding(b: _Bound, op: str, loc: Any) -> None:
    if b.get("weight").dim() != 2:
        return  # the op raises eager's "'weight' must be 2-D" at the call
    n = b.get("weight").shape[0]
    b.set("indices", _safe_index(b.get("indices"), 0, n, _Site(IndexError, "index out of range in self", op, loc)))


def _guard_embedding_backward(b: _Bound, op: str, loc: Any) -> None:
    n = b.get("num_weights")
    b.set("indices", _safe_index(b.get("indices"), 0, n, _Site(IndexError, "index out of range in self", op, loc)))


def _embedding_bag_site(n: int, mode: int, op: str, loc: Any) -> _Site:
    # The CPU kernels word it by mode and name the value; the value is on the device.
    if mode == 2:
        return _Site(RuntimeError, "embedding_bag: Expected idx >= 0 && idx < num_embeddings", op, loc)
    return _Site(RuntimeError, f"an index of input is not in the valid range [0, {n})", op, loc)


def _guard_embedding_bag(b: _Bound, op: str, loc: Any) -> None:
    """Indices in range, ``offsets[0] == 0``, offsets not decreasing and not past the indices'
    length (lowering/embedding_bag.py reads bags off the offsets by comparison, so bad offsets are
    safe to run but not a value eager would give; eager's ``max`` mode runs decreasing offsets,
    ``sum`` raises)."""
    weight, indices, offsets = b.get("weight"), b.get("indices"), b.get("offsets")
    if weight.dim() != 2 or indices.dim() != 1:
        return  # eager's shape errors at the call
    b.set("indices", _safe_index(indices, 0, weight.shape[0], _embedding_bag_site(weight.shape[0], b.get("mode"),
                                                                                 op, loc)))
    if not _is_lazy(offsets) or offsets.dim() != 1 or offsets.numel() == 0:
        return
    v = offsets._lz_value()
    first = _op(aten.ne.Scalar, (_op(aten.select.int, (v, 0, 0), loc), 0), loc)
    _fold(first, _Site(RuntimeError, "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to "
                       "start from position 0.", op, loc))
    bad = first
    if offsets.numel() > 1:
        later, earlier = _op(aten.slice.Tensor, (v, 0, 1), loc), _op(aten.slice.Tensor, (v, 0, 0, -1), loc)
        decreasing = _op(aten.any.default, (_op(aten.lt.Tensor, (later, earlier), loc),), loc)
        _fold(decreasing, _Site(RuntimeError, "Expected i < index_size to be true, but got false.", op, loc))
        bad = _op(aten.logical_or.default, (bad, decreasing), loc)
    past = _op(aten.gt.Scalar, (_op(aten.select.int, (v, 0, -1), loc), indices.shape[0]), loc)
    _fold(past, _Site(RuntimeError, f"offsets[-1] can not be greater than input's length {indices.shape[0]}",
                      op, loc))
    # Offsets the kernel accepts (one bag of everything) where they are bad: the eager backend runs
    # the CPU kernel, which would raise its own error first.
    b.set("offsets", _op(aten.masked_fill.Scalar, (v, _op(aten.logical_or.default, (bad, past), loc), 0), loc))


def _guard_embedding_bag_backward(b: _Bound, op: str, loc: Any) -> None:
    n = b.get("num_weights") if b.has("num_weights") else b.get("weight").shape[0]
    b.set("indices", _safe_index(b.get("indices"), 0, n, _embedding_bag_site(n, b.get("mode"), op, loc)))


def _guard_nll(b: _Bound, op: str, loc: Any) -> None:
    """For a 1-d input (one sample) the CPU kernel reads ``target[0]`` only: a longer target's
    other entries raise nothing in eager (torch-mlir's ``NllLossModuleBackward1D*``)."""
    self = b.get("self")
    n = self.shape[1] if self.dim() >= 2 else self.shape[0]
    site = _Site(IndexError, "Target is out of bounds.", op, loc)
    b.set("target", _safe_index(b.get("target"), 0, n, site, ignore=b.get("ignore_index"),
                                first_only=self.dim() == 1))


def _guard_multi_margin(b: _Bound, op: str, loc: Any) -> None:
    """``multi_margin_loss``: each target is a class of the last dim. Its decomposition gathers
    with it: an out-of-range target aborted the reference backend's process and gave a value on
    iree-cpu, where eager raises."""
    self = b.get("self")
    n = self.shape[-1] if self.dim() else 1
    b.set("target", _safe_index(b.get("target"), 0, n, _Site(RuntimeError, "target out of range", op, loc)))


def _guard_multilabel_margin(b: _Bound, op: str, loc: Any) -> None:
    """``multilabel_margin_loss``: every target entry (also those after the first -1, which the
    loss does not read) must lie in ``[-1, C)``; its decomposition gathers with them."""
    self = b.get("self")
    n = self.shape[-1] if self.dim() else 1
    b.set("target", _safe_index(b.get("target"), -1, n,
                                _Site(RuntimeError, "argument #2 'target' is out of range", op, loc)))


def _guard_segment_reduce(b: _Bound, op: str, loc: Any) -> None:
    """``segment_reduce``'s checks of its segments (data): lengths that are negative or, unless
    ``unsafe``, do not add up to the data's first dim; offsets that step back."""
    lengths, offsets, data = b.get("lengths"), b.get("offsets"), b.get("data")
    if _is_lazy(lengths) and lengths.dim() == 1:
        v = lengths._lz_value()
        if not b.get("unsafe"):
            _fold(_op(aten.any.default, (_op(aten.lt.Scalar, (v, 0), loc),), loc),
                  _Site(RuntimeError, "lengths contains negative value!", op, loc))
            total = _op(aten.sum.default, (v,), loc)
            _fold(_op(aten.ne.Scalar, (total, data.shape[0] if data.dim() else 1), loc),
                  _Site(RuntimeError, "segment_reduce(): Expected all rows of lengths along axis to sum to "
                        "data.size(lengths.dim()-1) when !unsafe.", op, loc))
    elif _is_lazy(offsets) and offsets.dim() == 1 and offsets.shape[0] > 1:
        v = offsets._lz_value()
        n = offsets.shape[0]
        step = _op(aten.sub.Tensor, (_op(aten.slice.Tensor, (v, 0, 1, n), loc),
                                     _op(aten.slice.Tensor, (v, 0, 0, n - 1), loc)), loc)
        _fold(_op(aten.any.default, (_op(aten.lt.Scalar, (step, 0), loc),), loc),
              _Site(RuntimeError, "Expected segment_length >= 0 to be true, but got false.  (Could this error "
                    "message be improved?  If so, please report an enhancement request to PyTorch.)", op, loc))


def _guard_binary_cross_entropy(b: _Bound, op: str, loc: Any) -> None:
    """The CPU kernel raises for an input outside [0, 1] (NaN included); compiled, the loss
    was NaN or a finite wrong value (adversarial sweep). Its backward checks nothing, as eager."""
    x = b.get("self")
    if not _is_lazy(x):
        return
    v = x._lz_value()
    inside = _op(aten.logical_and.default, (_op(aten.ge.Scalar, (v, 0), loc), _op(aten.le.Scalar, (v, 1), loc)), loc)
    outside = _op(aten.logical_not.default, (inside,), loc)
    _fold(_op(aten.any.default, (outside,), loc),
          _Site(RuntimeError, "all elements of input should be between 0 and 1", op, loc))


def _guard_sorter(b: _Bound, op: str, loc: Any) -> None:
    """``searchsorted(..., sorter=)``: its decomposition gathers the sequence with ``sorter``."""
    seq = b.get("sorted_sequence")
    n = seq.shape[-1] if seq.dim() else 1
    site = _Site(RuntimeError, "torch.searchsorted(): sorter index out of range", op, loc)
    b.set("sorter", _safe_index(b.get("sorter"), 0, n, site))


def _guard_indices_list(b: _Bound, op: str, loc: Any) -> None:
    """index / index_put(self, indices: Tensor?[]): index k walks dimension k."""
    self, indices = b.get("self"), b.get("indices")
    if indices is None:
        return
    shape = tuple(self.shape)
    # An empty ``self`` whose indexed dims all have elements: eager's kernel reads nothing and
    # checks no index (``x[..., False][idx]``, ``x[:, 1:][idx] = c`` of a [2, 1, 3] x; fuzz
    # seed 9517). A size-0 indexed dim still raises there.
    unchecked = self.numel() == 0 and 0 not in _indexed_sizes(shape, indices)
    out, dim = [], 0
    for idx in indices:
        meta = _value(idx).meta if (_is_lazy(idx) or isinstance(idx, Output)) else idx
        if idx is not None and getattr(meta, "dtype", None) in (torch.bool, torch.uint8):
            # A mask's shape is known here: eager's IndexError at the call, not at the read
            # (``x[::2].index_put((mask,), v)`` with a mask of x's length; fuzz seeds 9511, 9513).
            for j, n in enumerate(meta.shape):
                if dim + j < len(shape) and n != shape[dim + j]:
                    raise IndexError(f"The shape of the mask {list(meta.shape)} at index {j} does not match the "
                                     f"shape of the indexed tensor {list(shape)} at index {dim + j}")
            out.append(idx)
            dim += len(meta.shape)
            continue
        if idx is not None and dim < len(shape) and not unchecked:
            n = shape[dim]
            idx = _safe_index(idx, -n, n, _Site(IndexError, _bounds_msg(dim, n), op, loc))
        out.append(idx)
        dim += 1
    b.set("indices", type(indices)(out))
    if "index_put" in op:
        _check_mask_values(b, shape, indices, op, loc)


def _check_mask_values(b: _Bound, shape: tuple[int, ...], indices: Any, op: str, loc: Any) -> None:
    """``x[mask] = values``: ``values`` must broadcast to the ``[count, ...]`` the mask selects.
    The count is data: eager raises at the call, lazy at the read (a device check). Compiled
    backends wrote ``[7, 8]`` of ``[7, 8, 9]`` into two places and raised nothing (adversarial
    sweep). One mask and no other index tensor; others keep their trace-time checks."""
    values = b.get("values")
    given = [(k, i) for k, i in enumerate(indices) if i is not None]
    if len(given) != 1 or not isinstance(values, torch.Tensor) or values.dim() == 0:
        return
    k, mask = given[0]
    meta = _value(mask).meta if (_is_lazy(mask) or isinstance(mask, Output)) else mask
    if getattr(meta, "dtype", None) not in (torch.bool, torch.uint8):
        return
    rank = len(meta.shape)
    result_rank = len(shape) - rank + 1  # the mask's dims become one: [..., count, ...]
    j = k - (result_rank - values.dim())  # values align to the result from the right
    if not 0 <= j < values.dim() or values.shape[j] == 1:
        return
    want = values.shape[j]
    message = (f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to the "
               f"indexing result (the mask selects other than {want} elements along that dim)")
    if not (_is_lazy(mask) or isinstance(mask, Output)):
        if int(mask.count_nonzero()) != want:
            raise RuntimeError(message)
        return
    count = _op(aten.sum.default, (_value(mask),), loc)
    _fold(_op(aten.ne.Scalar, (count, want), loc), _Site(RuntimeError, message, op, loc))


def _indexed_sizes(shape: tuple[int, ...], indices: Any) -> list[int]:
    """The sizes of the dims an ``index``/``index_put`` indices list walks with a tensor."""
    sizes, dim = [], 0
    for idx in indices:
        meta = _value(idx).meta if (_is_lazy(idx) or isinstance(idx, Output)) else idx
        rank = len(meta.shape) if idx is not None and getattr(meta, "dtype", None) in (torch.bool, torch.uint8) else 1
        if idx is not None:
            sizes += list(shape[dim:dim + rank])
        dim += rank
    return sizes


def _guard_max_unpool(b: _Bound, op: str, loc: Any) -> None:
    """max_unpool2d/3d: each index addresses its plane of ``output_size`` elements.

    The CPU kernel raises RuntimeError for an index outside the plane; compiled code
    scattered an index past it into another plane or dropped it, and returned values.
    """
    size = [int(s) for s in b.get("output_size")]
    n = 1
    for s in size:
        n *= s
    site = _Site(RuntimeError, f"Found an invalid max index (output volumes are of size {'x'.join(map(str, size))})",
                 op, loc)
    b.set("indices", _safe_index(b.get("indices"), 0, n, site))


def _guard_take(b: _Bound, op: str, loc: Any) -> None:
    n = b.get("self").numel()
    b.set("index", _safe_index(b.get("index"), -n, n, _Site(IndexError, f"out of range: tried to access an index "
                                                                      f"out of a tensor of {n} elements.", op, loc)))


def check_one_hot(t: Any, num_classes: int) -> None:
    """``one_hot``'s checks (its decomposition compares, so it never reads out of bounds,
    but a class out of range must raise as on the CPU). Negative classes are checked first."""
    if not _enabled or not _is_lazy(t) or t.numel() == 0 or t.dtype.is_floating_point:
        return
    loc = source_location.current(3)
    value = t._lz_value()
    op = "aten.one_hot.default"
    _fold(_op(aten.any.default, (_op(aten.lt.Scalar, (value, 0), loc),), loc),
          _Site(RuntimeError, "Class values must be non-negative.", op, loc))
    if num_classes >= 0:
        _fold(_op(aten.any.default, (_op(aten.ge.Scalar, (value, num_classes), loc),), loc),
              _Site(RuntimeError, "Class values must be smaller than num_classes.", op, loc))


# -- integer division ---------------------------------------------------------------------


def _as_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty(tuple(x.shape), dtype=x.dtype, device="meta")
    return x


def _guard_division(b: _Bound, op: str, loc: Any) -> None:
    if b.has("rounding_mode") and b.get("rounding_mode") is None:
        return  # true division: a float result, no error
    a, d = b.get("self"), b.get("other")
    try:
        dtype = torch.result_type(_as_meta(a), _as_meta(d))
    except (RuntimeError, TypeError):
        return
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return
    site = _Site(RuntimeError, "ZeroDivisionError", op, loc)
    if not _is_lazy(d):
        if isinstance(d, torch.Tensor):
            if bool((d == 0).any()):
                raise site.exc(site.message)
        elif d == 0:
            raise site.exc(site.message)
        minus_one = d.numel() == 1 and int(d) == -1 if isinstance(d, torch.Tensor) else d == -1
        if minus_one and dtype.is_signed and _is_lazy(a) and ("remainder" in op or "fmod" in op):
            # INT_MIN % -1 traps in hardware (SIGFPE on the compiled CPU backends);
            # every remainder by -1 is 0, so INT_MIN is replaced by 0 before it.
            av = a._lz_value()
            if av.meta.dtype.is_signed and not av.meta.dtype.is_floating_point:  # not a bool dividend
                low = torch.iinfo(av.meta.dtype).min
                b.set("self", _op(aten.masked_fill.Scalar, (av, _op(aten.eq.Scalar, (av, low), loc), 0), loc))
        return
    dv = d._lz_value()
    zero = _op(aten.eq.Scalar, (dv, 0), loc)
    _fold(_op(aten.any.default, (zero,), loc), site)
    if dtype.is_signed and _is_lazy(a) and not dv.meta.dtype == torch.uint8:
        # INT_MIN / -1 overflows, and traps in hardware like a zero divisor. INT_MIN of the
        # result's dtype: an int32 dividend of an int64 division never overflows (``int32_min //
        # int64(-1)`` is 2147483648; masking the dividend's INT_MIN gave -2147483648).
        low = torch.iinfo(dtype).min if a.dtype == dtype else None
        if low is not None:
            ov = _op(aten.logical_and.default, (_op(aten.eq.Scalar, (a._lz_value(), low), loc),
                                                _op(aten.eq.Scalar, (dv, -1), loc)), loc)
            bad = _op(aten.logical_or.default, (zero, ov), loc)
            safe = _op(aten.where.ScalarSelf, (bad, 1, dv), loc)
            if safe.meta.shape == dv.meta.shape and safe.meta.dtype != dv.meta.dtype:
                # where() made a bool divisor int64, which would promote ``int32 % mask`` (fuzz seed 6).
                from .tensor import record

                node, template = record(aten._to_copy.default, (safe,), {"dtype": dv.meta.dtype}, loc)
                safe = Output(node, template.i)
            elif safe.meta.shape != dv.meta.shape:
                # The divisor took the dividend's shape: a 0-d one no longer stays out of
                # type promotion (int32 % 0-d int64 is int32), so give it the result's dtype.
                from .tensor import record

                node, template = record(aten._to_copy.default, (safe,), {"dtype": dtype}, loc)
                safe = Output(node, template.i)
            b.set("other", safe)
            return
    b.set("other", _op(aten.masked_fill.Scalar, (dv, zero, 1), loc))


# -- linear-algebra status codes ------------------------------------------------------------


def _linalg_message(api: str) -> tuple[type[Exception], str]:
    """The CPU's ``_linalg_check_errors`` error for a failed ``api`` (its
    wording, less the data: which batch element and which minor failed are on
    the device)."""
    if "inv" in api:
        return torch.linalg.LinAlgError, (f"{api}: a diagonal element is zero, the inversion could not be "
                                          "completed because the input matrix is singular.")
    if "solve" in api:
        return torch.linalg.LinAlgError, f"{api}: The solver failed because the input matrix is singular."
    if "cholesky" in api:
        return torch.linalg.LinAlgError, (f"{api}: The factorization could not be completed because the input "
                                          "is not positive-definite.")
    if "svd" in api:
        return torch.linalg.LinAlgError, (f"{api}: The algorithm failed to converge because the input matrix "
                                          "is ill-conditioned or has too many repeated singular values.")
    if "eig" in api or "syevd" in api:
        return torch.linalg.LinAlgError, (f"{api}: The algorithm failed to converge because the input matrix "
                                          "is ill-conditioned or has too many repeated eigenvalues.")
    if "lstsq" in api:
        return torch.linalg.LinAlgError, (f"{api}: The least squares solution could not be computed because "
                                          "the input matrix does not have full rank.")
    if "lu_factor" in api:
        return RuntimeError, (f"{api}: a diagonal element of U is zero and using it on lu_solve would result "
                              "in a division by zero.")
    return RuntimeError, f"{api}: the factorization reported an error code."


def _guard_linalg_errors(b: _Bound, op: str, loc: Any) -> None:
    """``_linalg_check_errors(info, api_name, is_matrix)``: the check the CPU
    runs after ``linalg_cholesky_ex``, ``linalg_inv_ex``, ``linalg_solve_ex``.

    It returns nothing, so recorded as an op it had no consumer and vanished
    from the graph: ``torch.linalg.cholesky`` of a matrix that is not
    positive-definite returned garbage where the CPU raises. Its status
    (nonzero ``info``) becomes a device-side check like the others.
    """
    info = b.get("info")
    if not _is_lazy(info):
        torch.ops.aten._linalg_check_errors(info, b.get("api_name"), is_matrix=b.get("is_matrix"))
        return
    if info.numel() == 0:
        return
    exc, message = _linalg_message(b.get("api_name"))
    _fold(_op(aten.any.default, (_op(aten.ne.Scalar, (info._lz_value(), 0), loc),), loc), _Site(exc, message, op, loc))


def _refusing_bool(kernel: str, modes: tuple[str, ...] | None, then: Callable[[_Bound, str, Any], None]
                   ) -> Callable[[_Bound, str, Any], None]:
    """``then``, after refusing a bool ``self`` (for ``modes`` of its ``reduce`` only, or all) as
    the CPU kernel does: ``index_reduce`` and ``scatter_reduce(reduce="mean")`` of bools raise
    NotImplementedError eagerly, and computed a value here (adversarial sweep)."""

    def guard(b: _Bound, op: str, loc: Any) -> None:
        self = b.get("self")
        if getattr(self, "dtype", None) == torch.bool and (modes is None or b.get("reduce") in modes):
            raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')
        then(b, op, loc)

    return guard


def _refusing_bool_result(kernel: str) -> Callable[[_Bound, str, Any], None]:
    """Refuse ``dtype=torch.bool`` as the CPU kernel does: ``cumsum``/``cumprod`` have no bool
    loop and raise NotImplementedError eagerly; lazy computed a value or failed to compile
    (the int64 OpInfo sweep)."""

    def guard(b: _Bound, op: str, loc: Any) -> None:
        if b.get("dtype") == torch.bool:
            raise NotImplementedError(f'"{kernel}" not implemented for \'Bool\'')

    return guard


def _source_shaped_like_a_scalar(then: Callable[[_Bound, str, Any], None]) -> Callable[[_Bound, str, Any], None]:
    """``then``, after eager's shape check of ``index_reduce`` into a 0-d ``self``: its source
    must be 0-d too (eager raises for a 1-element ``[1]``; lazy reduced into the scalar)."""

    def guard(b: _Bound, op: str, loc: Any) -> None:
        self, source = b.get("self"), b.get("source")
        if getattr(self, "dim", None) and self.dim() == 0 and getattr(source, "dim", None) and source.dim() != 0:
            raise RuntimeError("source tensor shape must match self tensor shape, excluding the specified "
                               f"dimension. Got self.shape = [] source.shape = {list(source.shape)}")
        then(b, op, loc)

    return guard


def _refusing_half(kernel: str) -> Callable[[_Bound, str, Any], None]:
    """Refuse a float16 or bfloat16 ``self`` as the CPU kernel does: ``special.erfcx``, ``ndtri``,
    ``log_ndtr`` and the Bessel functions have no half-precision loop and raise
    NotImplementedError eagerly; lazy computed their decomposition (lowering/special.py) in
    float32 (J0, J1, Y0, Y1 in half returned numbers: an adversarial run)."""
    names = {torch.float16: "Half", torch.bfloat16: "BFloat16"}

    def guard(b: _Bound, op: str, loc: Any) -> None:
        name = names.get(getattr(b.get("self" if "self" in b.schema else "x"), "dtype", None))
        if name is not None:
            raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')

    return guard


def _refusing_half_polynomial(kernel: str) -> Callable[[_Bound, str, Any], None]:
    """Refuse a float16 or bfloat16 result of an orthogonal polynomial (``x`` and ``n`` either
    one a number) as the CPU kernel does: it has no half-precision loop; lazy computed its
    decomposition (lowering/orthogonal_polynomials.py)."""
    names = {torch.float16: "Half", torch.bfloat16: "BFloat16"}

    def guard(b: _Bound, op: str, loc: Any) -> None:
        x, n = b.get("x"), b.get("n")
        if x is None or n is None:
            return
        # (Meta stand-ins of the same rank class: result_type of a lazy tensor dispatches.)
        def standin(v: Any) -> Any:
            return torch.empty((1,) * min(v.dim(), 1), dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v

        name = names.get(torch.result_type(standin(x), standin(n)))
        if name is not None:
            raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')

    return guard


#: ATen's names of the integer and bool dtypes, as its "not implemented for" errors print them.
SCALAR_TYPE_NAMES = {torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int",
                     torch.int64: "Long", torch.bool: "Bool", torch.uint16: "UInt16", torch.uint32: "UInt32",
                     torch.uint64: "UInt64"}


def _guard_round(b: _Bound, op: str, loc: Any) -> None:
    """``round(decimals=n)`` of an integer or bool tensor: the CPU kernel has no such loop and
    raises NotImplementedError; lazy returned the input (the int64 OpInfo sweep)."""
    self = b.get("self")
    name = SCALAR_TYPE_NAMES.get(getattr(self, "dtype", None))
    # ``decimals=0`` is plain ``round``, which eager computes for integers (or not: a 1-element
    # tensor takes another kernel that raises), so only another ``decimals`` is refused.
    if name is not None and "decimals" in b.schema and b.get("decimals") != 0:
        raise NotImplementedError(f'"round_cpu" not implemented for \'{name}\'')


def _guard_convolution_backward(b: _Bound, op: str, loc: Any) -> None:
    """An integer or bool convolution's input or weight gradient (gradient, input and weight of
    one dtype): eager's CPU kernels have no such loop and raise NotImplementedError (a bias
    gradient alone is a sum, computed); lazy raised it only at the read, from the eager
    fallback, as another exception type (fuzz seed 4475 program 17')."""
    dtypes = {getattr(b.get(a), "dtype", None) for a in ("grad_output", "input", "weight")}
    name = SCALAR_TYPE_NAMES.get(dtypes.pop()) if len(dtypes) == 1 else None
    mask = b.get("output_mask") or (False, False, False)
    # Mixed dtypes take other eager paths (some raise "expected scalar type Long but found
    # Float" first, a RuntimeError): those still raise eager's error at the read.
    if name is None or not (mask[0] or mask[1]):
        return
    nd = getattr(b.get("weight"), "dim", lambda: 4)() - 2
    if b.get("transposed"):
        kernel = "slow_conv_transpose2d_backward_out_cpu" if mask[0] else "slow_conv_transpose2d_acc_grad_parameters_cpu"
    elif not mask[0] and name == "Bool":  # the weight gradient's im2col refuses bool first
        kernel = "compute_columns3d" if nd == 3 else "slow_conv2d_cpu"
    else:
        kernel = f"slow_conv{3 if nd == 3 else 2}d_cpu_grad_{'input' if mask[0] else 'weight'}"
    raise NotImplementedError(f'"{kernel}" not implemented for \'{name}\'')


# Guards by schema name (in-place and out= variants share their op's arguments).
_GUARDS: dict[str, Callable[[_Bound, str, Any], None]] = {
    "embedding": _guard_embedding,
    "embedding_dense_backward": _guard_embedding_backward,
    "_embedding_bag": _guard_embedding_bag,
    "_embedding_bag_forward_only": _guard_embedding_bag,
    "_embedding_bag_backward": _guard_embedding_bag_backward,
    "_embedding_bag_per_sample_weights_backward": _guard_embedding_bag_backward,
    "index_select": _vector_index(_guard_dim_index(IndexError, plain="index out of range in self", dim1_kernel=True)),
    "gather": _guard_dim_index(RuntimeError),
    "scatter": _guard_dim_index(RuntimeError),
    "scatter_add": _guard_dim_index(RuntimeError),
    "scatter_reduce": _refusing_bool("scatter_gather_tensor_cpu_reduce_mean", ("mean",),
                                     _guard_dim_index(RuntimeError)),
    "index_add": _guard_dim_index(RuntimeError, outer_dims_only=True, empty_unchecked=True),
    # The CPU's index_reduce refuses negative indices too, with IndexError (a bad-input sweep).
    "index_reduce": _refusing_bool("index_func_", None, _source_shaped_like_a_scalar(
        _guard_dim_index(IndexError, plain="index out of range in self"))),
    "index_copy": _guard_dim_index(IndexError, prefix="index_copy_(): ", empty_slices_unchecked=True),
    # The CPU's trace has no bool kernel; lazy summed the diagonal (a reductions sweep).
    "trace": _refusing_bool("trace", None, lambda b, op, loc: None),
    "round": _guard_round,
    "convolution_backward": _guard_convolution_backward,
    "cumsum": _refusing_bool_result("cumsum_out_cpu"),
    "cumprod": _refusing_bool_result("cumprod_out_cpu"),
    "index_fill": _guard_dim_index(IndexError, negative_ok=True, empty_slices_unchecked=True),
    "index": _guard_indices_list,
    "index_put": _guard_indices_list,
    "_index_put_impl": _guard_indices_list,
    "_unsafe_index": _guard_indices_list,
    "_unsafe_index_put": _guard_indices_list,
    "take": _guard_take,
    "put": _guard_take,
    "max_unpool2d": _guard_max_unpool,
    "max_unpool3d": _guard_max_unpool,
    "nll_loss_forward": _guard_nll,
    "nll_loss_backward": _guard_nll,
    "nll_loss2d_forward": _guard_nll,
    "nll_loss2d_backward": _guard_nll,
    "multi_margin_loss": _guard_multi_margin,
    "multilabel_margin_loss_forward": _guard_multilabel_margin,
    "segment_reduce": _guard_segment_reduce,
    "binary_cross_entropy": _guard_binary_cross_entropy,
    "searchsorted": _guard_sorter,
    "multi_margin_loss_backward": _guard_multi_margin,
    "remainder": _guard_division,
    "fmod": _guard_division,
    "floor_divide": _guard_division,
    "div": _guard_division,
    "_linalg_check_errors": _guard_linalg_errors,
    **{f"special_{fn}": _refusing_half(f"{fn}_cpu") for fn in (
        "erfcx", "log_ndtr", "ndtri", "modified_bessel_i0", "modified_bessel_i1", "modified_bessel_k0",
        "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0",
        "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1")},
    **{f"special_{fn}": _refusing_half_polynomial(f"{fn}_cpu") for fn in (
        *(f"{s}chebyshev_polynomial_{k}" for s in ("", "shifted_") for k in "tuvw"),
        "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p")},
}


def _guard_for(func: Any) -> Callable[[_Bound, str, Any], None] | None:
    schema = getattr(func, "_schema", None)
    if schema is None:
        return None
    ns, _, name = schema.name.partition("::")
    if ns != "aten":
        return None
    guard = _GUARDS.get(name)
    if guard is None and name.endswith("_"):
        guard = _GUARDS.get(name[:-1])
    if guard is _guard_division and name.rstrip("_").endswith("div") and "mode" not in schema.overload_name:
        # div.Tensor / div.Scalar / div_.Tensor: true division. A guard for ``int_t.div_(mask)``
        # recorded a zero-divisor check, and the op then raised its cast error: the check
        # stayed and failed the next read (fuzz seed 2).
        return None
    return guard


def guarded(func: Any) -> bool:
    """Whether ``func`` needs a check before it is recorded (tensor._classify)."""
    return _enabled and _guard_for(func) is not None


def guard(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments to record ``func`` with: safe indices and divisors, checks recorded.

    Raises at once what PyTorch raises without looking at device data.
    """
    g = _guard_for(func) if _enabled else None
    if g is None:
        return args, kwargs
    b = _Bound(func, args, kwargs)
    g(b, str(func), source_location.current(3))
    return tuple(b.args), b.kwargs


@contextlib.contextmanager
def transaction() -> Iterator[None]:
    """Checks recorded inside are dropped when the body raises.

    The guard records its device-side check before the op is recorded, and the op may
    still raise PyTorch's error at the call (an ``out=`` tensor of the wrong dtype). Eager
    never reaches the failed op's data check then, so a check left behind would fail a
    later, innocent read (fuzz seed 102 program 1084).
    """
    acc = _state.acc
    storage = acc._lz_storage if acc is not None else None
    saved = (storage.value, storage.previous) if storage is not None else None
    memo, segment = dict(_state.memo), _state.memo_segment
    try:
        yield
    except BaseException:
        if storage is None:
            _state.acc = None
        elif _state.acc is acc:
            storage.value, storage.previous = saved
        _state.memo, _state.memo_segment = memo, segment
        raise


# -- reading the flags --------------------------------------------------------------------


def on_read(executor: Any, tensors: list[Any], reason: str) -> list[torch.Tensor]:
    """``executor.to_host_many`` with the checks: the executor's read hook."""
    _raise_if_poisoned(tensors)
    acc = _state.acc
    if acc is None or _state.reading:
        return executor._to_host_many(tensors, reason)
    value = acc._lz_storage.value
    pending = not value.node.is_leaf()
    read_acc = value is not _state.clean and (
        not pending or any(not t._lz_value().node.is_leaf() for t in tensors)
    )
    extra = [acc] if read_acc else []
    _state.reading = True
    try:
        hosts = executor._to_host_many(list(tensors) + extra, reason)
    except BaseException:
        forget_unexecuted_checks()
        raise
    finally:
        _state.reading = False
    if extra:
        _check_code(int(hosts[-1]), tensors)
    return hosts[: len(tensors)]


def forget_unexecuted_checks() -> None:
    """Back to the accumulator's last executed value, after an execution that raised.

    Its pending checks belong to ops of a graph that did not run. The accumulator is always
    live, so kept they joined every later read and failed it again: with ``LAZY_STRICT=1``
    one graph that failed to compile (an in-place sort refused on iree-cpu) failed every
    read after it, of any tensor. Ops still pending get their checks again only if recorded
    again; an op whose graph did not run has no data to check.
    """
    acc = _state.acc
    if acc is None:
        return
    storage = acc._lz_storage
    value = storage.value
    while not value.node.is_leaf():
        value = value.node.operands[0]  # ``_fold``'s masked_fill(acc, hit, site): the acc before it
    storage.value, storage.previous = value, None
    _state.memo, _state.memo_segment = {}, None


def verify() -> None:
    """Raise the first failed check of the executed steps (``wait_device_ops``)."""
    acc = _state.acc
    if acc is None or _state.reading or not acc._lz_storage.value.node.is_leaf():
        return
    if acc._lz_storage.value is _state.clean:
        return
    from .executor import executor

    _state.reading = True
    try:
        code = int(executor()._to_host_many([acc], "checks")[0])
    finally:
        _state.reading = False
    _check_code(code, [])


def _check_code(code: int, read: list[Any]) -> None:
    acc = _state.acc
    assert acc is not None
    value = acc._lz_storage.value
    if code == 0:
        _state.clean = value
        return
    site = _state.sites.get(code) or _Site(RuntimeError, "an index or divisor check failed", "?", None)
    metrics.counter_add("checks_failed")
    _poison(value, read, site)
    # A fresh accumulator: later, correct work is checked on its own.
    _state.acc = None
    _state.clean = None
    _state.memo.clear()
    raise _error(site)


def _error(site: _Site) -> Exception:
    # A new exception each time: one kept would hold a traceback, its frames, their tensors.
    error = site.exc(site.message)
    where = f" at {site.location}" if site.location else ""
    error.add_note(f"lazy_core: found by {site.op}{where} (a device-side check, reported at a read)")
    return error


# Storages whose values came from a failed step: storage -> (value then, site).
_poisoned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _poison(acc_value: Output, read: list[Any], site: _Site) -> None:
    """Make the values of the failed step fail when read or used again."""
    from .executor import executor

    batch = getattr(getattr(acc_value.node, "data", None), "batch", None)
    storages = {id(t._lz_storage): t._lz_storage for t in read}
    if batch is not None:
        for s in executor().live_storages():
            if getattr(getattr(s.value.node, "data", None), "batch", None) is batch:
                storages[id(s)] = s
    for s in storages.values():
        if s is getattr(_state.acc, "_lz_storage", None):
            continue
        failed = _failed_data(site)
        if failed is not None:
            s.value = Output(DeviceData(failed, s.value.meta, s.value.node.location))
        _poisoned[s] = (s.value, site)


def _failed_data(site: _Site) -> Any:
    """A device-data placeholder whose every use raises (the async runtime's
    failed-execution mechanism), or None where that is not available."""
    from .async_exec import PendingBatch
    from .executor import executor

    batch = PendingBatch(f"a step whose device-side check failed: {site.exc.__name__}: {site.message}",
                         1, executor()._worker)
    [data] = batch.placeholders()
    batch.fail(site.exc(site.message))
    batch.reported = True  # raised at the read already; a later use raises again, mark_step() does not
    return data


def _raise_if_poisoned(tensors: list[Any]) -> None:
    if not _poisoned:
        return
    for t in tensors:
        hit = _poisoned.get(t._lz_storage)
        if hit is not None and t._lz_storage.value is hit[0]:
            raise _error(hit[1])


def _settle() -> None:
    """Before a backend change: raise a failed check, else drop the accumulator.

    A zero accumulator carries nothing; moved to the new backend it would be
    a new value, not the one read as clean, and the next
    ``wait_device_ops()`` would read it from the device again.
    """
    verify()
    acc = _state.acc
    if acc is not None and acc._lz_storage.value.node.is_leaf() and acc._lz_storage.value is _state.clean:
        _state.acc = None
        _state.clean = None
        _state.memo.clear()


def install() -> None:
    """Make host reads check the flags (called once by ``lazy_core``)."""
    from .executor import executor

    executor().read_hook = on_read
    executor().failed_step_hooks.append(forget_unexecuted_checks)
    executor().backend_change_hooks.append(_settle)


def reset() -> None:
    """Forget every check (tests; a backend change)."""
    global _state
    _state = _State()
    _poisoned.clear()
