"""The lazy IR: one Node per recorded ATen op.

A Node holds the op, its arguments (tensor operands appear as ``Output``
objects inside ``args``/``kwargs``, everything else as constants), the
shape/dtype of each result, the user's source location and a static id: an
integer naming the node's exact signature (op, constants with their types,
operand types, result types), one per distinct signature (the tracer's
shape cache interns them with ``new_static_id``). Ids are exact, never
hashes: the graph key is built from them and operand positions, so two
graphs have equal keys only when they are the same computation (``hash(-1) == hash(-2)`` in CPython, and ``1 == 1.0 ==
True``; neither may make a cache reuse the wrong graph).

Leaves are ``DeviceData`` (a buffer already on the backend device) and
``ScalarParam`` (a Python number that becomes a computation argument, so a
learning rate that changes every step does not change the graph).
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import torch

from .source_location import SourceLocation


class TensorMeta(NamedTuple):
    """Shape, dtype and strides of one value, as the meta kernel reported it.

    A NamedTuple rather than a dataclass: metas are hashed on every traced op
    (they are part of the shape-cache key), and tuple
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

    __slots__ = ("op", "args", "kwargs", "operands", "metas", "location", "sid", "__weakref__")

    def __init__(
        self,
        op: Any,
        args: tuple,
        kwargs: dict,
        operands: tuple[Output, ...],
        metas: tuple[TensorMeta | None, ...],
        location: SourceLocation | None,
        sid: int,
    ) -> None:
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.operands = operands
        self.metas = metas
        self.location = location
        # The exact static signature's id: the op, its type-tagged constants,
        # its operands' metas and its result metas (interned by the tracer's
        # shape cache). The graph key pairs it with operand positions
        # (lazy_core.graph).
        self.sid = sid

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

    __slots__ = ("data", "pinned", "host")

    def __init__(self, data: Any, meta: TensorMeta, location: SourceLocation | None = None):
        #: Held by something other than a storage (a view's materialized
        #: value): its buffer is never donated (lazy_core.donation).
        self.pinned = False
        #: A CPU copy of the value when it is small and known without a device
        #: read (lazy_core.host_eval), else None.
        self.host: torch.Tensor | None = None
        self.op = "device_data"
        self.args = ()
        self.kwargs = {}
        self.operands = ()
        self.metas = (meta,)
        self.location = location
        self.data = data
        self.sid = _device_data_id(meta)

    def is_leaf(self) -> bool:
        return True


class ScalarParam(Node):
    """A Python scalar lifted into a computation argument (a 0-d tensor).

    Its value is not part of its identity: only its type is. 0 and 1 are never
    lifted (the compiler should fold them), see ``lazy_core.op_schema``.
    """

    __slots__ = ("value",)

    def __init__(self, value: int | float, location: SourceLocation | None = None):
        self.op = "scalar_param"
        self.args = ()
        self.kwargs = {}
        self.operands = ()
        # Shared metas and ids: one of these is made per scalar per traced op.
        self.metas, self.sid = _FLOAT_PARAM if isinstance(value, float) else _INT_PARAM
        self.location = location
        self.value = value

    def is_leaf(self) -> bool:
        return True


_ids = itertools.count(1)


def new_static_id() -> int:
    """A fresh static id, never handed out before in this process.

    Ids are never reused (a table that forgets a signature gives it a new id
    next time), so a stale id in some cache can only miss, never match a
    different signature.
    """
    return next(_ids)


_device_data_ids: dict[TensorMeta, int] = {}


def _device_data_id(meta: TensorMeta) -> int:
    """The static id of a device-data leaf of type ``meta`` (its full meta:
    shape, dtype and strides, exactly as the lowering sees it)."""
    sid = _device_data_ids.get(meta)
    if sid is None:
        if len(_device_data_ids) >= 65536:
            _device_data_ids.clear()
        sid = _device_data_ids[meta] = new_static_id()
    return sid


def _param_kind(dtype: torch.dtype) -> tuple[tuple[TensorMeta], int]:
    return (TensorMeta((), dtype, ()),), new_static_id()


_FLOAT_PARAM = _param_kind(torch.float64)
_INT_PARAM = _param_kind(torch.int64)


class Output:
    """Result ``index`` of ``node``: what a lazy tensor's value refers to."""

    __slots__ = ("node", "index", "meta")

    def __init__(self, node: Node, index: int = 0) -> None:
        self.node = node
        self.index = index
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
