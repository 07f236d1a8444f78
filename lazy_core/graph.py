"""A pending computation: the post-order of nodes between leaves and outputs.

Built by the executor at a barrier. The post-order is deterministic (operands
visited left to right), leaves are numbered in first-visit order, and the
graph key combines node hashes (computed when nodes were made) with operand
positions, so two steps that trace the same program get the same key and
hit the computation cache, while ``a + b`` and ``a + a`` do not collide.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import torch

from .ir import DeviceData, Node, Output, ScalarParam, TensorMeta


class GraphKey:
    """A graph's in-process cache key: its parts hashed once.

    The parts are a tuple with an entry per node; hashing it costs ~0.1 ms for
    a 1,000-node training step, and the executor's cache, the diagnostics and
    the step guard each look the key up at every barrier.
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


@dataclass
class LazyGraph:
    """What a backend's ``lower`` receives."""

    #: Non-leaf nodes in execution (post-)order.
    nodes: list[Node]
    #: Leaves in argument order: DeviceData and ScalarParam nodes.
    inputs: list[Node]
    #: Graph results in order.
    outputs: list[Output]
    #: Hashable cache key (process-local).
    key: GraphKey
    #: Position of each node (leaves and ops) in the combined order, by id().
    positions: dict[int, int] = field(repr=False, default_factory=dict)
    _stable: str | None = field(default=None, repr=False)

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
            pos = self.positions
            parts = [f"in {node.op} {_meta_text(node.metas[0])};" for node in self.inputs]
            for node in self.nodes:
                parts.append(f"{node.name}({_stable_value(node.args, pos)}|"
                             f"{_stable_value(sorted(node.kwargs.items()), pos)})->"
                             f"{','.join(_meta_text(m) for m in node.metas)};")
            parts.append("out " + ",".join(f"{pos[id(o.node)]}#{o.index}" for o in self.outputs))
            self._stable = hashlib.sha1("".join(parts).encode()).hexdigest()[:16]
        return self._stable

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
    """A constant (or operand reference) as process-independent text."""
    if isinstance(x, Output):
        return f"%{pos[id(x.node)]}#{x.index}"
    if isinstance(x, list | tuple):
        return "[" + ",".join(_stable_value(v, pos) for v in x) + "]"
    if isinstance(x, torch.Tensor):
        # repr() elides the middle of large tensors: hash every byte instead.
        flat = x.detach().cpu().contiguous().reshape(-1)
        digest = hashlib.sha1(flat.view(torch.uint8).numpy().tobytes()).hexdigest() if flat.numel() else "0"
        return f"tensor({x.dtype},{tuple(x.shape)},{digest})"
    return repr(x)


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
                    key_parts.append((node.hash,))
                    continue
                nodes.append(node)
                key_parts.append((node.hash, ()))
            else:
                nodes.append(node)
                key_parts.append((node.hash, tuple([(positions[id(o.node)], o.index) for o in operands])))
    out_key = tuple([(positions[id(o.node)], o.index) for o in outputs])
    return LazyGraph(nodes, inputs, list(outputs), GraphKey((tuple(key_parts), out_key)), positions)
