"""LoweringContext: lazy IR -> torch-dialect MLIR.

The post-ordered nodes become a ``torch.fx.Graph`` (one call per node, with
meta tensors for types and the user's file:line as the stack trace), and
torch-mlir's ``FxImporter.import_stateless_graph`` turns that into a
``func.func`` over ``!torch.vtensor`` values. Going through FX means every
ATen op that has a torch-dialect definition lowers without per-op code here,
and the importer emits each node's location as ``loc("file":line:0)``.

Scalar parameters arrive packed, all floats in one 1-D f64 tensor and all
ints in one 1-D i64 tensor, as the last arguments (``graph.argument_layout``);
each is turned back into a scalar with ``aten.select`` + ``aten.item``
inside the function, so the op sees a ``!torch.float`` exactly as it would a
Python number.
"""

from __future__ import annotations

import operator
import threading
from functools import lru_cache
from typing import Any

import torch
from torch.fx import Graph
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from lazy_core import metrics
from lazy_core.graph import LazyGraph
from lazy_core.ir import Node, Output, TensorMeta

from .computation import ArgInfo, Computation, ResultInfo
from .decompositions import DECOMPOSED_OPS, canonical_args
from .decompositions import inline as inline_decomposition
from .errors import LoweringError

_tls = threading.local()


def mlir_context() -> Any:
    """One MLIR context per thread with the torch dialect registered."""
    ctx = getattr(_tls, "ctx", None)
    if ctx is None:
        from torch_mlir import ir
        from torch_mlir.dialects import torch as torch_d

        ctx = ir.Context()
        torch_d.register_dialect(ctx)
        _tls.ctx = ctx
    return ctx


@lru_cache(maxsize=8192)
def _meta_tensor(m: TensorMeta) -> torch.Tensor:
    """One shared meta tensor per shape/dtype/stride: graphs repeat the same few
    types, and reusing the object lets the importer's type cache hit."""
    return torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta")


# id(tensor) -> (tensor, its TensorMetadata); holding the tensor keeps the id valid.
_tensor_metadata_cache: dict[int, tuple[torch.Tensor, Any]] = {}


def _tensor_metadata(val: torch.Tensor) -> Any:
    """``_extract_tensor_metadata`` (contiguity checks and all) once per shared meta tensor."""
    hit = _tensor_metadata_cache.get(id(val))
    if hit is not None and hit[0] is val:
        return hit[1]
    md = _extract_tensor_metadata(val)
    if len(_tensor_metadata_cache) < 8192:
        _tensor_metadata_cache[id(val)] = (val, md)
    return md


def _fake_tensor(m: TensorMeta) -> torch.Tensor:
    """Multi-result ops: the importer types each tuple element only from a FakeTensor."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = getattr(_tls, "fake_mode", None)
    if mode is None:
        mode = _tls.fake_mode = FakeTensorMode()
    return mode.from_tensor(_meta_tensor(m))


def _set_meta(fx_node: Any, val: Any) -> None:
    fx_node.meta["val"] = val
    if isinstance(val, torch.Tensor):
        fx_node.meta["tensor_meta"] = _tensor_metadata(val)


def _stack_trace(node: Node) -> str | None:
    loc = node.location
    if loc is None:
        return None
    return f'  File "{loc.filename}", line {loc.line}, in {loc.function}\n'


class LoweringContext:
    """Builds one Computation from one LazyGraph."""

    def __init__(self, graph: LazyGraph, boundary_casts: dict[torch.dtype, torch.dtype] | None = None) -> None:
        """``boundary_casts`` widens dtypes at the function boundary (e.g. bf16 ->
        f32 for runtimes that cannot pass bf16 buffers); casts happen inside."""
        self.graph = graph
        self.boundary_casts = boundary_casts or {}
        self._values: dict[tuple[int, int], Any] = {}
        self._fx = Graph()
        # Float scalar parameters' item nodes -> their element select, and the
        # int versions made from them (see _int_scalars).
        self._float_selects: dict[Any, Any] = {}
        self._int_items: dict[Any, Any] = {}

    def _value(self, out: Output) -> Any:
        return self._values[id(out.node), out.index]

    def _map(self, x: Any) -> Any:
        if isinstance(x, Output):
            return self._value(x)
        if isinstance(x, list):
            return [self._map(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self._map(v) for v in x)
        if isinstance(x, torch.device):
            return None
        return x

    def build_fx(self) -> Graph:
        g = self._fx
        args: list[ArgInfo] = []
        inputs = self.graph.inputs
        layout = self.graph.argument_layout
        for i in layout.device_data:
            leaf = inputs[i]
            meta = leaf.metas[0]
            ph = g.placeholder(f"arg{len(args)}")
            _set_meta(ph, _meta_tensor(meta))
            if meta.dtype in self.boundary_casts:
                wide = self.boundary_casts[meta.dtype]
                _set_meta(ph, torch.empty_strided(meta.shape, meta.stride, dtype=wide, device="meta"))
                cast = g.call_function(torch.ops.aten._to_copy.default, (ph,), {"dtype": meta.dtype})
                _set_meta(cast, _meta_tensor(meta))
                self._values[id(leaf), 0] = cast
                args.append(ArgInfo("device_data", meta.shape, wide, logical_dtype=meta.dtype))
            else:
                self._values[id(leaf), 0] = ph
                args.append(ArgInfo("device_data", meta.shape, meta.dtype))
        # Scalar parameters arrive packed, one 1-D tensor per dtype (the last
        # arguments); each is element i of its pack, read back as a scalar.
        for dtype, indices in layout.packs():
            ph = g.placeholder(f"arg{len(args)}")
            _set_meta(ph, _meta_tensor(TensorMeta((len(indices),), dtype, (1,))))
            args.append(ArgInfo("scalar_pack", (len(indices),), dtype))
            element = _meta_tensor(TensorMeta((), dtype, ()))
            for k, i in enumerate(indices):
                leaf = inputs[i]
                select = g.call_function(torch.ops.aten.select.int, (ph, 0, k))
                _set_meta(select, element)
                item = g.call_function(torch.ops.aten.item.default, (select,))
                item.meta["val"] = leaf.value
                if leaf.location is not None:
                    select.meta["stack_trace"] = item.meta["stack_trace"] = _stack_trace(leaf)
                self._values[id(leaf), 0] = item
                if dtype.is_floating_point:
                    self._float_selects[item] = select
        self._args = args
        for node in self.graph.nodes:
            if node.op in DECOMPOSED_OPS:  # no lowering past the torch dialect: inline its decomposition
                inlined = inline_decomposition(g, node, self._value, _stack_trace(node))
                if inlined is not None:
                    for i, v in enumerate(inlined):
                        if v is not None:
                            self._values[id(node), i] = v
                    continue
            call_args = canonical_args(node, self._map(node.args))
            call_kwargs = {k: self._map(v) for k, v in node.kwargs.items() if not isinstance(v, torch.device)}
            if self._float_selects and node.op in _CASTS_SCALAR_TO_SELF:
                call_args, call_kwargs = self._int_scalars(node, call_args, call_kwargs)
            call = g.call_function(node.op, call_args, call_kwargs)
            trace = _stack_trace(node)
            if trace:
                call.meta["stack_trace"] = trace
            returns = node.op._schema.returns
            single = len(returns) == 1 and str(returns[0].type) == "Tensor"
            if single:
                _set_meta(call, _meta_tensor(node.metas[0]))
                self._values[id(node), 0] = call
            else:
                vals = tuple(_fake_tensor(m) if m is not None else None for m in node.metas)
                call.meta["val"] = vals
                for i, m in enumerate(node.metas):
                    if m is None:
                        continue
                    item = g.call_function(operator.getitem, (call, i))
                    _set_meta(item, vals[i])
                    if trace:
                        item.meta["stack_trace"] = trace
                    self._values[id(node), i] = item
        outs = []
        self._results = []
        for o in self.graph.outputs:
            value, meta = self._value(o), o.meta
            wide = self.boundary_casts.get(meta.dtype)
            if wide is not None:
                value = g.call_function(torch.ops.aten._to_copy.default, (value,), {"dtype": wide})
                _set_meta(value, torch.empty(meta.shape, dtype=wide, device="meta"))
                self._results.append(ResultInfo(meta.shape, wide, logical_dtype=meta.dtype))
            else:
                self._results.append(ResultInfo(meta.shape, meta.dtype))
            outs.append(value)
        g.output(tuple(outs))
        return g

    def _int_scalars(self, node: Node, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """A float scalar parameter that an op casts to its integer result type
        (``F.pad(labels, value=-100)``: PyTorch passes the value as a float)
        is converted while still a tensor (f64 -> i64, truncating like the
        op's cast) and read as an int. IREE cannot compile the scalar
        ``arith.fptosi f64 -> i64`` the op's own cast would become, which
        sent every causal-LM step (GPT-2's loss pads its labels) to the CPU."""
        meta = node.metas[0] if node.metas else None
        if meta is None or meta.dtype.is_floating_point or meta.dtype.is_complex or meta.dtype == torch.bool:
            return args, kwargs

        def conv(x: Any) -> Any:
            select = self._float_selects.get(x) if not isinstance(x, list | tuple) else None
            if select is None:
                return x
            item = self._int_items.get(x)
            if item is None:
                g = self._fx
                cast = g.call_function(torch.ops.aten._to_copy.default, (select,), {"dtype": torch.int64})
                _set_meta(cast, _meta_tensor(TensorMeta((), torch.int64, ())))
                item = g.call_function(torch.ops.aten.item.default, (cast,))
                item.meta["val"] = int(x.meta["val"])
                if "stack_trace" in x.meta:
                    cast.meta["stack_trace"] = item.meta["stack_trace"] = x.meta["stack_trace"]
                self._int_items[x] = item
            return item

        return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}

    def build(self) -> Computation:
        """Import the graph into a fresh torch-dialect module."""
        from torch_mlir.extras.fx_importer import FxImporter

        with metrics.timed("lower_fx"):
            g = self.build_fx()
        ctx = mlir_context()
        importer = FxImporter(context=ctx)
        name = self.graph.name
        try:
            with metrics.timed("lower_import"):
                importer.import_stateless_graph(g, func_name=name)
        except Exception as e:
            raise LoweringError(
                f"torch-mlir could not import graph {name}: {type(e).__name__}: {e}",
                node=_guess_node(self.graph, e),
            ) from e
        results = self._results
        return Computation(
            module=importer.module,
            func_name=name,
            graph_hash=self.graph.stable_hash,
            args=self._args,
            results=results,
        )


#: Ops that cast their Scalar argument to ``self``'s dtype (the value fills
#: or pads an integer tensor): a float scalar parameter feeding one with an
#: integer result is passed as an int (``LoweringContext._int_scalars``).
_CASTS_SCALAR_TO_SELF = frozenset({
    torch.ops.aten.constant_pad_nd.default,
    torch.ops.aten.fill.Scalar,
    torch.ops.aten.masked_fill.Scalar,
    torch.ops.aten.index_fill.int_Scalar,
    torch.ops.aten.scatter.value,
    torch.ops.aten.full_like.default,
    torch.ops.aten.new_full.default,
    torch.ops.aten.full.default,
})


def _guess_node(graph: LazyGraph, e: Exception) -> Node | None:
    text = str(e)
    for node in graph.nodes:
        short = node.name.split(".")[1] if "." in node.name else node.name
        if short and short in text:
            return node
    return None


def lower_graph(graph: LazyGraph, boundary_casts: dict[torch.dtype, torch.dtype] | None = None) -> Computation:
    """LazyGraph -> torch-dialect Computation."""
    return LoweringContext(graph, boundary_casts).build()
