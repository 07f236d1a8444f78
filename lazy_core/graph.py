"""A pending computation: the post-order of nodes between leaves and outputs.

Built by the executor at a barrier. The post-order is deterministic (operands
visited left to right), leaves are numbered in first-visit order, and the
graph key pairs each node's static id (an exact signature id, assigned when
the node was made) with its operands' positions, so two steps that trace the
same program get the same key and hit the computation cache, while ``a + b``
and ``a + a``, or ``x[:, -1]`` and ``x[:, -2]``, get different keys. Key
equality is structural equality; the key's hash only picks a bucket.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import torch

from .ir import DeviceData, Node, Output, ScalarParam, TensorMeta


class GraphKey:
    """A graph's in-process cache key: its parts hashed once.

    The parts are a tuple with an entry per node, ``(static id,)`` for a leaf
    and ``(static id, operand positions)`` for an op; static ids are exact
    (lazy_core.ir), so equal parts mean the same computation. Hashing them
    costs ~0.1 ms for a 1,000-node training step, and the executor's cache,
    the diagnostics and the step guard each look the key up at every barrier.
    """

    __slots__ = ("parts", "_hash")

    def __init__(self, parts: tuple) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GraphKey) and self._hash == other._hash and self.parts == other.parts

    def __repr__(self) -> str:
        return f"GraphKey({self._hash:#x})"


@dataclass(frozen=True)
class ArgumentLayout:
    """How a graph's leaves become a computation's arguments, for every backend.

    Device data are arguments in ``graph.inputs`` order. Scalar parameters
    are not one 0-d tensor each: all float ones travel in one 1-D float64
    tensor and all int ones in one 1-D int64 tensor (each only if present),
    as the last arguments, and the computation reads element ``i`` back. A
    step with AdamW has hundreds of scalars (every bias correction and
    learning rate): one tensor each cost a host tensor, a device upload and
    an argument per scalar every step, and hit runtime limits on argument
    counts. The layout follows from the graph's structure alone, so graphs
    with the same key share it, and a new value never recompiles.
    """

    #: Indices into ``graph.inputs`` of the device-data arguments, in order.
    device_data: tuple[int, ...]
    #: Indices into ``graph.inputs`` of float scalars, in their pack's order.
    float_scalars: tuple[int, ...]
    #: Indices into ``graph.inputs`` of int scalars, in their pack's order.
    int_scalars: tuple[int, ...]

    def packs(self) -> list[tuple[torch.dtype, tuple[int, ...]]]:
        """``(dtype, input indices)`` of each scalar pack present, in argument order."""
        out = []
        if self.float_scalars:
            out.append((torch.float64, self.float_scalars))
        if self.int_scalars:
            out.append((torch.int64, self.int_scalars))
        return out

    def arguments(self, inputs: list[Node]) -> tuple[list[Any], list[tuple[list[int | float], torch.dtype]]]:
        """The device data (``BackendData`` or placeholders) and the scalar packs'
        ``(values, dtype)`` of a graph with this layout whose leaves are ``inputs``."""
        data = [inputs[i].data for i in self.device_data]  # type: ignore[attr-defined]
        packs = [([inputs[i].value for i in idx], dtype) for dtype, idx in self.packs()]  # type: ignore[attr-defined]
        return data, packs

    @staticmethod
    def of(inputs: list[Node]) -> ArgumentLayout:
        data, floats, ints = [], [], []
        for i, leaf in enumerate(inputs):
            if isinstance(leaf, ScalarParam):
                (floats if leaf.metas[0].dtype.is_floating_point else ints).append(i)
            else:
                data.append(i)
        return ArgumentLayout(tuple(data), tuple(floats), tuple(ints))


@dataclass
class LazyGraph:
    """What a backend's ``lower`` receives."""

    #: Non-leaf nodes in execution (post-)order.
    nodes: list[Node]
    #: Leaves in first-visit order: DeviceData and ScalarParam nodes (the
    #: computation's arguments are laid out by ``argument_layout``).
    inputs: list[Node]
    #: Graph results in order.
    outputs: list[Output]
    #: Hashable cache key (process-local).
    key: GraphKey
    #: Position of each node (leaves and ops) in the combined order, by id().
    positions: dict[int, int] = field(repr=False, default_factory=dict)
    _stable: str | None = field(default=None, repr=False)
    _family: str | None = field(default=None, repr=False)
    _layout: ArgumentLayout | None = field(default=None, repr=False)

    @property
    def argument_layout(self) -> ArgumentLayout:
        """Which leaves are which arguments (device data, then scalar packs)."""
        if self._layout is None:
            self._layout = ArgumentLayout.of(self.inputs)
        return self._layout

    @property
    def stable_hash(self) -> str:
        """A hash that is the same in every process: it names the MLIR function
        and keys the backends' on-disk caches, so it must cover everything that
        decides the lowered code: each leaf's kind and type (a scalar
        parameter's type, never its value), each op's name, constants, result
        types and operand wiring (operands are written where they appear, as
        ``%position#index``), and the output list. Locations are left out:
        an edited script whose lines moved keeps its compiled code.

        Computed on in-memory cache misses only (a cold or warm compile).
        """
        if self._stable is None:
            self._stable = self._digest(_stable_value, _meta_text)
        return self._stable

    def _digest(self, value: Any, meta: Any) -> str:
        """A process-independent hash of the graph written with ``value`` for
        constants (and operand references) and ``meta`` for value types."""
        pos = self.positions
        parts = [f"in {node.op} {meta(node.metas[0])};" for node in self.inputs]
        for node in self.nodes:
            parts.append(f"{node.name}({value(node.args, pos)}|{value(sorted(node.kwargs.items()), pos)})->"
                         f"{','.join(meta(m) for m in node.metas)};")
        parts.append("out " + ",".join(f"{pos[id(o.node)]}#{o.index}" for o in self.outputs))
        return hashlib.sha1("".join(parts).encode()).hexdigest()[:16]

    @property
    def family_key(self) -> str:
        """``stable_hash`` with every size left out: each integer constant,
        each shape and stride reduced to its rank. Graphs of one family are
        the same program at other sizes (or with other integer constants);
        the executor compiles a family member with dynamic dimensions
        (``lazy_core.dynamic_shapes``) once a second one appears. Process-
        independent; computed on in-memory cache misses only."""
        if self._family is None:
            self._family = self._digest(_family_value, _family_meta)
        return self._family

    @property
    def locations_hash(self) -> str:
        """A process-independent hash of every node's source location (file,
        line, function), which ``stable_hash`` leaves out. A cache that hands
        back a computation's MLIR text adds it to its key, so the ``loc(...)``
        that dumps and diagnostics show are this run's lines, never stale."""
        parts = []
        for node in (*self.inputs, *self.nodes):
            loc = node.location
            parts.append("-" if loc is None else f"{loc.filename}:{loc.line}:{loc.function}")
        return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        return f"lazy_graph_{self.stable_hash}"

    def scalar_params(self) -> list[ScalarParam]:
        return [n for n in self.inputs if isinstance(n, ScalarParam)]

    def device_data(self) -> list[DeviceData]:
        return [n for n in self.inputs if isinstance(n, DeviceData)]


_meta_texts: dict[TensorMeta, str] = {}


def _meta_text(meta: TensorMeta | None) -> str:
    """``shape dtype stride`` (memoized: graphs repeat a few types, and a
    dataclass repr per value was most of the hash's cost)."""
    if meta is None:
        return "-"
    text = _meta_texts.get(meta)
    if text is None:
        text = f"{meta.shape}{meta.dtype}{meta.stride}"
        if len(_meta_texts) < 65536:
            _meta_texts[meta] = text
    return text


def _stable_value(x: object, pos: dict[int, int]) -> str:
    """A constant (or operand reference) as process-independent text.

    Distinct constants must give distinct text: repr() keeps 1, 1.0 and True
    apart, and -0.0 from 0.0; lists and tuples are written differently.
    """
    if isinstance(x, Output):
        return f"%{pos[id(x.node)]}#{x.index}"
    if isinstance(x, list):
        return "[" + ",".join(_stable_value(v, pos) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + ",".join(_stable_value(v, pos) for v in x) + ")"
    if isinstance(x, float) and x != x:
        # repr() writes every NaN as "nan"; hex() keeps its sign.
        return x.hex()
    if isinstance(x, torch.Tensor):
        # repr() elides the middle of large tensors: hash every byte instead.
        flat = x.detach().cpu().contiguous().reshape(-1)
        digest = hashlib.sha1(flat.view(torch.uint8).numpy().tobytes()).hexdigest() if flat.numel() else "0"
        return f"tensor({x.dtype},{tuple(x.shape)},{digest})"
    return repr(x)


def _family_meta(meta: TensorMeta | None) -> str:
    """A value's type without its sizes: dtype and rank."""
    return "-" if meta is None else f"{meta.dtype}/{len(meta.shape)}"


def _family_value(x: object, pos: dict[int, int]) -> str:
    """``_stable_value`` with integers (not bools) written as ``i``."""
    if isinstance(x, int) and not isinstance(x, bool):
        return "i"
    if isinstance(x, list):
        return "[" + ",".join(_family_value(v, pos) for v in x) + "]"
    if isinstance(x, tuple):
        return "(" + ",".join(_family_value(v, pos) for v in x) + ")"
    return _stable_value(x, pos)


def build_graph(outputs: list[Output]) -> LazyGraph:
    """Post-order the nodes reachable from ``outputs`` (iteratively: graphs are deep).

    Runs at every barrier, cache hit or not, so it is written for speed: one
    explicit stack of (node, next operand index), positions keyed by id().
    """
    positions: dict[int, int] = {}
    nodes: list[Node] = []
    inputs: list[Node] = []
    key_parts: list[tuple] = []
    for out in outputs:
        root = out.node
        if id(root) in positions:
            continue
        stack: list[tuple[Node, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            operands = node.operands
            n = len(operands)
            # Advance to the next operand not yet placed.
            while i < n and id(operands[i].node) in positions:
                i += 1
            if i < n:
                stack[-1] = (node, i + 1)
                stack.append((operands[i].node, 0))
                continue
            stack.pop()
            if id(node) in positions:
                continue
            positions[id(node)] = len(positions)
            if n == 0:
                # Leaves (DeviceData, ScalarParam) are the only operand-free nodes
                # that can be pending inputs; operand-free ops (factories) are not.
                if node.is_leaf():
                    inputs.append(node)
                    key_parts.append((node.sid,))
                    continue
                nodes.append(node)
                key_parts.append((node.sid, ()))
            else:
                nodes.append(node)
                key_parts.append((node.sid, tuple([(positions[id(o.node)], o.index) for o in operands])))
    out_key = tuple([(positions[id(o.node)], o.index) for o in outputs])
    return LazyGraph(nodes, inputs, list(outputs), GraphKey((tuple(key_parts), out_key)), positions)
