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

from .ir import DeviceData, Node, Output, ScalarParam


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
        """A hash that is the same in every process (names the MLIR function)."""
        if self._stable is None:
            h = hashlib.sha1()
            for node in self.inputs:
                meta = node.metas[0]
                h.update(f"in {node.op} {meta.shape} {meta.dtype};".encode())
            for node in self.nodes:
                ops = [(self.positions[id(o.node)], o.index) for o in node.operands]
                h.update(f"{node.name} {_stable_args(node)} {ops} {node.metas};".encode())
            outs = [(self.positions[id(o.node)], o.index) for o in self.outputs]
            h.update(f"out {outs}".encode())
            self._stable = h.hexdigest()[:16]
        return self._stable

    @property
    def name(self) -> str:
        return f"lazy_graph_{self.stable_hash}"

    def scalar_params(self) -> list[ScalarParam]:
        return [n for n in self.inputs if isinstance(n, ScalarParam)]

    def device_data(self) -> list[DeviceData]:
        return [n for n in self.inputs if isinstance(n, DeviceData)]


def _stable_args(node: Node) -> str:
    def fmt(x: object) -> str:
        if isinstance(x, Output):
            return "%"
        if isinstance(x, list | tuple):
            return "[" + ",".join(fmt(v) for v in x) + "]"
        return repr(x)

    return fmt(node.args) + fmt(sorted(node.kwargs.items()))


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
