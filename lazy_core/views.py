"""Storages, view chains and the inverse view ops that make in-place ops functional.

A ``Storage`` is the functional stand-in for a buffer: it holds the current
IR value of a base tensor. A view is a base storage plus a chain of view
steps; reading it applies the steps to the storage's current value, so a
write to the base is seen by every view. Writing to a view runs the chain
backwards with each step's inverse (``permute`` by the inverse permutation,
``slice`` by ``slice_scatter``, ...) and stores the new base value. This is
the functional substitution the LazyTensor paper describes, and what
PyTorch's functionalization does in C++.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .ir import Output

aten = torch.ops.aten

# record(op, args, kwargs) -> Output; installed by lazy_core.tensor.
Recorder = Callable[[Any, tuple, dict], Output]


class Storage:
    """The current value of a base tensor. Live storages with pending values
    are the outputs of the next graph."""

    __slots__ = ("value", "meta", "device", "seq", "previous", "__weakref__")

    def __init__(self, value: Output, device: int = 0) -> None:
        self.value = value
        #: The storage's layout (shape, dtype, strides), fixed at allocation as
        #: eager's is. ``value.meta`` is not it: an in-place write
        #: (``x.copy_(y.t())``) makes the value another op's result, whose meta
        #: kernel laid it out otherwise, while ``x`` keeps its strides. What
        #: addresses the storage (``as_strided``, overlap checks, storage
        #: offsets) reads this.
        self.meta = value.meta
        self.device = device
        #: Returns the device-data node this storage held before its pending
        #: in-place updates (its last good value): buffer donation pairs it
        #: with the new value first, and a failed execution rolls back to it.
        #: Held until the execution of the pending value, which clears it.
        self.previous: Callable[[], object] | None = None
        #: Creation order: graph outputs are ordered by it, so the same program
        #: always produces the same output order (and the same graph key).
        self.seq = -1


_RESHAPES = {
    "view", "_unsafe_view", "reshape", "_reshape_alias", "unsqueeze", "squeeze",
    "view_as", "flatten", "unflatten", "expand", "expand_as", "view_copy",
}
_IDENTITY = {"alias", "detach", "lift_fresh", "lift", "_alias"}

# id(op) -> its base name, for ViewStep.kind. OpOverloads live as long as the process (the
# torch.ops namespace holds them), so their ids stay theirs.
_kinds: dict[int, str] = {}


def _viewable(record: Recorder, value: Output, shape: tuple[int, ...]) -> Output:
    """``value``, or a contiguous copy of it where its strides cannot be viewed as ``shape``.

    Inverting a reshape step views the value written below it; after the inverse of a
    ``transpose``/``permute`` step above it that value is laid out transposed, and ``view``
    refuses strides that do not merge (a write through ``x.view(2, 4, 8, 5).transpose(2, 1)``,
    as Longformer's backward makes, raised "view size is not compatible"). Values are
    unchanged: the view of a value is its row-major reshape.
    """
    meta = value.meta
    want, step = [], 1
    for d in reversed(meta.shape):
        want.append(step)
        step *= max(d, 1)
    if all(a == b for a, b, n in zip(meta.stride, reversed(want), meta.shape, strict=True) if n > 1):
        return value
    try:
        torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device="meta").view(shape)
    except RuntimeError:
        return record(aten.clone.default, (value,), {"memory_format": torch.contiguous_format})
    return value


class ViewStep:
    """One view op applied to the value below it: ``op(value, *rest)``."""

    __slots__ = ("op", "rest", "kwargs", "in_shape", "kind")

    def __init__(self, op: Any, rest: tuple, kwargs: dict, in_shape: tuple[int, ...]) -> None:
        self.op = op
        self.rest = rest
        self.kwargs = kwargs
        self.in_shape = in_shape
        #: The op's base name (``view``, ``slice``...), read on every write through the view.
        kind = _kinds.get(id(op))
        if kind is None:
            kind = _kinds[id(op)] = op._schema.name.split("::")[-1]
        self.kind = kind

    def apply(self, record: Recorder, value: Output) -> Output:
        kind = self.kind
        if kind in _IDENTITY:
            return value
        if kind == "slice":
            value = _past_disjoint_scatters(value, self.op, self.rest, self.kwargs)
        return record(self.op, (value, *self.rest), self.kwargs)

    def invert(self, record: Recorder, below: Output, updated: Output) -> Output:
        """The new value below this step after the view's value became ``updated``."""
        kind = self.kind
        args = bind_after_self(self.op, self.rest, self.kwargs)
        if kind in _IDENTITY:
            return updated
        if self.op is aten.view.dtype:
            # The same bits read as the base's dtype (a value cast of them wrote
            # ``1067319296.0`` into a float base updated through ``view(torch.int32)``).
            return record(aten.view.dtype, (updated, below.meta.dtype), {})
        if kind in _RESHAPES:
            if kind.startswith("expand") and _numel(self.in_shape) != _numel(updated.meta.shape):
                # LazyTensor._lz_assign writes through a broadcast with write_by_index.
                raise AssertionError("an expand step is inverted by write_by_index")
            return record(aten.view.default, (_viewable(record, updated, self.in_shape), list(self.in_shape)), {})
        if kind == "permute":
            dims = [d % len(self.in_shape) for d in args["dims"]]
            inverse = [0] * len(dims)
            for i, d in enumerate(dims):
                inverse[d] = i
            return record(aten.permute.default, (updated, inverse), {})
        if kind == "t":
            return record(aten.t.default, (updated,), {})
        if kind == "view_as_real":
            return record(aten.view_as_complex.default, (updated,), {})
        if kind == "view_as_complex":
            return record(aten.view_as_real.default, (updated,), {})
        if kind in ("real", "imag"):
            # (The backends that record complex views: ``eager``; others compute them on the host.)
            other = record(aten.imag.default if kind == "real" else aten.real.default, (below,), {})
            parts = (updated, other) if kind == "real" else (other, updated)
            return record(aten.complex.default, parts, {})
        if kind == "transpose":
            return record(aten.transpose.int, (updated, args["dim0"], args["dim1"]), {})
        if kind == "slice":
            return scatter_slice(record, below, updated, args.get("dim", 0), args.get("start"), args.get("end"),
                                 args.get("step", 1))
        if kind == "select":
            return record(aten.select_scatter.default, (below, updated, args["dim"], args["index"]), {})
        if kind == "diagonal":
            return record(
                aten.diagonal_scatter.default,
                (below, updated, args.get("offset", 0), args.get("dim1", 0), args.get("dim2", 1)),
                {},
            )
        if kind == "as_strided":
            return record(
                aten.as_strided_scatter.default,
                (below, updated, args["size"], args["stride"], args.get("storage_offset")),
                {},
            )
        raise NotImplementedError(
            f"in-place update through the view op {self.op} is not supported on lazy tensors; "
            "clone the view, update it, and copy it back"
        )


# Note [Fills into disjoint slices are recorded in offset order]
# DDP's reducer (find_unused_parameters=True) zero-fills the bucket slots of the parameters
# the forward did not use, in the order it finds them in a C++ ``unordered_map`` keyed by
# the parameters' AccumulateGrad node addresses (reducer.cpp, search_unused_parameters):
# the order differs between processes. Recorded in call order, the two ranks' graphs were
# the same writes nested the other way round: other stable hashes (the graph sequences
# compared by test_distributed, and LAZY_DIST_CHECK's pending-graph hash at the bucket's
# all-reduce, a false "ranks diverged"). Fills into disjoint ranges of one dimension
# commute, so they are recorded in order of their offsets whatever the call order:
#   * reading a slice of a ``slice_scatter`` whose range it does not meet reads the
#     scatter's input instead (the same elements), so a fill's source never names the
#     write recorded before it;
#   * a fill scattered into a range below that of the fill scattered just before it goes
#     under it: ``ss(ss(b, f2, r2), f1, r1)`` for r1 after r2, not ``ss(ss(b, f1, r1), f2, r2)``.
# Other writes keep their order (a gradient's write depends on the graph being traced).

_SHAPE_ONLY = {aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.slice.Tensor,
               aten.alias.default}
_FILLS = (aten.zero.default, aten.fill.Scalar)
#: Disjoint writes a slice read looks past (Note [Fills into disjoint slices ...]).
_MAX_PAST_SCATTERS = 8


def _int_range(size: int, start: Any, end: Any, step: Any) -> tuple[int, int] | None:
    """``[start, end)`` of a unit-step slice of a dimension of ``size``, clamped as ``slice`` does."""
    if step not in (1, None):
        return None
    start = 0 if start is None else start
    end = size if end is None else end
    if type(start) is not int or type(end) is not int:
        return None
    if start < 0:
        start += size
    if end < 0:
        end += size
    start = min(max(start, 0), size)
    end = min(max(end, start), size)
    return start, end


def _scatter_range(node: Any) -> tuple[Output, Output, int, tuple[int, int]] | None:
    """(input, source, dim, range) of a unit-step ``slice_scatter`` node, else None."""
    if getattr(node, "op", None) is not aten.slice_scatter.default:
        return None
    args = tuple(node.args) + (None,) * (6 - len(node.args))
    base, src, dim, start, end, step = args[:6]
    dim = node.kwargs.get("dim", 0 if dim is None else dim)
    if not isinstance(base, Output) or not isinstance(src, Output) or type(dim) is not int:
        return None
    shape = base.meta.shape
    if not shape:
        return None
    dim %= len(shape)
    rng = _int_range(shape[dim], node.kwargs.get("start", start), node.kwargs.get("end", end),
                     node.kwargs.get("step", 1 if step is None else step))
    return (base, src, dim, rng) if rng is not None else None


def _past_disjoint_scatters(value: Output, op: Any, rest: tuple, kwargs: dict) -> Output:
    """The value a slice view reads from: below every ``slice_scatter`` whose range it misses."""
    if op is not aten.slice.Tensor:
        return value
    args = bind_after_self(op, rest, kwargs)
    dim = args.get("dim", 0)
    shape = value.meta.shape
    if type(dim) is not int or not shape:
        return value
    dim %= len(shape)
    mine = _int_range(shape[dim], args.get("start"), args.get("end"), args.get("step", 1))
    if mine is None or mine[0] == mine[1]:
        return value
    # A bounded walk: each read of a slot of a buffer written slot by slot (DDP's buckets) would
    # otherwise walk past every earlier write, quadratic in the slots (400 slots: 5x the tracing
    # time). The fills this is for are written one after another.
    for _ in range(_MAX_PAST_SCATTERS):
        found = _scatter_range(value.node)
        if found is None:
            return value
        base, _, sdim, (start, end) = found
        if sdim != dim or not (mine[1] <= start or end <= mine[0]):
            return value
        value = base
    return value


def _fill_not_reading(value: Output, node: Any) -> bool:
    """Whether ``value`` is a fill (``zero``/``fill.Scalar``) through shape-only ops whose
    operand chain does not name ``node``: a value that does not depend on ``node``."""
    n = value.node
    seen_fill = False
    for _ in range(64):
        if n is node:
            return False
        if n.is_leaf() or not n.operands:
            return seen_fill
        if n.op in _FILLS:
            # The filled tensor (read for its shape only), then a lifted fill value.
            if any(not o.node.is_leaf() for o in n.operands[1:]):
                return False
            seen_fill = True
        elif n.op not in _SHAPE_ONLY or len(n.operands) != 1:
            return False
        n = n.operands[0].node
    return False


def scatter_slice(record: Recorder, below: Output, updated: Output, dim: Any, start: Any, end: Any,
                  step: Any) -> Output:
    """``slice_scatter(below, updated, ...)``, fills in offset order
    (Note [Fills into disjoint slices are recorded in offset order])."""
    shape = below.meta.shape
    if type(dim) is int and shape:
        d = dim % len(shape)
        mine = _int_range(shape[d], start, end, step)
        found = _scatter_range(below.node)
        if mine is not None and found is not None and mine[0] < mine[1]:
            base, src, sdim, (s2, e2) = found
            if (sdim == d and s2 < e2 and mine[1] <= s2 and _fill_not_reading(updated, below.node)
                    and _fill_not_reading(src, None)):
                inner = scatter_slice(record, base, updated, dim, start, end, step)
                return record(aten.slice_scatter.default, (inner, src, sdim, s2, e2, 1), {})
    return record(aten.slice_scatter.default, (below, updated, dim, start, end, step), {})


def broadcasts(view: tuple[ViewStep, ...], shape: tuple[int, ...]) -> bool:
    """Whether a view chain (ending in ``shape``) may repeat elements of its base: an ``expand``
    to more elements, or an ``as_strided`` whose elements may share addresses. Writing through
    such a chain step by step loses which copy was written (``x.as_strided((2, 1), (0, 1))[0]
    .fill_(v)`` writes one address; inverting the ``as_strided`` scatters both rows there)."""
    for step in view:  # the common case: neither kind in the chain
        if step.kind == "as_strided" or step.kind.startswith("expand"):
            break
    else:
        return False
    outs = [step.in_shape for step in view[1:]] + [shape]
    return any((step.kind.startswith("expand") and _numel(out) != _numel(step.in_shape))
               or (step.kind == "as_strided" and not _distinct_addresses(out, step.rest[1]))
               for step, out in zip(view, outs, strict=True))


def _distinct_addresses(shape: tuple[int, ...], stride: Any) -> bool:
    """Whether every element of a (size, stride) layout has its own address: a sufficient test
    (each stride, in increasing order, steps over everything the smaller ones reach)."""
    reach = 0
    for n, st in sorted(((n, abs(st)) for n, st in zip(shape, stride, strict=True) if n > 1), key=lambda p: p[1]):
        if st <= reach:
            return False
        reach += (n - 1) * st
    return True


def has_internal_overlap(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """ATen's ``has_internal_overlap`` answer YES: a dimension of stride 0 and size > 1.
    Eager refuses to write to such a tensor; other layouts it lets pass."""
    return any(st == 0 and sz > 1 for sz, st in zip(shape, stride, strict=True))


INTERNAL_OVERLAP = (
    "unsupported operation: more than one element of the written-to tensor refers to a single "
    "memory location. Please clone() the tensor before performing the operation."
)


def write_by_index(
    record: Recorder, view: tuple[ViewStep, ...], base: Output, indices: Output, new: Output
) -> Output:
    """The base after ``new`` is written through ``view``, for chains that broadcast.

    Inverting an ``expand`` step by step cannot know which copy of a repeated element the
    write went through (``x.expand(2, n)[1].add_(1)`` writes row 1). Eager writes memory, so
    the same question is answered here with memory addresses: ``indices`` holds
    ``arange(numel)`` in the base's shape; applying the view chain to it gives, for each
    element of the written view, the base element it is. A scatter of ``new`` at those
    positions is the new base. The caller has refused views with internal overlap (eager's
    error), so the positions are distinct and the scatter is deterministic.
    """
    for step in view:
        indices = step.apply(record, indices)
    flat = [_numel(new.meta.shape)]
    base_shape = list(base.meta.shape)
    scattered = record(
        aten.index_put.default,
        (
            record(aten.reshape.default, (base, [_numel(base.meta.shape)]), {}),
            [record(aten.reshape.default, (indices, flat), {})],
            record(aten.reshape.default, (new, flat), {}),
        ),
        {},
    )
    return record(aten.reshape.default, (scattered, base_shape), {})


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def bind_after_self(op: Any, rest: tuple, kwargs: dict) -> dict[str, Any]:
    """Name the arguments after ``self`` (defaults filled in)."""
    out: dict[str, Any] = {}
    schema_args = op._schema.arguments[1:]
    for i, a in enumerate(schema_args):
        if i < len(rest):
            out[a.name] = rest[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


def split_views(op: Any, rest: tuple, kwargs: dict, in_shape: tuple[int, ...]) -> list[ViewStep] | None:
    """Multi-output views (split, unbind, ...) as one single-output step per result."""
    kind = op._schema.name.split("::")[-1]
    args = bind_after_self(op, rest, kwargs)
    dim = args.get("dim", 0) % max(len(in_shape), 1)
    size = in_shape[dim] if in_shape else 0
    if kind in ("split", "unsafe_split"):
        step = args["split_size"]
        bounds = [(s, min(s + step, size)) for s in range(0, size, step)] if step > 0 else [(0, 0)]
        if not bounds:
            bounds = [(0, 0)]
    elif kind in ("split_with_sizes", "unsafe_split_with_sizes"):
        bounds, start = [], 0
        for s in args["split_sizes"]:
            bounds.append((start, start + s))
            start += s
    elif kind == "unbind":
        return [ViewStep(aten.select.int, (dim, i), {}, in_shape) for i in range(size)]
    else:
        return None
    return [ViewStep(aten.slice.Tensor, (dim, a, b, 1), {}, in_shape) for a, b in bounds]
