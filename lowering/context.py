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

import math
import operator
import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph

from lazy_core import metrics
from lazy_core.graph import LazyGraph
from lazy_core.ir import Node, Output, ScalarParam, TensorMeta

from . import bf16, half_accumulation, loops
from .comparisons import SCALAR_COMPARISONS, rewrite_float_equalities, rewrite_number_comparisons
from .computation import ArgInfo, Computation, ResultInfo
from .constant_sums import reduce_constant_sums
from .conv_matmuls import convolution_gradients_as_matmuls
from .decompositions import DECOMPOSED_OPS, MAX_POOL_DECOMPOSED, TENSOR_FORMS, canonical_args
from .decompositions import inline as inline_decomposition
from .erf64 import expand_float64_erf
from .errors import LoweringError
from .float_to_int import guard_float_to_int_casts
from .fx_meta import fake_tensor as _fake_tensor
from .fx_meta import meta_tensor as _meta_tensor
from .fx_meta import set_meta as _set_meta
from .int_extrema import widen_int_extrema
from .nan_extrema import check_nan_extrema
from .positive_zero_sums import make_zero_sums_positive
from .scatter_indices import (
    make_scatter_dims_non_negative,
    scatter_into_scalars_as_vectors,
    wrap_negative_scatter_indices,
)
from .short_loops import stage_long_reductions
from .small_ints import widen_small_ints
from .subnormal_logs import scale_subnormal_logs
from .tensor_bitcasts import route_zero_dim_bitcasts
from .wide_sums import accumulate_sums_in_float64, widen_decomposed_sums

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


def _stack_trace(node: Node) -> str | None:
    loc = node.location
    if loc is None:
        return None
    return f'  File "{loc.filename}", line {loc.line}, in {loc.function}\n'


def _round_number(x: float | int, dtype: torch.dtype) -> float | int:
    """Python number ``x`` as PyTorch converts it to ``dtype`` (``x`` itself when exact)."""
    r = float(torch.tensor(x, dtype=torch.float64).to(dtype))
    return x if r == x else r


def _number_key(x: int | float) -> tuple[type, Any]:
    """A Python number's key in ``_numbers_rounded``: its type (``1``, ``1.0`` and ``True`` are
    equal otherwise) and, for a float, its bits: ``0.0 == -0.0``, so ``clamp(x16, 0.0, -0.0)``
    read both bounds as -0.0 when they shared a key."""
    return (float, x.hex()) if type(x) is float else (type(x), x)


def _numbers_rounded(node: Node, round_number: Callable[[Any], Any]) -> dict[tuple[type, Any], Any]:
    """``round_number`` of every Python number among ``node``'s arguments, keyed by
    ``_number_key``, computed before a decomposition is traced: a torch call inside the trace
    would become a graph constant."""
    out: dict[tuple[type, Any], Any] = {}

    def visit(x: Any) -> None:
        if isinstance(x, int | float) and not isinstance(x, bool):
            out[_number_key(x)] = round_number(x)
        elif isinstance(x, list | tuple):
            for v in x:
                visit(v)

    visit((node.args, tuple(node.kwargs.values())))
    return out


class LoweringContext:
    """Builds one Computation from one LazyGraph."""

    def __init__(self, graph: LazyGraph, boundary_casts: dict[torch.dtype, torch.dtype] | None = None,
                 emulate_bf16: str | None = None, exact_max_pool: bool = True,
                 int64_extrema: bool = False, nan_checked_extrema: bool = False,
                 positive_zero_sums: bool = False, subnormal_logs: bool = False, float64_erf: bool = False,
                 short_loops: bool = False, wide_sums: bool = False,
                 conv_gradients_as_matmuls: bool = False) -> None:
        """``boundary_casts`` widens dtypes at the function boundary (e.g. bf16 ->
        f32 for runtimes that cannot pass bf16 buffers); casts happen inside.

        ``emulate_bf16`` ("bits" or "casts", see ``lowering.bf16``) computes
        every bf16 value in f32, rounded to bf16 after each op, for compilers
        that do not compute bf16 as PyTorch does.

        ``exact_max_pool`` (default) emits max pooling as eager's scan
        (``lowering/pooling.py``: a window holding a NaN gets its index, not -1);
        False keeps torch-mlir's pooling op, for a compiler that cannot take the
        scan (iree-compile on torch-mlir's linalg exceeds its stack limit on the
        scan's backward: ``examples/custom_backend.py``).

        ``int64_extrema`` computes integer and bool min/max reductions in int64
        (``lowering/int_extrema.py``: Vulkan gets narrower ones wrong).

        ``nan_checked_extrema`` gives floating min/max reductions an explicit NaN
        check (``lowering/nan_extrema.py``: Vulkan drops the NaN).

        ``positive_zero_sums`` makes floating sums and means that are zero +0.0
        (``lowering/positive_zero_sums.py``: Vulkan on lavapipe keeps a -0.0).

        ``subnormal_logs`` scales a subnormal operand of ``log``/``log2``/``log10`` up first
        (``lowering/subnormal_logs.py``: lavapipe reads it as the smallest normal).

        ``float64_erf`` computes a float64 ``erf`` from ``exp`` (``lowering/erf64.py``: IREE has
        no float64 ``math.erf``).

        ``short_loops`` stages reductions over more than 65,535 elements
        (``lowering/short_loops.py``: lavapipe stops longer loops).

        ``wide_sums`` accumulates float32 sums and means in float64
        (``lowering/wide_sums.py``: a float32 running total drifts), and computes float32
        ``addcmul`` in float64 (``lowering/addc.py``: eager's CPU kernel ends in a fused
        multiply-add). Targets with native float64 (the CPU ones) set it.

        ``conv_gradients_as_matmuls`` computes the gradients of 2-d convolutions as one matmul
        over a channels-last im2col (``lowering/conv_matmuls.py``: IREE's CPU matmuls beat its
        convolution code)."""
        self.graph = graph
        self.conv_gradients_as_matmuls = conv_gradients_as_matmuls
        self.short_loops = short_loops
        self.wide_sums = wide_sums
        self.float64_erf = float64_erf
        self.positive_zero_sums = positive_zero_sums
        self.subnormal_logs = subnormal_logs
        self.int64_extrema = int64_extrema
        self.nan_checked_extrema = nan_checked_extrema
        self.skipped = frozenset() if exact_max_pool else MAX_POOL_DECOMPOSED
        self.boundary_casts = boundary_casts or {}
        self.emulate_bf16 = bf16.check_mode(emulate_bf16)
        if self.emulate_bf16 and torch.bfloat16 in self.boundary_casts:
            raise ValueError("bf16 is either emulated or cast at the boundary, not both")
        self._values: dict[tuple[int, int], Any] = {}
        self._fx = Graph()
        # Float scalar parameters' item nodes -> their element select, and the
        # versions in a result dtype made from them (see _scalars_in_result_dtype).
        self._float_selects: dict[Any, Any] = {}
        # Every scalar parameter's item node -> its element select, and bf16-rounded
        # versions of the items (bf16 emulation, see _round_bf16_operands).
        self._selects: dict[Any, Any] = {}
        self._bf16_items: dict[Any, Any] = {}
        self._rounded_items: dict[tuple[Any, torch.dtype], Any] = {}
        self._cast_items: dict[tuple[Any, torch.dtype], Any] = {}

    def _value(self, out: Output) -> Any:
        return self._values[id(out.node), out.index]

    def _operand_tensor(self, out: Output) -> Any:
        """``out``'s FX value, a runtime scalar as its 0-d tensor (for a decomposition)."""
        value = self._value(out)
        return self._selects.get(value, value) if isinstance(out.node, ScalarParam) else value

    def _map(self, x: Any) -> Any:
        if isinstance(x, Output):
            return self._value(x)
        if isinstance(x, list):
            return [self._map(v) for v in x]
        if isinstance(x, tuple):
            return tuple(self._map(v) for v in x)
        if isinstance(x, torch.device):
            return None
        if self.emulate_bf16 and isinstance(x, torch.dtype):
            return bf16.swap_dtype(x)
        return x

    def _meta(self, out: Output) -> TensorMeta:
        """``out``'s type in the computation (f32 for bf16 under emulation)."""
        return bf16.emulated(out.meta) if self.emulate_bf16 else out.meta

    def _emit(self, op: Any, args: tuple, kwargs: dict, meta: TensorMeta, trace: str | None = None) -> Any:
        """One FX call of ``op`` typed by ``meta``."""
        call = self._fx.call_function(op, args, kwargs)
        _set_meta(call, _meta_tensor(meta))
        if trace:
            call.meta["stack_trace"] = trace
        return call

    def _emitter(self, trace: str | None) -> bf16.Emit:
        return lambda op, args, kwargs, meta: self._emit(op, args, kwargs, meta, trace)

    def build_fx(self) -> Graph:
        # Factories without a device (``torch.full((), bound)`` in a decomposition) must make
        # CPU tensors, as when tracing for any backend: after ``torch.set_default_device("lazy")``
        # they made lazy ones, and every graph failed to build ("meta and lazy", adversarial sweep).
        with torch.device("cpu"):
            return self._build_fx()

    def _build_fx(self) -> Graph:
        g = self._fx
        args: list[ArgInfo] = []
        inputs = self.graph.inputs
        layout = self.graph.argument_layout
        for i in layout.device_data:
            leaf = inputs[i]
            meta = leaf.metas[0]
            ph = g.placeholder(f"arg{len(args)}")
            _set_meta(ph, _meta_tensor(meta))
            if self.emulate_bf16 and meta.dtype == torch.bfloat16:
                carrier = bf16.carrier_dtype(self.emulate_bf16)
                _set_meta(ph, _meta_tensor(meta._replace(dtype=carrier)))
                value = ph
                if carrier != bf16.COMPUTE_DTYPE:
                    value = bf16.from_bits(self._emitter(_stack_trace(leaf)), ph, meta)
                self._values[id(leaf), 0] = value
                args.append(ArgInfo("device_data", meta.shape, carrier, logical_dtype=meta.dtype))
            elif meta.dtype in self.boundary_casts:
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
                self._selects[item] = select
                if dtype.is_floating_point:
                    self._float_selects[item] = select
        self._args = args
        for node in self.graph.nodes:
            trace = _stack_trace(node)
            if self.emulate_bf16 and node.op is _VIEW_DTYPE and _views_bf16(node):
                self._values[id(node), 0] = self._emulated_view_dtype(node, trace)
                continue
            values = self._empty_results(node, trace)
            if values is None and node.op in DECOMPOSED_OPS and node.op not in self.skipped:  # no lowering past the torch dialect: inline its decomposition
                values = self._inline(node, trace)
            if values is None:
                values = self._call(node, trace)
            if self.emulate_bf16:
                values = self._round_bf16_results(node, values, trace)
            for i, v in enumerate(values):
                if v is not None:
                    self._values[id(node), i] = v
        outs = []
        self._results = []
        for o in self.graph.outputs:
            value, meta = self._value(o), o.meta
            wide = self.boundary_casts.get(meta.dtype)
            if self.emulate_bf16 and meta.dtype == torch.bfloat16:
                carrier = bf16.carrier_dtype(self.emulate_bf16)
                if carrier != bf16.COMPUTE_DTYPE:
                    value = bf16.to_bits(self._emitter(None), value, meta)
                self._results.append(ResultInfo(meta.shape, carrier, logical_dtype=meta.dtype))
            elif wide is not None:
                value = g.call_function(torch.ops.aten._to_copy.default, (value,), {"dtype": wide})
                _set_meta(value, torch.empty(meta.shape, dtype=wide, device="meta"))
                self._results.append(ResultInfo(meta.shape, wide, logical_dtype=meta.dtype))
            else:
                self._results.append(ResultInfo(meta.shape, meta.dtype))
            outs.append(value)
        g.output(tuple(outs))
        self._rewrite(g)
        for sub in loops.subgraphs(g).values():  # loop bodies and conditions take the same rewrites
            self._rewrite(sub.graph)
            sub.recompile()
        if self.emulate_bf16 == "bits":  # ("casts" rounds through real bf16 casts)
            bf16.check_none_left(g, [sub.graph for sub in loops.subgraphs(g).values()])
        return g

    def _rewrite(self, g: Graph) -> None:
        """The FX rewrites every op of the computation takes (decompositions' included)."""
        if self.conv_gradients_as_matmuls:  # first: its bias gradient's sum takes the ones below
            convolution_gradients_as_matmuls(g)
        if self.wide_sums:  # the ops it writes take the rewrites below
            widen_decomposed_sums(g)
        guard_float_to_int_casts(g)  # before the comparison rewrites: its guard is made of them
        wrap_negative_scatter_indices(g)
        make_scatter_dims_non_negative(g)  # those of decompositions too
        scatter_into_scalars_as_vectors(g)
        rewrite_number_comparisons(g)  # every one, those of decompositions too
        rewrite_float_equalities(g)
        reduce_constant_sums(g)
        route_zero_dim_bitcasts(g)
        widen_small_ints(g)
        if self.int64_extrema:
            widen_int_extrema(g)
        if self.nan_checked_extrema:
            check_nan_extrema(g)
        if self.short_loops:  # after reduce_constant_sums: a constant's sum needs no loop
            stage_long_reductions(g)
        if self.wide_sums:
            accumulate_sums_in_float64(g)
        if self.positive_zero_sums:
            make_zero_sums_positive(g)
        if self.subnormal_logs:
            scale_subnormal_logs(g)
        if self.float64_erf:
            expand_float64_erf(g)

    def _empty_results(self, node: Node, trace: str | None) -> list[Any] | None:
        """Fresh zeros for a node whose every result has no elements, else None.

        An empty result needs no computation, and torch-mlir's lowerings are
        not all safe for it: ``x.repeat(0, 2)`` divided by the zero repeat
        count in the compiled code (SIGFPE on the reference backend, the
        process gone). The op's own checks ran when it was traced.
        """
        metas = node.metas
        if not metas or any(m is None or math.prod(m.shape) != 0 for m in metas):
            return None
        if self.emulate_bf16:
            metas = [bf16.emulated(m) for m in metas]
        return [self._emit(torch.ops.aten.zeros.default, (list(m.shape),), {"dtype": m.dtype}, m, trace)
                for m in metas]

    def _call(self, node: Node, trace: str | None) -> list[Any]:
        """``node`` as one FX call; one FX value (or None) per result.

        A reduction of float16/bfloat16 operands runs on float32 copies and
        its results are rounded back, as PyTorch accumulates them
        (``lowering.half_accumulation``).
        """
        low = half_accumulation.low_precision(node, bool(self.emulate_bf16))
        values = self._call_op(node, trace, low)
        if not low:
            return values
        return [self._cast(v, m._replace(dtype=torch.float32), m.dtype) if v is not None and m is not None and m.dtype in low else v
                for v, m in zip(values, node.metas)]

    def _widened(self, node: Node, low: frozenset[torch.dtype], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """``args``/``kwargs`` with each operand (and a ``dtype``) in ``low`` made float32.

        An elementwise op (``half_accumulation.is_elementwise``) first rounds an operand of
        another dtype to its result dtype, as TensorIterator converts it
        (``addcmul(x16, y16, torch.tensor(0.3))`` multiplies by float16(0.3)), except the 0-d
        one ``mul``/``div`` read in float32, and a Python number where the kernel reads it
        in the result dtype (``ROUNDS_NUMBERS``)."""
        result = node.metas[0].dtype if node.metas and node.metas[0] is not None else None
        elementwise = result in low and half_accumulation.is_elementwise(node)
        numbers = elementwise and node.op in half_accumulation.ROUNDS_NUMBERS
        opmath_zero_dim = node.op in half_accumulation.SCALAR_OPMATH_OPS
        cast_first = half_accumulation.cast_to_dtype_operand(node, low)

        def conv(lazy_arg: Any, x: Any) -> Any:
            if half_accumulation.is_tensor_operand(lazy_arg):
                meta = lazy_arg.meta
                if meta.dtype in low:
                    return self._cast(x, meta, torch.float32)
                if cast_first is not None:  # the input is converted to ``dtype`` first
                    x = self._cast(x, meta, cast_first)
                    return self._cast(x, meta._replace(dtype=cast_first), torch.float32)
                if not elementwise or meta.dtype in (result, torch.bool) or meta.dtype.is_complex:
                    return x
                if not (opmath_zero_dim and not meta.shape):
                    x = self._cast(x, meta, result)
                    meta = meta._replace(dtype=result)
                return self._cast(x, meta, torch.float32) if meta.dtype != torch.float32 else x
            if numbers and isinstance(x, int | float) and not isinstance(x, bool):
                return _round_number(x, result)
            if numbers and x in self._selects:  # a runtime number, rounded while still a tensor
                return self._rounded_item(x, result)
            if isinstance(x, torch.dtype) and x in low:  # ``_softmax_backward_data``'s input_dtype
                return torch.float32
            return x

        args = tuple(conv(a, x) for a, x in zip(node.args, args)) + args[len(node.args):]
        kwargs = {k: torch.float32 if k == "dtype" and v in low else conv(node.kwargs.get(k), v)
                  for k, v in kwargs.items()}
        return args, kwargs

    def _call_op(self, node: Node, trace: str | None, low: frozenset[torch.dtype]) -> list[Any]:
        g = self._fx
        call_args = canonical_args(node, self._map(node.args))
        call_kwargs = {k: self._map(v) for k, v in node.kwargs.items() if not isinstance(v, torch.device)}
        if node.op in _INDEX_LIST_OPS and len(call_args) > 1 and isinstance(node.args[1], list | tuple):
            call_args = (call_args[0], self._int64_indices(node.args[1], call_args[1]), *call_args[2:])
        if self._float_selects and node.op in _CASTS_SCALAR_TO_SELF:
            call_args, call_kwargs = self._scalars_in_result_dtype(node, call_args, call_kwargs)
        if node.op is torch.ops.aten.new_full.default and node.metas and node.metas[0] is not None \
                and node.metas[0].dtype == torch.bool:
            call_args, call_kwargs = _fill_as_bool(call_args, call_kwargs)
        if self.emulate_bf16 and (node.metas and node.metas[0] is not None and node.metas[0].dtype == torch.bfloat16
                                  or _compares_in_bf16(node)):
            call_args, call_kwargs = self._round_bf16_operands(node, call_args, call_kwargs, trace)
        metas = [bf16.emulated(m) if self.emulate_bf16 and m is not None else m for m in node.metas]
        if low:
            call_args, call_kwargs = self._widened(node, low, call_args, call_kwargs)
            metas = [m._replace(dtype=torch.float32) if m is not None and m.dtype in low else m for m in metas]
        target = node.op
        if node.args and not _is_tensor_value(node.args[0]) and _first_is_tensor(target) and node.metas \
                and node.metas[0] is not None:
            # ``torch.add(0.5, x)`` (Phi-MoE's router), ``torch.mul(2, x)``: the number arrives in
            # ``self`` as a wrapped number, which the torch dialect rejects there (torch-mlir's
            # importer makes the Scalar form only of a number in ``other``). Given as a 0-d
            # tensor of the result dtype: eager's kernels read only a second operand as a CPU
            # scalar, so a first one is converted to the common dtype like any tensor (a bf16
            # result's number is rounded to bf16, emulated or not).
            number = self._scalar_tensor(call_args[0], metas[0].dtype)
            if node.metas[0].dtype != metas[0].dtype:
                number = self._in_result_dtype(number, TensorMeta((), metas[0].dtype, ()), node.metas[0].dtype,
                                               trace)[0]
            call_args = (number, *call_args[1:])
        if target in TENSOR_FORMS:  # no torch-dialect definition: its Tensor form
            target = TENSOR_FORMS[target]
            call_args = (call_args[0], self._scalar_tensor(call_args[1]), *call_args[2:])
        elif target is torch.ops.aten.div.Tensor_mode and not _is_tensor_value(node.args[1]):
            # ``torch.div(x, 0.3, rounding_mode="trunc")`` records the Tensor form
            # with a number, which the torch dialect rejects: give it the 0-d tensor.
            call_args = (call_args[0], self._scalar_tensor(call_args[1]), *call_args[2:])
        elif target in SCALAR_COMPARISONS and call_args[1] in self._selects and node.args[0].meta.dtype == torch.bool:
            # A bool tensor against a runtime number: torch-mlir's lowering converts the
            # number to i1 (``mask > -1`` compared with True). PyTorch compares in the
            # promoted dtype, so the mask is converted to it first.
            dtype = torch.result_type(torch.empty((1,), dtype=torch.bool), call_args[1].meta["val"])
            call_args = (self._cast(call_args[0], node.args[0].meta, dtype), *call_args[1:])
        returns = target._schema.returns
        if len(returns) == 1 and str(returns[0].type) == "Tensor":
            return [self._emit(target, call_args, call_kwargs, metas[0], trace)]
        call = g.call_function(target, call_args, call_kwargs)
        if trace:
            call.meta["stack_trace"] = trace
        vals = tuple(_fake_tensor(m) if m is not None else None for m in metas)
        call.meta["val"] = vals
        values: list[Any] = []
        for i, m in enumerate(metas):
            if m is None:
                values.append(None)
                continue
            item = g.call_function(operator.getitem, (call, i))
            _set_meta(item, vals[i])
            if trace:
                item.meta["stack_trace"] = trace
            values.append(item)
        return values

    def _round_bf16_operands(self, node: Node, args: tuple, kwargs: dict, trace: str | None) -> tuple[tuple, dict]:
        """``args``/``kwargs`` of a bf16-result op, or of a comparison computed in bf16, with
        the operands PyTorch rounds to bf16 first rounded (``bf16.ROUNDS_OPERANDS``,
        ``bf16.COMPARISONS``): tensors of another dtype, and for some ops Python scalars and
        scalar parameters."""
        scalars = node.op in bf16.ROUNDS_OPERANDS or node.op in bf16.COMPARISONS
        zero_dim = scalars or node.op in bf16.ROUNDS_ALL_TENSOR_OPERANDS or _converts_to_bf16(node)
        if not zero_dim and node.op not in bf16.ROUNDS_TENSOR_OPERANDS:
            return args, kwargs
        emit = self._emitter(trace)

        def conv(lazy_arg: Any, x: Any) -> Any:
            if isinstance(lazy_arg, Output) and not isinstance(lazy_arg.node, ScalarParam):
                meta = lazy_arg.meta
                if meta.dtype == torch.bool and node.op in bf16.COMPARISONS:
                    # 0 and 1 are bf16 values; compared in f32, not converted to bf16 later
                    # (``rewrite_number_comparisons`` would cast the bools to real bf16).
                    return self._cast(x, meta, torch.float32)
                if meta.dtype in (torch.bfloat16, torch.bool) or meta.dtype.is_complex:
                    return x
                if not zero_dim and not meta.shape:
                    return x  # mul/div read a 0-d tensor unrounded
                f32 = meta._replace(dtype=torch.float32)
                if meta.dtype != torch.float32:
                    x = emit(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.float32}, f32)
                return bf16.round_value(emit, x, f32, self.emulate_bf16)
            if not scalars or isinstance(x, bool):
                return x
            if isinstance(x, int | float):
                return bf16.round_literal(x)
            return self._bf16_item(x, trace)

        args = tuple(conv(a, x) for a, x in zip(node.args, args)) + args[len(node.args):]
        return args, {k: conv(node.kwargs.get(k), v) for k, v in kwargs.items()}

    def _inline(self, node: Node, trace: str | None) -> list[Any] | None:
        """``node``'s decomposition inlined (None where it does not apply). An elementwise op
        with a float16 result runs it on float32 copies, rounded once, as ``_call`` runs an
        op it emits (``half_accumulation``): ``atan2`` and ``lgamma`` decompose into several
        steps that float16 rounded one by one."""
        low = half_accumulation.low_precision(node, bool(self.emulate_bf16))
        if not low or not half_accumulation.is_elementwise(node):
            value, meta, constant = self._decomposition_operands(node, trace)
            if node.op in _INDEX_LIST_OPS and len(node.args) > 1 and isinstance(node.args[1], list | tuple):
                value, meta = self._int64_index_operands(node.args[1], value, meta)
            return inline_decomposition(self._fx, node, value, trace, meta=meta, constant=constant,
                                        wide=self.wide_sums)
        result = node.metas[0].dtype
        numbers = node.op in half_accumulation.ROUNDS_NUMBERS
        opmath_zero_dim = node.op in half_accumulation.SCALAR_OPMATH_OPS
        widened: dict[tuple[int, int], tuple[Any, TensorMeta]] = {}

        def operand(o: Output) -> tuple[Any, TensorMeta]:
            key = (id(o.node), o.index)
            if key not in widened:
                x, m = self._operand_tensor(o), self._meta(o)
                keep = m.dtype == torch.bool or m.dtype.is_complex or (isinstance(o.node, ScalarParam) and not numbers)
                if m.dtype in low or not keep:
                    # TensorIterator's: an operand of another dtype becomes the result's first,
                    # a float16 one of a bfloat16 result too (``atan2(x_bf16, y_f16_0d)``).
                    to_result = m.dtype not in low or (result in half_accumulation.HALF_DTYPES
                                                       and o.meta.dtype != result)
                    if to_result and not (opmath_zero_dim and not m.shape):
                        x, m = self._in_result_dtype(x, m, result, trace)
                    if m.dtype != torch.float32:
                        x, m = self._cast(x, m, torch.float32), m._replace(dtype=torch.float32)
                widened[key] = (x, m)
            return widened[key]

        rounded = _numbers_rounded(node, lambda x: _round_number(x, result)) if numbers else {}

        def constant(x: Any) -> Any:  # called while make_fx traces: no torch calls here
            if isinstance(x, int | float) and not isinstance(x, bool):
                return rounded.get(_number_key(x), x)
            return torch.float32 if isinstance(x, torch.dtype) and x in low else x

        values = inline_decomposition(self._fx, node, lambda o: operand(o)[0], trace,
                                      meta=lambda o: operand(o)[1], constant=constant, wide=self.wide_sums)
        if values is None:
            return None
        return [self._cast(v, m._replace(dtype=torch.float32), m.dtype) if v is not None and m is not None
                and m.dtype in low else v for v, m in zip(values, node.metas)]

    def _in_result_dtype(self, x: Any, meta: TensorMeta, dtype: torch.dtype, trace: str | None
                         ) -> tuple[Any, TensorMeta]:
        """The FX tensor ``x`` (typed by ``meta``) converted to ``dtype``, and its type. Under bf16
        emulation a bf16 ``dtype`` is a rounding kept in float32 (``bf16.round_value``): a cast
        round trip through bf16 is folded away by IREE, and "bits" mode leaves no bf16 type."""
        if not (self.emulate_bf16 and dtype == torch.bfloat16):
            return self._cast(x, meta, dtype), meta._replace(dtype=dtype)
        f32 = meta._replace(dtype=torch.float32)
        if meta.dtype != torch.float32:
            x = self._cast(x, meta, torch.float32)
        return bf16.round_value(self._emitter(trace), x, f32, self.emulate_bf16), f32

    def _decomposition_operands(self, node: Node, trace: str | None) -> tuple[Callable[[Output], Any],
                                                                            Callable[[Output], TensorMeta],
                                                                            Callable[[Any], Any]]:
        """(value, meta, constant) for inlining ``node``'s decomposition: its operands as the
        computation has them. Under bf16 emulation, an op whose kernel rounds its operands to
        bf16 (``bf16.ROUNDS_OPERANDS``) gets them rounded here too, as ``_call_op`` does for an
        op it emits: ``fmod(x_bf16, 0.3)`` divides by 0.30078125, and the decomposition, traced
        on f32 stand-ins, would otherwise divide by 0.3 (15% off at x = 2.14)."""
        if not self.emulate_bf16:
            return self._operand_tensor, self._meta, lambda x: x
        tensors_only = _converts_to_bf16(node)
        if not (tensors_only or node.op in bf16.ROUNDS_OPERANDS and node.metas and node.metas[0] is not None
                and node.metas[0].dtype == torch.bfloat16):
            return self._operand_tensor, self._meta, bf16.swap_dtype
        rounded: dict[tuple[int, int], tuple[Any, TensorMeta]] = {}

        def needs_rounding(o: Output) -> bool:
            if tensors_only and isinstance(o.node, ScalarParam):
                return False  # a number such a kernel reads in float32
            return not (o.meta.dtype in (torch.bfloat16, torch.bool) or o.meta.dtype.is_complex)

        def operand(o: Output) -> tuple[Any, TensorMeta]:
            key = (id(o.node), o.index)
            if key not in rounded:
                emit = self._emitter(trace)
                f32 = o.meta._replace(dtype=torch.float32)
                x = self._operand_tensor(o)
                if o.meta.dtype != torch.float32:
                    x = emit(torch.ops.aten._to_copy.default, (x,), {"dtype": torch.float32}, f32)
                rounded[key] = (bf16.round_value(emit, x, f32, self.emulate_bf16), f32)
            return rounded[key]

        rounded = {} if tensors_only else _numbers_rounded(node, bf16.round_literal)

        def constant(x: Any) -> Any:  # called while make_fx traces: no torch calls here
            if isinstance(x, int | float) and not isinstance(x, bool):
                return rounded.get(_number_key(x), x)
            return bf16.swap_dtype(x)

        return (lambda o: operand(o)[0] if needs_rounding(o) else self._operand_tensor(o),
                lambda o: operand(o)[1] if needs_rounding(o) else self._meta(o), constant)

    def _rounded_item(self, item: Any, dtype: torch.dtype) -> Any:
        """Scalar parameter ``item`` rounded to ``dtype`` (a cast round trip), read back as a
        Python float (one per parameter and dtype)."""
        key = (item, dtype)
        rounded = self._rounded_items.get(key)
        if rounded is None:
            select = self._selects[item]
            meta = TensorMeta((), select.meta["val"].dtype, ())
            x = self._cast(self._cast(select, meta, dtype), meta._replace(dtype=dtype), torch.float32)
            rounded = self._fx.call_function(torch.ops.aten.item.default, (x,))
            rounded.meta["val"] = float(torch.tensor(item.meta["val"], dtype=torch.float64).to(dtype))
            self._rounded_items[key] = rounded
        return rounded

    def _bf16_item(self, item: Any, trace: str | None) -> Any:
        """Scalar parameter ``item`` rounded to bf16 while still a tensor, read back as a
        Python float (one per parameter); anything else unchanged."""
        select = self._selects.get(item)
        if select is None:
            return item
        rounded = self._bf16_items.get(item)
        if rounded is None:
            emit = self._emitter(trace)
            scalar = TensorMeta((), torch.float32, ())
            x = emit(torch.ops.aten._to_copy.default, (select,), {"dtype": torch.float32}, scalar)
            x = bf16.round_value(emit, x, scalar, self.emulate_bf16)
            rounded = self._fx.call_function(torch.ops.aten.item.default, (x,))
            rounded.meta["val"] = float(bf16.round_literal(item.meta["val"]))
            if trace:
                rounded.meta["stack_trace"] = trace
            self._bf16_items[item] = rounded
        return rounded

    def _round_bf16_results(self, node: Node, values: list[Any], trace: str | None) -> list[Any]:
        """``values`` (f32) with each result that ``node`` makes in bf16 rounded to bf16,
        as PyTorch rounds every bf16 op's result (``lowering.bf16``)."""
        first = node.args[0] if node.args else None
        if node.op in bf16.PRESERVES_VALUES and isinstance(first, Output) and first.meta.dtype == torch.bfloat16:
            return values  # elements of a bf16 operand: exact already
        emit = self._emitter(trace)
        return [bf16.round_value(emit, v, m, self.emulate_bf16)
                if v is not None and m is not None and m.dtype == torch.bfloat16 else v
                for v, m in zip(values, node.metas)]

    def _emulated_view_dtype(self, node: Node, trace: str | None) -> Any:
        """``x.view(dtype)`` between bf16 and a 16-bit dtype under bf16 emulation:
        the bf16 side is f32 here, so the bits go through ``bf16.to_bits`` /
        ``bf16.from_bits``. Other views of bf16 change the shape: not emulated."""
        source, target = node.args[0], node.args[1]
        meta = node.metas[0]
        if source.meta.dtype == target:
            return self._value(source)
        others = {source.meta.dtype, target} - {torch.bfloat16}
        other = others.pop() if others else None
        if self.emulate_bf16 != "bits" or other not in (torch.int16, torch.float16):
            raise LoweringError(
                f"bf16 emulation ({self.emulate_bf16}) cannot lower {node.name} from {source.meta.dtype} "
                f"to {target} (graph {self.graph.name})", node=node)
        emit = self._emitter(trace)
        x = self._value(source)
        if target == torch.bfloat16:
            if other != torch.int16:
                x = bf16.bitcast(emit, x, source.meta, torch.int16)
            return bf16.from_bits(emit, x, meta)
        bits = bf16.to_bits(emit, x, source.meta)
        return bits if other == torch.int16 else bf16.bitcast(emit, bits, meta._replace(dtype=torch.int16), other)

    def _scalars_in_result_dtype(self, node: Node, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """A float scalar parameter that an op casts to its integer result type
        (``F.pad(labels, value=-100)``: PyTorch passes the value as a float)
        is converted while still a tensor (f64 -> i64, truncating like the
        op's cast) and read as an int. IREE cannot compile the scalar
        ``arith.fptosi f64 -> i64`` the op's own cast would become, which
        sent every causal-LM step (GPT-2's loss pads its labels) to the CPU.

        A pad value of a float32 or float16 result is converted the same way
        (f64 -> that dtype, read back): ``constant_pad_nd``'s own cast of it
        otherwise became an ``arith.truncf f64 -> f32`` inside the dispatch
        the pad fuses into, which IREE refuses ("failed to legalize operation
        'arith.truncf'"; ``F.pad(x, value=0.5)`` beside a ``masked_fill``).
        Rounding once from f64 is what the op does either way. Only the pad:
        converting fills too let IREE fold constant fills into reductions the
        backend then refused (count_nonzero of ``torch.full``)."""
        meta = node.metas[0] if node.metas else None
        if meta is None or meta.dtype.is_complex or meta.dtype == torch.bool:
            return args, kwargs
        dtype = torch.int64
        if meta.dtype.is_floating_point:
            if node.op is not torch.ops.aten.constant_pad_nd.default or meta.dtype not in (torch.float32, torch.float16):
                return args, kwargs
            dtype = meta.dtype

        def conv(x: Any) -> Any:
            select = self._float_selects.get(x) if not isinstance(x, list | tuple) else None
            if select is None:
                return x
            item = self._cast_items.get((x, dtype))
            if item is None:
                g = self._fx
                cast = g.call_function(torch.ops.aten._to_copy.default, (select,), {"dtype": dtype})
                _set_meta(cast, _meta_tensor(TensorMeta((), dtype, ())))
                item = g.call_function(torch.ops.aten.item.default, (cast,))
                value = x.meta["val"]
                item.meta["val"] = int(value) if dtype == torch.int64 else float(torch.tensor(value, dtype=dtype))
                if "stack_trace" in x.meta:
                    cast.meta["stack_trace"] = item.meta["stack_trace"] = x.meta["stack_trace"]
                self._cast_items[x, dtype] = item
            return item

        return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}

    def _int64_indices(self, indices: list | tuple, values: list | tuple) -> list:
        """An indices list with int8/int16/int32 index tensors as int64: torch-mlir compares
        them with int64 sizes, and ``x[int32_index]`` failed to lower on every compiled backend
        ("'arith.cmpi' op requires all operands to have the same type"; adversarial sweep).
        (uint8 and bool indices are masks.)"""
        out = []
        for o, v in zip(indices, values, strict=True):
            if isinstance(o, Output) and o.meta.dtype in _NARROW_INDEX_DTYPES:
                v = self._cast(v, self._meta(o), torch.int64)
            out.append(v)
        return out

    def _int64_index_operands(self, indices: list | tuple, value: Callable[[Output], Any],
                              meta: Callable[[Output], TensorMeta]) -> tuple[Callable[[Output], Any],
                                                                             Callable[[Output], TensorMeta]]:
        """``value``/``meta`` for a decomposition's operands with narrow integer index tensors
        as int64 (see ``_int64_indices``)."""
        narrow = {(id(o.node), o.index) for o in indices
                  if isinstance(o, Output) and o.meta.dtype in _NARROW_INDEX_DTYPES}
        if not narrow:
            return value, meta

        def wide_value(o: Output) -> Any:
            v = value(o)
            return self._cast(v, meta(o), torch.int64) if (id(o.node), o.index) in narrow else v

        def wide_meta(o: Output) -> TensorMeta:
            m = meta(o)
            return m._replace(dtype=torch.int64) if (id(o.node), o.index) in narrow else m

        return wide_value, wide_meta

    def _cast(self, value: Any, meta: TensorMeta, dtype: torch.dtype) -> Any:
        """The FX tensor ``value`` (typed by ``meta``) converted to ``dtype``."""
        cast = self._fx.call_function(torch.ops.aten._to_copy.default, (value,), {"dtype": dtype})
        _set_meta(cast, _meta_tensor(TensorMeta(meta.shape, dtype, meta.stride)))
        return cast

    def _scalar_tensor(self, x: Any, dtype: torch.dtype | None = None) -> Any:
        """A Scalar operand as the 0-d tensor PyTorch wraps it in (or of ``dtype``): a scalar
        parameter's element of its pack, or a constant made in the graph."""
        g = self._fx
        if isinstance(x, torch.fx.Node):  # a parameter: item(select(pack, 0, k))
            source = x.args[0]
            want = dtype or (torch.bool if isinstance(x.meta.get("val"), bool) else None)
            if want is None or source.meta["val"].dtype == want:
                return source
            cast = g.call_function(torch.ops.aten._to_copy.default, (source,), {"dtype": want})
            _set_meta(cast, _meta_tensor(TensorMeta((), want, ())))
            return cast
        if dtype is None:
            dtype = torch.bool if isinstance(x, bool) else torch.int64 if isinstance(x, int) else torch.float64
        const = g.call_function(torch.ops.aten.scalar_tensor.default, (x,), {"dtype": dtype})
        _set_meta(const, _meta_tensor(TensorMeta((), dtype, ())))
        return const

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
                if loops.has_loops(g):
                    importer.import_graph_module(loops.import_module(g), func_name=name)
                else:
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


def _converts_to_bf16(node: Node) -> bool:
    """A bf16-result elementwise op outside ``bf16``'s tables whose kernel converts each tensor
    operand of another dtype to bf16 first (TensorIterator's common dtype), 0-d ones included,
    and reads Python numbers in float32: ``int_tensor.sin()`` under a bf16 default dtype is
    ``sin(bf16(x))`` (sin(297) for sin(296): 0.95 off), ``reciprocal``, ``sqrt``, ``log``."""
    return (bool(node.metas) and node.metas[0] is not None and node.metas[0].dtype == torch.bfloat16
            and node.op not in bf16.ROUNDS_OPERANDS and node.op not in bf16.ROUNDS_TENSOR_OPERANDS
            and node.op not in bf16.ROUNDS_ALL_TENSOR_OPERANDS
            and (half_accumulation.is_pointwise(node) or node.op in _INTEGERS_IN_THE_DEFAULT_DTYPE))


def _compares_in_bf16(node: Node) -> bool:
    """A comparison whose operands' common dtype is bf16 (``bf16.COMPARISONS``), as
    ``torch.result_type`` promotes: a bf16 tensor against a number, a 0-d tensor or an integer
    tensor, and under a bf16 default dtype an integer or bool tensor against a float number."""
    if node.op not in bf16.COMPARISONS or len(node.args) < 2:
        return False

    def stand_in(x: Any) -> Any:
        if isinstance(x, Output) and isinstance(x.node, ScalarParam):  # a lifted Python number
            return 0.0 if x.meta.dtype.is_floating_point else False if x.meta.dtype == torch.bool else 0
        if isinstance(x, Output):
            return _meta_tensor(x.meta)
        return x

    operands = [stand_in(x) for x in node.args[:2]]
    if not any(isinstance(x, torch.Tensor) for x in operands):
        return False
    # An integer tensor against a float number compares in the default dtype: bf16 under a bf16
    # default, where ``rewrite_number_comparisons`` emitted real bf16 casts (the process died in
    # IREE's CPU code: "undefined symbol: __truncsfbf2", fuzz seed 4521 program 6).
    return torch.result_type(*operands) == torch.bfloat16


#: Reductions whose kernel (and PyTorch reference, which the lowering traces) converts an integer
#: input to the default dtype first: under a bf16 default, the trace held real bf16 ops beside the
#: emulated ones, and iree-compile failed ("invalid Read access range [0 to 32 for 32] of resource
#: with size 16"). Given the input already rounded to bf16 (in float32), it computes in float32.
_INTEGERS_IN_THE_DEFAULT_DTYPE = frozenset({torch.ops.aten.logsumexp.default})


_VIEW_DTYPE = torch.ops.aten.view.dtype
#: Index tensor dtypes the lowering casts to int64 (uint8 and bool indices are masks).
_NARROW_INDEX_DTYPES = (torch.int8, torch.int16, torch.int32)
#: Ops whose second argument is an indices list (``Tensor?[]``).
_INDEX_LIST_OPS = frozenset({
    torch.ops.aten.index.Tensor, torch.ops.aten.index_put.default, torch.ops.aten._index_put_impl.default,
    torch.ops.aten._unsafe_index.Tensor, torch.ops.aten._unsafe_index_put.default,
    torch.ops.aten._unsafe_masked_index.default, torch.ops.aten._unsafe_masked_index_put_accumulate.default,
})


def _views_bf16(node: Node) -> bool:
    """Whether ``node`` (an ``aten.view.dtype``) reinterprets bf16 bits, either way."""
    source = node.args[0]
    return isinstance(source, Output) and torch.bfloat16 in (source.meta.dtype, node.args[1])


#: Ops that cast their Scalar argument to ``self``'s dtype (the value fills
#: or pads an integer tensor): a float scalar parameter feeding one with an
#: integer result is passed as an int, a pad value as the result's float dtype
#: (``LoweringContext._scalars_in_result_dtype``).
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


def _fill_as_bool(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``new_full``'s constant integer fill value as the bool it fills a bool tensor with.
    torch-mlir converts it to ``i1`` by truncation: ``b.new_full((3,), 2)`` was all False on
    reference and iree-cpu (eager: True; fuzz seed 9613). ``full``, ``full_like``, ``fill`` and
    the other fills (and float values) were right."""
    def conv(v: Any) -> Any:
        return bool(v) if isinstance(v, int) and not isinstance(v, bool) else v

    if len(args) > 2:
        return (*args[:2], conv(args[2]), *args[3:]), kwargs
    if "fill_value" in kwargs:
        return args, {**kwargs, "fill_value": conv(kwargs["fill_value"])}
    return args, kwargs


def _guess_node(graph: LazyGraph, e: Exception) -> Node | None:
    text = str(e)
    for node in graph.nodes:
        short = node.name.split(".")[1] if "." in node.name else node.name
        if short and short in text:
            return node
    return None


def lower_graph(graph: LazyGraph, boundary_casts: dict[torch.dtype, torch.dtype] | None = None,
                emulate_bf16: str | None = None, exact_max_pool: bool = True,
                int64_extrema: bool = False, nan_checked_extrema: bool = False,
                positive_zero_sums: bool = False, subnormal_logs: bool = False,
                float64_erf: bool = False, short_loops: bool = False, wide_sums: bool = False,
                conv_gradients_as_matmuls: bool = False) -> Computation:
    """LazyGraph -> torch-dialect Computation (``LoweringContext`` says what the options do)."""
    return LoweringContext(graph, boundary_casts, emulate_bf16, exact_max_pool, int64_extrema,
                           nan_checked_extrema, positive_zero_sums, subnormal_logs, float64_erf,
                           short_loops, wide_sums, conv_gradients_as_matmuls).build()


def _is_number(x: Any) -> bool:
    """A constant Python number (a runtime scalar parameter is an FX node)."""
    return isinstance(x, (bool, int, float))


def _first_is_tensor(op: Any) -> bool:
    """Whether ``op``'s first argument is typed Tensor (``self`` of ``add.Tensor``)."""
    args = op._schema.arguments
    return bool(args) and str(args[0].type) == "Tensor"


def _is_tensor_value(x: Any) -> bool:
    """A traced tensor (a runtime scalar parameter is an Output too, of a ScalarParam)."""
    return isinstance(x, Output) and not isinstance(x.node, ScalarParam)
