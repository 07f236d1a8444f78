"""The lazy IR: one Node per recorded ATen op.

A Node holds the op, its arguments (tensor operands appear as ``Output``
objects inside ``args``/``kwargs``, everything else as constants), the
shape/dtype of each result, the user's source location and a structural hash
computed once at construction. Hashing at construction is what makes the
graph key cheap at ``mark_step()`` time: the executor combines node hashes
instead of re-walking arguments.

Leaves are ``DeviceData`` (a buffer already on the backend device) and
``ScalarParam`` (a Python number that becomes a computation argument, so a
learning rate that changes every step does not change the graph).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from .source_location import SourceLocation


class TensorMeta(NamedTuple):
    """Shape, dtype and strides of one value, as the meta kernel reported it.

    A NamedTuple rather than a dataclass: metas are hashed on every traced op
    (they are part of the shape-cache key and of node hashes), and tuple
    hashing and comparison run in C.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype
    stride: tuple[int, ...]

    @staticmethod
    def of(t: torch.Tensor) -> TensorMeta:
        return TensorMeta(tuple(t.shape), t.dtype, tuple(t.stride()))

    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def nbytes(self) -> int:
        return self.numel() * _itemsize(self.dtype)


def _itemsize(dtype: torch.dtype) -> int:
    return dtype.itemsize


class Node:
    """One recorded op. Immutable once made; shared freely between graphs."""

    __slots__ = ("op", "args", "kwargs", "operands", "metas", "location", "hash", "__weakref__")

    def __init__(
        self,
        op: Any,
        args: tuple,
        kwargs: dict,
        operands: tuple[Output, ...],
        metas: tuple[TensorMeta | None, ...],
        location: SourceLocation | None,
        static_hash: int,
    ) -> None:
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.operands = operands
        self.metas = metas
        self.location = location
        # The structural hash: ``static_hash`` covers the op, its constants
        # (operand slots abstracted) and result metas, and is computed once per
        # distinct call signature by the tracer's shape cache; operand hashes
        # are added here. Equal hashes mean "same computation" up to which
        # device data feed it; the graph key adds operand identity.
        self.hash = hash((static_hash, *[o.hash for o in operands]))

    @property
    def name(self) -> str:
        return op_name(self.op)

    def is_leaf(self) -> bool:
        return False

    def __repr__(self) -> str:
        loc = f" @ {self.location}" if self.location else ""
        return f"<Node {self.name} -> {[m.shape if m else None for m in self.metas]}{loc}>"


class DeviceData(Node):
    """A leaf holding a backend buffer: an input of a computation."""

    __slots__ = ("data", "pinned")

    def __init__(self, data: Any, meta: TensorMeta, location: SourceLocation | None = None):
        #: Held by something other than a storage (a view's materialized
        #: value): its buffer is never donated (lazy_core.donation).
        self.pinned = False
        self.op = "device_data"
        self.args = ()
        self.kwargs = {}
        self.operands = ()
        self.metas = (meta,)
        self.location = location
        self.data = data
        self.hash = hash(("device_data", meta.shape, meta.dtype))

    def is_leaf(self) -> bool:
        return True


class ScalarParam(Node):
    """A Python scalar lifted into a computation argument (a 0-d tensor).

    Its value is not part of the hash: only its type is. 0 and 1 are never
    lifted (the compiler should fold them), see ``lazy_core.op_schema``.
    """

    __slots__ = ("value",)

    def __init__(self, value: int | float, location: SourceLocation | None = None):
        self.op = "scalar_param"
        self.args = ()
        self.kwargs = {}
        self.operands = ()
        # Shared metas and hashes: one of these is made per scalar per traced op.
        self.metas, self.hash = _FLOAT_PARAM if isinstance(value, float) else _INT_PARAM
        self.location = location
        self.value = value

    def is_leaf(self) -> bool:
        return True


def _param_kind(dtype: torch.dtype) -> tuple[tuple[TensorMeta], int]:
    return (TensorMeta((), dtype, ()),), hash(("scalar_param", dtype))


_FLOAT_PARAM = _param_kind(torch.float64)
_INT_PARAM = _param_kind(torch.int64)


class Output:
    """Result ``index`` of ``node``: what a lazy tensor's value refers to."""

    __slots__ = ("node", "index", "hash", "meta")

    def __init__(self, node: Node, index: int = 0) -> None:
        self.node = node
        self.index = index
        self.hash = hash((node.hash, index))
        #: Shape/dtype/strides of this value (read on every traced op, so stored).
        self.meta: TensorMeta = node.metas[index]  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Output({self.node.name}, {self.index})"


def op_name(op: Any) -> str:
    """``aten.add.Tensor`` style name of an op (or the leaf kind)."""
    if isinstance(op, str):
        return op
    name = getattr(op, "__name__", None) or str(op)
    return f"{op.namespace}.{name}" if hasattr(op, "namespace") else name
