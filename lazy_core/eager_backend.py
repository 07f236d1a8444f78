"""The ``eager`` debugging backend: run the recorded ops one by one with PyTorch.

No compiler is involved, so when a program gives a different answer on a
compiled backend than on ``eager``, the compiler (or the lowering) is at
fault, not the tracer. This is the tool LTC users reach for to bisect a
miscompile; the executor also uses ``interpret`` to run a graph that failed
to compile, so the program still gives the right answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .backend import BackendData, BackendDevice, BackendImpl
from .device_semantics import KERNELS
from .graph import LazyGraph
from .ir import Output


def interpret(graph: LazyGraph, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Evaluate ``graph`` on CPU tensors ``args``, laid out as every backend
    receives them (``graph.argument_layout``: device data, then scalar packs)."""
    layout = graph.argument_layout
    packs = layout.packs()
    n = len(layout.device_data)
    if len(args) != n + len(packs):
        raise ValueError(f"graph {graph.name} takes {n + len(packs)} arguments, got {len(args)}")
    env: dict[int, Any] = {}
    for i, value in zip(layout.device_data, args):
        env[id(graph.inputs[i])] = (value,)
    for (_, indices), pack in zip(packs, args[n:]):
        for i, value in zip(indices, pack.tolist(), strict=True):
            env[id(graph.inputs[i])] = (value,)

    def sub(x: Any) -> Any:
        if isinstance(x, Output):
            return env[id(x.node)][x.index]
        if isinstance(x, list):
            return [sub(v) for v in x]
        if isinstance(x, tuple):
            return tuple(sub(v) for v in x)
        return x

    # Each intermediate is dropped after its last reader, as eager frees it: the executor
    # interprets whole training steps (a first sight, lazy_core.tiering), and holding every
    # activation and gradient to the end would take several times eager's memory.
    last_reader: dict[int, int] = {}
    for i, node in enumerate(graph.nodes):
        for o in node.operands:
            last_reader[id(o.node)] = i
    for o in graph.outputs:
        last_reader[id(o.node)] = len(graph.nodes)
    for i, node in enumerate(graph.nodes):
        args = sub(node.args)
        if node.op in _ON_VALUES and isinstance(args[0], torch.Tensor):
            args = (args[0].contiguous(), *args[1:])
        result = KERNELS.get(node.op, node.op)(*args, **{k: sub(v) for k, v in node.kwargs.items()})
        env[id(node)] = _flatten_tensors(result)
        del args, result
        for o in node.operands:
            if last_reader[id(o.node)] == i:
                env.pop(id(o.node), None)
    return [env[id(o.node)][o.index] for o in graph.outputs]


#: Ops that address their input's memory. In a graph they address its *value* laid out
#: row-major, as the compiled backends' gathers do (lowering/gathers.py; lazy_core/strided.py
#: hands them the storage as a flat 1-d value); a CPU intermediate may be a stride-0 expand
#: (a fill of a whole storage), whose memory is one element (fuzz seed 4203 program 546').
_ON_VALUES = frozenset({torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_scatter.default})


def _flatten_tensors(result: Any) -> tuple:
    # A graph value is plain values: ``_conj``/``_neg_view`` give CPU tensors with a lazy
    # conjugate/negative bit, which ``view_as_real`` refuses and a lazy tensor never has.
    if isinstance(result, torch.Tensor):
        return (result.resolve_conj().resolve_neg(),)
    out: list = []
    for r in result:
        if isinstance(r, torch.Tensor):
            out.append(r.resolve_conj().resolve_neg())
        elif isinstance(r, list | tuple):
            out.extend(_flatten_tensors(r))
        else:
            out.append(None)
    return tuple(out)


class EagerBackend(BackendImpl):
    """Interprets each graph op by op on the CPU. Device data are CPU tensors."""

    name = "eager"
    #: PyTorch runs every dtype (lazy_core.fallback.DEFAULT_UNSUPPORTED_DTYPES).
    unsupported_dtypes: frozenset = frozenset()

    def make_backend_data(self, tensor: torch.Tensor, device: BackendDevice) -> BackendData:
        return BackendData(tensor.detach().clone(), tensor.shape, tensor.dtype, device)

    def to_host(self, data: BackendData) -> torch.Tensor:
        return data.handle

    def lower(self, graph: LazyGraph) -> LazyGraph:
        return graph

    def compile(self, computations: Sequence[Any]) -> list[Any]:
        return list(computations)

    def execute_computation(
        self, executable: Any, arguments: Sequence[BackendData], device: BackendDevice
    ) -> list[BackendData]:
        results = interpret(executable, [a.handle for a in arguments])
        return [BackendData(r, r.shape, r.dtype, device) for r in results]
