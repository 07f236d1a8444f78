"""Dynamic dimensions by anti-unification of two lowered FX graphs.

A lazy tracer sees concrete sizes only: ``x.view(x.size(0) * 4, -1)`` is
recorded as ``view(x, [32, -1])``. To compile one function for every batch
size, the sizes a graph depends on must be found again. This module does it
on the lowering's own output, the final FX graph (after decompositions and
rewrites), so no lowering code needs to know about symbolic shapes:

* ``observe`` reads a concrete FX graph into its *structure* (ops, wiring,
  dtypes, ranks and every constant except integers) and its *numbers* (each
  integer argument and each dimension of each value, in a fixed order).
* ``unify(a, b)`` compares two observations of the same structure. A
  dimension that differs becomes dynamic (``?``); an integer argument that
  differs must equal, in both samples, a dimension (or a product of
  consecutive dimensions) of an earlier value, or its negation (a slice
  from the end, ``x[:, -n:]``), and becomes that ``aten.sym_size``
  expression; anything else that differs refuses.
* ``Plan.admits(c)`` decides whether a third graph is an instance: the same
  structure, every static number equal, every expression equal to the
  value it stands for in ``c``, every dynamic dimension at least 2.

That last check is what makes reuse exact: a graph the plan admits is, number
for number, the plan's function evaluated at ``c``'s sizes. A lowering that
bakes a size into a constant (a decomposition traced at one shape, a float
``1/n``) either fails to unify or fails the check, and the graph is compiled
statically as before. Sizes 0 and 1 are never dynamic: broadcasting treats a
1 differently, and compilers assume a dynamic size is not one (torch.compile
specializes both the same way).
"""

from __future__ import annotations

import json
import logging
import operator
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from .computation import ArgInfo, Computation, ResultInfo

__all__ = ["Observation", "Plan", "observe", "speculate", "unify"]

#: An integer argument's expression: the product of dims ``dims`` of value
#: ``value``, negated when the flag is set.
Expr = tuple[int, tuple[int, ...], bool]


@dataclass
class Observation:
    """One concrete FX graph, split into structure and numbers."""

    graph: Graph
    #: Hashable description of everything but integers and sizes.
    structure: tuple
    #: Every integer argument, in traversal order.
    ints: list[int]
    #: Per integer argument, the FX value index it belongs to (for expressions: only earlier values).
    int_owner: list[int]
    #: Per FX value (node order), its dims, flattened over tuple elements.
    dims: list[tuple[int, ...]]
    #: Per FX value, whether it is one tensor (only those are read by ``sym_size``).
    single: list[bool]
    #: The computation's arguments and results as the lowering typed them (static).
    args: list[ArgInfo] = field(default_factory=list)
    results: list[ResultInfo] = field(default_factory=list)
    #: False when the graph holds a constant this module does not read (a tensor):
    #: such a graph is never generalized nor admitted.
    supported: bool = True
    _text: str | None = field(default=None, repr=False)

    @property
    def text(self) -> str:
        """``repr(structure)``, made once (compared with a plan read from a record)."""
        if self._text is None:
            self._text = repr(self.structure)
        return self._text


@dataclass
class Plan:
    """What ``unify`` decided: which numbers stay and which follow the sizes."""

    #: The samples' structure; None in a plan read back from a record (then ``structure_text``).
    structure: tuple | None
    #: Per integer argument: ``("c", value)`` or ``("e", (value index, dims))``.
    ints: list[tuple[str, Any]]
    #: Per FX value, per dim: the static size, or None for dynamic.
    dims: list[tuple[int | None, ...]]
    #: The sample the plan's function is built from (None when read back from a record).
    sample: Observation | None = field(repr=False)
    #: ``repr(structure)``: exact (every element's repr is distinct), and what a record keeps.
    structure_text: str | None = field(default=None, repr=False)

    @property
    def dynamic_count(self) -> int:
        return sum(d is None for ds in self.dims for d in ds)

    def to_record(self) -> bytes:
        """The plan as bytes for a cache shared between processes (not the sample)."""
        text = self.structure_text if self.structure is None else repr(self.structure)
        head = json.dumps({"ints": [[k, v if k == "c" else [v[0], list(v[1]), v[2]]] for k, v in self.ints],
                           "dims": [list(d) for d in self.dims]}).encode()
        return struct.pack("<I", len(head)) + head + zlib.compress(text.encode(), 1)

    @classmethod
    def from_record(cls, record: bytes) -> Plan:
        (n,) = struct.unpack_from("<I", record)
        head = json.loads(record[4:4 + n])
        ints = [("c", v) if k == "c" else ("e", (v[0], tuple(v[1]), bool(v[2]))) for k, v in head["ints"]]
        dims = [tuple(d) for d in head["dims"]]
        return cls(None, ints, dims, None, zlib.decompress(record[4 + n:]).decode())

    def admits(self, c: Observation) -> bool:
        """Whether ``c`` is this plan's function at ``c``'s sizes (see the module doc)."""
        same = c.structure == self.structure if self.structure is not None else c.text == self.structure_text
        if not same or not c.supported or len(c.dims) != len(self.dims) or len(c.ints) != len(self.ints):
            return False
        for want, got in zip(self.dims, c.dims):
            for w, g in zip(want, got):
                if (g < 2) if w is None else (w != g):
                    return False
        for (kind, want), got in zip(self.ints, c.ints):
            if kind == "c":
                if want != got:
                    return False
            elif _evaluate(want, c.dims) != got:
                return False
        return True

    def describe(self) -> str:
        """Which FX values have dynamic dims, e.g. ``arg0[?,8]``, for LAZY_DEBUG."""
        out = []
        if self.sample is None:
            return f"({self.dynamic_count} dynamic dims)"
        for node, ds in zip(self.sample.graph.nodes, self.dims):
            if node.op == "placeholder" and any(d is None for d in ds):
                out.append(f"{node.name}[{','.join('?' if d is None else str(d) for d in ds)}]")
        return " ".join(out)


def _evaluate(expr: Expr, dims: list[tuple[int, ...]]) -> int:
    value, ds, negated = expr
    n = 1
    for d in ds:
        n *= dims[value][d]
    return -n if negated else n


def _val_skeleton(val: Any, dims: list[int]) -> Any:
    """A value's type without its sizes; its sizes appended to ``dims``."""
    if isinstance(val, torch.Tensor):
        dims.extend(int(d) for d in val.shape)
        return ("t", val.dtype, val.dim())
    if isinstance(val, list | tuple):
        return tuple(_val_skeleton(v, dims) for v in val)
    if val is None:
        return None
    return ("s", type(val).__name__)  # a scalar's value is a runtime input, not structure


def observe(graph: Graph) -> Observation:
    """``graph``'s structure and numbers (see the module doc)."""
    index: dict[FxNode, int] = {}
    ints: list[int] = []
    owner: list[int] = []
    structure: list[Any] = []
    all_dims: list[tuple[int, ...]] = []
    single: list[bool] = []

    def arg(x: Any) -> Any:
        if isinstance(x, FxNode):
            return ("n", index[x])
        if isinstance(x, bool):
            return ("b", x)
        if isinstance(x, int):
            ints.append(x)
            owner.append(len(index))
            return "i"
        if isinstance(x, float):
            return ("f", struct.pack("<d", x))  # -0.0 and NaN payloads kept apart
        if isinstance(x, list):
            return ("l", tuple(arg(v) for v in x))
        if isinstance(x, tuple):
            return ("u", tuple(arg(v) for v in x))
        if isinstance(x, dict):
            return ("d", tuple((k, arg(v)) for k, v in x.items()))
        if x is None or isinstance(x, str | torch.dtype | torch.device | torch.memory_format | torch.layout):
            return x
        raise _Unsupported(f"constant {type(x).__name__}")

    try:
        for node in graph.nodes:
            if node.op == "get_attr":  # a loop's body or condition (lowering/loops.py): sizes inside it too
                raise _Unsupported("a subgraph")
            entry = (node.op, _target_name(node.target), arg(node.args), arg(node.kwargs))
            dims: list[int] = []
            val = node.meta.get("val") if node.op != "output" else None
            structure.append((entry, _val_skeleton(val, dims)))
            index[node] = len(index)
            all_dims.append(tuple(dims))
            single.append(isinstance(val, torch.Tensor))
    except _Unsupported:
        return Observation(graph, ("unsupported",), [], [], [], [], supported=False)
    return Observation(graph, tuple(structure), ints, owner, all_dims, single)


class _Unsupported(Exception):
    pass


def _target_name(target: Any) -> str:
    if isinstance(target, str):
        return target
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', None) or target}"


def unify(a: Observation, b: Observation) -> Plan | None:
    """A plan both ``a`` and ``b`` are instances of, with the dims where they
    differ dynamic; None if they are not one function of their sizes."""
    if not (a.supported and b.supported) or a.structure != b.structure or a.dims == b.dims:
        return None
    dims: list[tuple[int | None, ...]] = []
    # (size in a, size in b) -> the first expression that has them, over dynamic values only.
    sources: dict[tuple[int, int], Expr] = {}
    for da, db in zip(a.dims, b.dims):
        merged: list[int | None] = []
        for x, y in zip(da, db):
            if x == y:
                merged.append(x)
            elif x < 2 or y < 2:
                return None  # 0 and 1 are never dynamic
            else:
                merged.append(None)
        dims.append(tuple(merged))
    # Expressions read one tensor's dims (a multi-result op's tensors are
    # read through its getitem values).
    for value, (da, db) in enumerate(zip(a.dims, b.dims)):
        if not a.single[value]:
            continue
        n = len(da)
        for i in range(n):
            pa = pb = 1
            for j in range(i, n):
                pa *= da[j]
                pb *= db[j]
                if pa != pb:
                    sources.setdefault((pa, pb), (value, tuple(range(i, j + 1)), False))
                    sources.setdefault((-pa, -pb), (value, tuple(range(i, j + 1)), True))
    ints: list[tuple[str, Any]] = []
    for x, y, owner in zip(a.ints, b.ints, a.int_owner):
        if x == y:
            ints.append(("c", x))
            continue
        expr = sources.get((x, y))
        if expr is None or expr[0] >= owner:
            return None  # a number that follows no size (a baked 1/n, a position)
        ints.append(("e", expr))
    plan = Plan(a.structure, ints, dims, a)
    return plan if plan.admits(a) and plan.admits(b) else None


def speculate(sample: Observation, sizes: frozenset[int] | set[int], delta: int = 1) -> Plan | None:
    """A plan for ``sample``'s family before a second member is seen: ``sample``
    unified with ``sample`` replayed at other sizes (each input dimension whose
    size is in ``sizes`` grown by ``delta``), or None.

    The replay runs the FX graph on fake tensors. An integer argument that a
    schema types as a size (``SymInt``, ``SymInt[]``, ``Scalar``; never an
    ``int`` such as a dim) follows the sizes when it equals, in ``sample``, a
    dimension, a product of consecutive dimensions of an earlier value, or its
    negation (the rule ``unify`` uses), and that expression changed in the
    replay; every other number stays. The plan is a guess: a later member is
    run by it only if ``Plan.admits`` that member's own lowered graph, so an
    integer that only coincided with a size costs a compile, never a value.
    Any failure (an op without a fake kernel, a view whose numel no longer
    fits, a replay where no size changed) gives None; sizes below 2 are
    never changed.
    """
    if not sample.supported or not sizes:
        return None
    # A meta kernel that raises is logged by FakeTensorMode at ERROR level, a traceback per
    # op: an expected outcome of a guess, not the user's error (it flooded a fuzz run's stderr).
    fake_log = logging.getLogger("torch._subclasses.fake_tensor")
    level = fake_log.level
    fake_log.setLevel(logging.CRITICAL)
    try:
        replayed = _replay(sample, {s for s in sizes if s >= 2}, delta)
    except Exception:  # anything the fake replay cannot run: no speculation
        return None
    finally:
        fake_log.setLevel(level)
    if replayed is None:
        return None
    return unify(sample, replayed)


def _replay(sample: Observation, sizes: set[int], delta: int) -> Observation | None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    out = Graph()
    new: dict[FxNode, FxNode] = {}
    vals: dict[FxNode, Any] = {}
    #: Signed product of consecutive dims of an earlier single-tensor value, in ``sample``
    #: -> its value in the replay; the first expression that changed, in ``unify``'s order.
    follows: dict[int, int] = {}
    changed = False

    def learn(old: tuple[int, ...], now: tuple[int, ...]) -> None:
        for i in range(len(old)):
            pa = pb = 1
            for j in range(i, len(old)):
                pa *= old[j]
                pb *= now[j]
                if pa != pb:
                    follows.setdefault(pa, pb)
                    follows.setdefault(-pa, -pb)

    def number(x: Any, is_size: bool) -> Any:
        if isinstance(x, FxNode):
            return new[x]
        if isinstance(x, bool) or not isinstance(x, int):
            if isinstance(x, list | tuple):
                return type(x)(number(v, is_size) for v in x)
            return x
        return follows.get(x, x) if is_size else x

    def value(x: Any) -> Any:
        if isinstance(x, FxNode):
            return vals[x]
        if isinstance(x, list | tuple):
            return type(x)(value(v) for v in x)
        if isinstance(x, dict):
            return {k: value(v) for k, v in x.items()}
        return x

    kinds = [a.kind for a in sample.args]
    packs: set[FxNode] = set()  # scalar packs: their length counts parameters, not data
    with torch.device("cpu"):
        for index, node in enumerate(sample.graph.nodes):
            old = node.meta.get("val")
            if node.op == "placeholder":
                if not isinstance(old, torch.Tensor):
                    return None
                if len(new) < len(kinds) and kinds[len(new)] == "scalar_pack":
                    packs.add(node)
                    shape = list(old.shape)
                else:
                    shape = [d + delta if d in sizes else d for d in old.shape]
                changed |= list(old.shape) != shape
                with mode:
                    val = torch.empty(shape, dtype=old.dtype)
                copy = out.placeholder(node.name)
            elif node.op == "call_function":
                # The select of a scalar parameter from its pack takes a position, never a size.
                sized = _size_arguments(node.target) if not (node.args and node.args[0] in packs) else _NO_SIZES
                val = args = kwargs = None
                for attempt in (sized, _NO_SIZES) if sized != _NO_SIZES else (sized,):
                    args = tuple(number(a, i in attempt[0]) for i, a in enumerate(node.args))
                    kwargs = {k: number(v, k in attempt[1]) for k, v in node.kwargs.items()}
                    if not isinstance(old, torch.Tensor | list | tuple):
                        val = old  # a scalar (a parameter read from its pack): not a size
                        break
                    try:
                        with mode:
                            val = node.target(*value(args), **value(kwargs))
                        break
                    except Exception:
                        # An integer that only coincided with a size (an index out of range
                        # once followed): keep it. If the op fails with every number kept,
                        # the replay fails.
                        if attempt is _NO_SIZES:
                            raise
                copy = out.create_node(node.op, node.target, args, kwargs, name=node.name)
            elif node.op == "output":
                out.output(number(node.args[0], False))
                break
            else:
                return None
            copy.meta["val"] = val
            new[node], vals[copy] = copy, val
            if sample.single[index] and isinstance(val, torch.Tensor):
                learn(sample.dims[index], tuple(int(d) for d in val.shape))
    if not changed:
        return None
    return observe(out)


_SIZE_ARGUMENTS: dict[Any, tuple[frozenset[int], frozenset[str]]] = {}
_NO_SIZES: tuple[frozenset[int], frozenset[str]] = (frozenset(), frozenset())


def _size_arguments(target: Any) -> tuple[frozenset[int], frozenset[str]]:
    """The positions and names of ``target``'s arguments that may carry a size:
    typed ``SymInt`` (``SymInt[]``, ``SymInt?``) or ``Scalar`` by its schema.
    Nothing for a target without an ATen schema (``operator.getitem``)."""
    known = _SIZE_ARGUMENTS.get(target)
    if known is None:
        known = _NO_SIZES
        schema = getattr(target, "_schema", None)
        if schema is not None:
            try:
                from torchgen.model import FunctionSchema

                parsed = FunctionSchema.parse(str(schema).split("::", 1)[-1])
                sized = {a.name for a in parsed.arguments.flat_all
                         if a.type.is_symint_like() or str(a.type) in ("Scalar", "Scalar?")}
                positional = [a.name for a in schema.arguments if not a.kwarg_only]
                known = (frozenset(i for i, n in enumerate(positional) if n in sized), frozenset(sized))
            except Exception:
                pass
        _SIZE_ARGUMENTS[target] = known
    return known


#: Views whose input is flattened first when it has two dynamic dims (symbolic_graph).
_VIEWS = frozenset({torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default})
#: Reductions of every element to one boolean, taken over the flattened input when it has a
#: dynamic dim and more than one dim (``symbolic_graph``).
_WHOLE_BOOL_REDUCTIONS = frozenset({torch.ops.aten.any.default, torch.ops.aten.all.default})


def symbolic_graph(plan: Plan) -> tuple[Graph, dict[int, list[int]]]:
    """The plan's function as an FX graph for torch-mlir's importer: dynamic
    dims typed ``?`` (SymInts in ``meta["val"]``), each expression an
    ``aten.sym_size.int`` (times more of them) of the value it reads.

    Also returns, per placeholder index, its dims with -1 for dynamic ones.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    mode = FakeTensorMode(shape_env=env, allow_non_fake_inputs=True)
    sample = plan.sample
    src_nodes = list(sample.graph.nodes)
    out = Graph()
    new: list[FxNode] = []
    syms: dict[tuple[int, int], Any] = {}  # (value, flat dim) -> its SymInt
    ints = iter(plan.ints)
    size_nodes: dict[tuple[int, int], FxNode] = {}

    def sym_size(value: int, flat_dim: int) -> FxNode:
        node = size_nodes.get((value, flat_dim))
        if node is None:
            node = out.call_function(torch.ops.aten.sym_size.int, (new[value], flat_dim))
            node.meta["val"] = _sym(value, flat_dim)
            size_nodes[value, flat_dim] = node
        return node

    def _sym(value: int, flat_dim: int) -> Any:
        s = syms.get((value, flat_dim))
        if s is None:
            s = syms[value, flat_dim] = env.create_unbacked_symint()
        return s

    def expression(expr: Expr) -> FxNode:
        value, ds, negated = expr
        node = sym_size(value, ds[0])
        for d in ds[1:]:
            factor = sym_size(value, d) if plan.dims[value][d] is None else plan.dims[value][d]
            prod = out.call_function(operator.mul, (node, factor))
            prod.meta["val"] = node.meta["val"] * (factor.meta["val"] if isinstance(factor, FxNode) else factor)
            node = prod
        if negated:
            neg = out.call_function(operator.neg, (node,))
            neg.meta["val"] = -node.meta["val"]
            node = neg
        return node

    def arg(x: Any) -> Any:
        if isinstance(x, FxNode):
            return new[position[x]]
        if isinstance(x, bool):
            return x
        if isinstance(x, int):
            kind, what = next(ints)
            return what if kind == "c" else expression(what)
        if isinstance(x, list):
            return [arg(v) for v in x]
        if isinstance(x, tuple):
            return tuple(arg(v) for v in x)
        if isinstance(x, dict):
            return {k: arg(v) for k, v in x.items()}
        return x

    def flattened(value: int) -> FxNode:
        # torch-mlir 20261001 miscompiles a view that merges two dynamic dims
        # before a static one: view([?,?,4] -> [?*?, 4]) is lowered as a cast
        # to ?x1x4 and a collapse, so the result has the wrong size (wrong
        # values, then heap corruption in the reference runtime). A view from
        # a 1-d tensor is lowered correctly, so such views go through one.
        numel = expression((value, tuple(range(len(plan.dims[value]))), False))
        flat = out.call_function(torch.ops.aten.view.default, (new[value], [numel]))
        with mode:
            flat.meta["val"] = torch.empty([numel.meta["val"]], dtype=new[value].meta["val"].dtype)
        return flat

    def inferred(value: int, sizes: list[Any] | tuple[Any, ...]) -> list[Any]:
        # A view's -1 next to a dynamic size, computed here as numel // (the other sizes):
        # on iree-cpu, torch-mlir 20261001's own inference of it (view([?,?,32] -> [-1,?,32]),
        # HF GPT-2's ``view((-1,) + input_shape[1:])``) asked the allocator for a garbage size
        # or returned wrong values, while reference was right.
        static = 1
        rest: FxNode | None = None
        for v in sizes:
            if isinstance(v, FxNode):
                if rest is None:
                    rest = v
                else:
                    rest = out.call_function(operator.mul, (rest, v))
                    rest.meta["val"] = rest.args[0].meta["val"] * v.meta["val"]
            elif v != -1:
                static *= v
        numel = expression((value, tuple(range(len(plan.dims[value]))), False))
        if rest is not None and static != 1:
            rest = out.call_function(operator.mul, (rest, static))
            rest.meta["val"] = rest.args[0].meta["val"] * static
        divisor: Any = static if rest is None else rest
        size = out.call_function(operator.floordiv, (numel, divisor))
        size.meta["val"] = numel.meta["val"] // (divisor.meta["val"] if isinstance(divisor, FxNode) else divisor)
        return [size if isinstance(v, int) and v == -1 else v for v in sizes]

    position = {n: i for i, n in enumerate(src_nodes)}
    placeholder_dims: dict[int, list[int]] = {}
    for i, node in enumerate(src_nodes):
        args, kwargs = arg(node.args), arg(node.kwargs)
        if node.target in _VIEWS and isinstance(node.args[0], FxNode):
            source = position[node.args[0]]
            if any(d is None for d in plan.dims[source]) and isinstance(args[1], list | tuple) and -1 in args[1]:
                args = (args[0], inferred(source, args[1]), *args[2:])
            if sum(d is None for d in plan.dims[source]) >= 2:
                args = (flattened(source), *args[1:])
        elif node.target in _WHOLE_BOOL_REDUCTIONS and isinstance(node.args[0], FxNode):
            # IREE 3.13 failed to compile ``any`` of a 2-d boolean with a dynamic dim made by an
            # expand (the index check of ``embedding(ids.expand(b, s))``, HF BERT's token types):
            # "exceeded stack allocation limit of 32768 bytes ... Got 18014398509481984 bytes",
            # so BERT's step compiled statically at every new size. Over the 1-d view it compiles.
            source = position[node.args[0]]
            if len(plan.dims[source]) >= 2 and any(d is None for d in plan.dims[source]):
                args = (flattened(source), *args[1:])
        copy = out.create_node(node.op, node.target, args, kwargs, name=node.name)
        if "stack_trace" in node.meta:
            copy.meta["stack_trace"] = node.meta["stack_trace"]
        if node.op != "output":
            flat = iter(range(len(plan.dims[i])))
            val = node.meta.get("val")
            copy.meta["val"] = _symbolic_val(val, plan.dims[i], flat, lambda d, i=i: _sym(i, d), mode)
            if copy.meta["val"] is val and "tensor_meta" in node.meta:
                copy.meta["tensor_meta"] = node.meta["tensor_meta"]
        if node.op == "placeholder":
            placeholder_dims[len(placeholder_dims)] = [-1 if d is None else d for d in plan.dims[i]]
        new.append(copy)
    return out, placeholder_dims


def _symbolic_val(val: Any, dims: tuple[int | None, ...], flat: Any, sym: Any, mode: Any) -> Any:
    if isinstance(val, torch.Tensor):
        shape = []
        for _ in range(val.dim()):
            d = next(flat)
            shape.append(dims[d] if dims[d] is not None else sym(d))
        if all(isinstance(s, int) for s in shape):
            return val
        with mode:
            return torch.empty(shape, dtype=val.dtype)
    if isinstance(val, list | tuple):
        return type(val)(_symbolic_val(v, dims, flat, sym, mode) for v in val)
    return val


def dynamic_computation(plan: Plan, func_name: str) -> Computation:
    """The plan imported as a torch-dialect module named ``func_name``: the
    sample's signature with -1 for the dynamic dims of arguments and results."""
    from torch_mlir.extras.fx_importer import FxImporter

    from .context import mlir_context

    graph, placeholder_dims = symbolic_graph(plan)
    importer = FxImporter(context=mlir_context())
    importer.import_stateless_graph(graph, func_name=func_name)
    static = plan.sample
    args = [ArgInfo(a.kind, tuple(placeholder_dims[i]), a.dtype, a.logical_dtype) for i, a in enumerate(static.args)]
    output = next(n for n in graph.nodes if n.op == "output")
    results = []
    for value, info in zip(output.args[0], static.results):
        shape = tuple(-1 if not isinstance(d, int) else d for d in value.meta["val"].shape)
        results.append(ResultInfo(shape, info.dtype, info.logical_dtype))
    return Computation(module=importer.module, func_name=func_name, graph_hash=func_name,
                       args=args, results=results)


def sample(graph: Any, boundary_casts: dict[torch.dtype, torch.dtype] | None = None,
           emulate_bf16: str | None = None, exact_max_pool: bool = True,
           int64_extrema: bool = False, nan_checked_extrema: bool = False,
           positive_zero_sums: bool = False, subnormal_logs: bool = False,
           float64_erf: bool = False, short_loops: bool = False, wide_sums: bool = False,
           conv_gradients_as_matmuls: bool = False) -> Observation:
    """``graph`` (a LazyGraph) lowered to FX as ``lower_graph`` would with these
    options, observed (the FX graph is not imported)."""
    from .context import LoweringContext

    ctx = LoweringContext(graph, boundary_casts, emulate_bf16, exact_max_pool, int64_extrema, nan_checked_extrema,
                          positive_zero_sums, subnormal_logs, float64_erf, short_loops, wide_sums,
                          conv_gradients_as_matmuls)
    obs = observe(ctx.build_fx())
    obs.args, obs.results = list(ctx._args), list(ctx._results)
    return obs
