"""Torch-dialect rewrites that keep IREE away from code it miscompiles.

Constant fills become splat literals (IREE 3.13 on llvm-cpu, ``cpu=host``).
torch-mlir lowers ``aten.fill.Scalar(x, c)`` and ``aten.zero(x)`` to a
``linalg.generic`` that reads ``x`` only for its shape and yields ``c``. IREE
canonicalizes that generic into ``linalg.fill`` *after* it has formed its
dispatches, where CSE merges a zero fill used as a matmul operand with the
``linalg.fill`` of zeros that initializes the matmul's accumulator:
``linalg.matmul ins(%z, %w) outs(%z)``. The llvm-cpu code generated for the
host CPU (AVX2 here) then reads the operand from the accumulator buffer it is
writing: ``F.linear(torch.zeros(2, 8), W, b)`` came out off by up to 5.9,
and every ``nn.RNN/GRU/LSTM`` (their hidden state starts as zeros) drifted.
``torch.zeros`` on the lazy device is recorded as ``empty`` + ``zero_``,
hence the fill. A splat literal (``torch.vtensor.literal(dense<c>)``) stays
an ``arith.constant`` that CSE never merges with a ``linalg.fill``, so the
matmul reads a constant and its accumulator stays private. Every constant
fill is rewritten, not only zeros: any reduction whose init value equals a
filled operand (max-pool of a ``-inf`` fill) could be merged the same way.

``test/test_iree_correctness.py`` keeps a test that compiles the unrewritten
form, so an IREE that fixes the miscompile (or a rewrite that stops
applying) shows up.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

import torch

#: torch-dialect element types whose splat literal we can write exactly. Not
#: ``ui8``: ``torch.vtensor.literal`` infers ``si8`` from a ``ui8`` attribute
#: (torch-mlir 20261001) and the module no longer verifies; uint8 fills stay fills.
_DTYPES = {
    "f64": torch.float64, "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
    "si64": torch.int64, "si32": torch.int32, "si16": torch.int16, "si8": torch.int8,
    "i1": torch.bool,
}
_FILL_OPS = ("torch.aten.fill.Scalar", "torch.aten.zero")
_CONSTANTS = ("torch.constant.int", "torch.constant.float", "torch.constant.bool")


def rewrite_for_iree(mlir: str) -> str:
    """``mlir`` (torch dialect) with every constant fill of a static shape as a splat literal."""
    if not any(op in mlir for op in _FILL_OPS):
        return mlir
    from torch_mlir import ir

    def to_literal(block: Any, op: Any) -> bool:
        literal = _splat_literal(op.operation)
        if literal is None:
            return False
        with ir.InsertionPoint(op), op.location:
            new = ir.Operation.create("torch.vtensor.literal", results=[op.results[0].type],
                                      attributes={"value": ir.Attribute.parse(literal)})
        op.results[0].replace_all_uses_with(new.result)
        op.operation.erase()
        return True

    return _rewrite_each_op(mlir, to_literal)


def merge_duplicates(mlir: str) -> str:
    """``mlir`` with equal value-semantic ops merged (a common-subexpression elimination), before
    any rewrite here puts a value behind ``util.optimization_barrier``.

    IREE 3.13 takes a barrier's result for a value of its own, yet it is its operand's buffer.
    IREE merges equal ops itself, after the barriers went in, so a barrier on one of two equal
    ops then shares a buffer with the other, and a write in place into the other reached the
    barrier's readers: ``y = x[:-1].clone(); z = x[:-1].clone(); x[1:] = y; z[0] = 100`` gave
    ``y[0] == 100`` on iree-cpu and iree-vulkan (``materialize_self_updates`` put ``y`` behind a
    barrier; ``z`` was the same slice). Merged first, every reader goes through the barrier, and
    IREE copies before it writes. What still slips through is refused
    (``miscompiles.writes_through_a_barrier_alias``). MLIR's own ``cse`` pass does not do this:
    torch ops do not declare themselves free of side effects.

    Only ops on value tensors and scalars are merged, never one that draws random numbers (the
    graph's random numbers are inputs, but a hand-written module may hold such an op).
    """
    if "torch.aten." not in mlir:
        return mlir
    seen: dict[tuple, Any] = {}
    where: list[Any] = [None]

    def merge(block: Any, op: Any) -> bool:
        if where[0] is None or where[0] != block:  # equal ops of one block only
            where[0] = block
            seen.clear()
        op = op.operation
        if not _MERGEABLE.match(op.name) or _RANDOM.search(op.name) or len(op.regions):
            return False
        types = [str(v.type) for v in (*op.operands, *op.results)]
        if any(t.startswith("!torch.tensor") for t in types):
            return False
        key = (op.name, tuple(op.operands), tuple(sorted((n, str(op.attributes[n])) for n in op.attributes)),
               tuple(types))
        kept = seen.get(key)
        if kept is None:
            seen[key] = op
            return False
        for old, new in zip(op.results, kept.results):
            old.replace_all_uses_with(new)
        op.erase()
        return True

    return _rewrite_each_op(mlir, merge)


#: Ops ``merge_duplicates`` may merge: value-semantic ATen/prims ops, constants and lists.
_MERGEABLE = re.compile(r"^torch\.(?:aten|prims)\.|^torch\.constant\.|^torch\.vtensor\.literal$"
                        r"|^torch\.prim\.(?:ListConstruct|NumToTensor\.Scalar)$")
_RANDOM = re.compile(r"rand|bernoulli|normal|uniform|exponential|multinomial|dropout|cauchy|geometric|poisson")


def _rewrite_each_op(mlir: str, visit: Callable[[Any, Any], bool]) -> str:
    """``mlir`` after ``visit(block, op)`` on every op of every function (True: it changed
    something); the text itself when nothing changed."""
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d

    with ir.Context() as ctx, ir.Location.unknown():
        torch_d.register_dialect(ctx)
        ctx.allow_unregistered_dialects = True  # torch_c and util ops (``hide_zero_literals``)
        module = ir.Module.parse(mlir)
        changed = False
        for func in module.body.operations:
            if func.operation.name != "func.func":
                continue
            for block in func.operation.regions[0].blocks:
                for op in list(block.operations):
                    changed |= visit(block, op)
        if not changed:
            return mlir
        return module.operation.get_asm(enable_debug_info=True)


def _splat_literal(op) -> str | None:  # noqa: ANN001 - a torch_mlir.ir.Operation
    """The ``dense<...> : tensor<...>`` attribute text equal to ``op``'s result, or None."""
    if op.name not in _FILL_OPS or len(op.results) != 1:
        return None
    rtype = str(op.results[0].type)
    if not rtype.startswith("!torch.vtensor<[") or rtype.count(",") < 1:
        return None
    dims_text, _, elem = rtype[len("!torch.vtensor<["):-1].rpartition("],")
    dtype = _DTYPES.get(elem)
    if dtype is None:
        return None
    dims = [d.strip() for d in dims_text.split(",") if d.strip()]
    if any(not d.isdigit() for d in dims):
        return None  # dynamic sizes: a literal cannot express them
    if op.name == "torch.aten.zero":
        value: bool | int | float = 0
    else:
        owner = op.operands[1].owner
        if not hasattr(owner, "name") or owner.name not in _CONSTANTS:
            return None  # a runtime scalar: never equal to an accumulator's constant init
        value = _constant_value(owner)
    # Eager's own conversion of the fill value to the tensor's dtype.
    element = torch.empty((), dtype=dtype).fill_(value)
    shape = "x".join(dims + [_builtin_elem(elem)])
    return f"dense<{_element_text(element, dtype)}> : tensor<{shape}>"


def _constant_value(op) -> bool | int | float:  # noqa: ANN001
    attr = op.attributes["value"]
    if op.name == "torch.constant.bool":
        return bool(attr.value)
    if op.name == "torch.constant.int":
        return int(attr.value)
    return float(attr.value)


def _builtin_elem(elem: str) -> str:
    return "i1" if elem == "i1" else elem


def _element_text(element: torch.Tensor, dtype: torch.dtype) -> str:
    """One element as MLIR attribute text; floats by their bits (exact for NaN, inf, -0.0)."""
    if dtype == torch.bool:
        return "true" if bool(element) else "false"
    if not dtype.is_floating_point:
        return str(int(element))
    if dtype == torch.float64:
        bits = struct.unpack("<Q", struct.pack("<d", float(element)))[0]
        return f"0x{bits:016X}"
    width = {torch.float32: (torch.int32, 8), torch.float16: (torch.int16, 4), torch.bfloat16: (torch.int16, 4)}
    int_type, digits = width[dtype]
    bits = int(element.view(int_type)) & ((1 << (4 * digits)) - 1)
    return f"0x{bits:0{digits}X}"


#: A floating zero splat of rank 1 or more as torch-mlir prints it or as ``_element_text`` writes
#: it: ``0.000000e+00``, ``-0.000000e+00``, ``0x00000000`` (+0.0), ``0x80000000`` (-0.0) and their
#: f16/f64 widths. Not a 0-d one: those are the lowering's own scalars, such as the +0.0 of
#: ``select(r == 0, +0.0, r)`` (``positive_zero_sums``), which ``zero_operands_on_spirv`` must
#: see as a constant to know the guard.
_ZERO_SPLAT = re.compile(r"dense<(?:-?0\.0+e\+00|0x0+|0x80*)>\s*:\s*tensor<(?:\d+x)+(?:f16|bf16|f32|f64)>")


def hide_zero_literals(mlir: str) -> str:
    """``mlir`` with every floating zero splat literal read through ``util.optimization_barrier``.

    For lavapipe only (``backends/iree/miscompiles.py``, the zero operands): its shader
    compiler shortcuts arithmetic with a constant zero (``x * 0.0`` is 0 for a NaN ``x``), so a
    graph where IREE folds a zero into a dispatch is refused and runs op by op. Adam's first step
    (its moments start as zeros) and every RNN step (its hidden state starts as zeros) were such
    graphs. Behind the barrier IREE cannot fold the zero: the splat becomes a buffer IREE fills,
    and the shaders read it from memory, where lavapipe computes IEEE arithmetic.

    A scatter into zeros (``index_put``, ``scatter_add``: the backward of every embedding and
    indexing read) keeps a zero literal of its own: IREE scatters in place, and through the
    one shared barrier two such scatters wrote into one buffer (each result held both).
    """
    if "torch.vtensor.literal" not in mlir:
        return mlir
    from torch_mlir import ir

    from .donation import _materialize

    def hide(block: Any, op: Any) -> bool:
        if op.operation.name != "torch.vtensor.literal" or not op.results[0].uses:
            return False
        if _ZERO_SPLAT.fullmatch(str(op.operation.attributes["value"])) is None:
            return False
        scatters = [u.owner for u in op.results[0].uses
                    if u.operand_number == 0 and _SCATTERS.match(u.owner.name)]
        _materialize(block, op.results[0])
        for scatter in scatters:  # each its own zeros, not the shared barrier's buffer
            zeros = op.operation.clone(ip=ir.InsertionPoint(scatter))
            scatter.operands[0] = zeros.results[0]
        return True

    return _rewrite_each_op(mlir, hide)


_SORTS = {"torch.aten.sort": (1, 2), "torch.aten.sort.stable": (2, 3)}  # op -> (dim, descending) operands


def separate_sorts(mlir: str, keep_rank: bool = False) -> str:
    """``mlir`` with the second and later sorts of one input type and dim each sorting copies of
    their own (``backends/iree/miscompiles.py``, the two sorts).

    IREE 3.13 sorts in place, and two sorts of one shape along one dim share the iota of their
    indices (CSE), so the copy each in-place write needs is merged away and the second sort
    reads the first one's output: such graphs are refused and ran op by op. HF's top-k plus
    top-p sampling is one (a ``topk`` and a ``sort`` of the logits). The k-th such sort
    (k >= 1) sorts ``k + 1`` stacked copies of its input along the same dim and keeps the
    first: a shape no other sort of the class has, so nothing is shared. The cost is k extra
    copies sorted. The refusal still checks the result, so a sort this does not separate
    (a class shared with a natural shape) is refused as before.

    ``keep_rank`` (SPIR-V): IREE 3.13 does not compile a stacked sort there ("vector.transfer_read
    op with rank > 1"), so the copies are concatenated along another dim instead (a ``[2, 9]``
    sort along dim 1 sorts ``[2 * (k + 1), 9]`` and keeps the first two rows); a 1-d sort,
    which has no other dim, is left as it is.
    """
    if "torch.aten.sort" not in mlir:
        return mlir
    from torch_mlir import ir

    seen: dict[tuple[str, int], int] = {}

    def separate(block: Any, op: Any) -> bool:
        op = op.operation
        if op.name not in _SORTS:
            return False
        dim_at, _ = _SORTS[op.name]
        x = op.operands[0]
        xtype = str(x.type)
        shape = _vtensor_dims(xtype)
        dim_op = op.operands[dim_at].owner
        if shape is None or not shape or getattr(dim_op, "name", "") != "torch.constant.int":
            return False
        dim = int(dim_op.attributes["value"].value) % len(shape)
        if keep_rank and (len(shape) < 2 or "?" in shape):
            return False
        k = seen.get((xtype, dim), 0)
        seen[(xtype, dim)] = k + 1
        if k == 0:
            return False
        if keep_rank:
            _concatenated_sort(op, dim, k)
            return True
        int_t = ir.Type.parse("!torch.int")

        def const(v: int) -> Any:
            return ir.Operation.create("torch.constant.int", results=[int_t],
                                       attributes={"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)}).result

        def stacked(t: str) -> ir.Type:
            return ir.Type.parse(t.replace("<[", f"<[{k + 1},", 1))

        with ir.InsertionPoint(op), op.location:
            zero, copies, new_dim = const(0), const(k + 1), const(dim + 1)
            keep = [const(-1) for _ in shape]
            one = ir.Type.parse(xtype.replace("<[", "<[1,", 1))
            unsqueezed = ir.Operation.create("torch.aten.unsqueeze", results=[one], operands=[x, zero]).result
            sizes = ir.Operation.create("torch.prim.ListConstruct", results=[ir.Type.parse("!torch.list<int>")],
                                        operands=[copies, *keep]).result
            wide = ir.Operation.create("torch.aten.broadcast_to", results=[stacked(xtype)],
                                       operands=[unsqueezed, sizes]).result
            operands = list(op.operands)
            operands[0], operands[dim_at] = wide, new_dim
            sort = ir.Operation.create(op.name, results=[stacked(str(r.type)) for r in op.results], operands=operands)
            firsts = [ir.Operation.create("torch.aten.select.int", results=[r.type], operands=[s, zero, zero]).result
                      for r, s in zip(op.results, sort.results)]
        for r, first in zip(op.results, firsts):
            r.replace_all_uses_with(first)
        op.erase()
        return True

    return _rewrite_each_op(mlir, separate)


def _concatenated_sort(op: Any, dim: int, k: int) -> None:
    """Replace sort ``op`` (along ``dim``) by a sort of ``k + 1`` copies of its input
    concatenated along another dim, and keep the first copy's part of each result."""
    from torch_mlir import ir

    x = op.operands[0]
    xtype = str(x.type)
    shape = _vtensor_dims(xtype)
    other = 0 if dim != 0 else 1
    int_t = ir.Type.parse("!torch.int")

    def const(v: int) -> Any:
        return ir.Operation.create("torch.constant.int", results=[int_t],
                                   attributes={"value": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)}).result

    def widened(t: str) -> ir.Type:
        dims = _vtensor_dims(t)
        dims[other] = str(int(dims[other]) * (k + 1))
        return ir.Type.parse(re.sub(r"<\[[^\]]*\]", "<[" + ",".join(dims) + "]", t, count=1))

    with ir.InsertionPoint(op), op.location:
        along, start, end, step = const(other), const(0), const(int(shape[other])), const(1)
        listed = ir.Operation.create("torch.prim.ListConstruct",
                                     results=[ir.Type.parse("!torch.list<vtensor>")], operands=[x] * (k + 1)).result
        wide = ir.Operation.create("torch.aten.cat", results=[widened(xtype)], operands=[listed, along]).result
        operands = list(op.operands)
        operands[0] = wide
        sort = ir.Operation.create(op.name, results=[widened(str(r.type)) for r in op.results], operands=operands)
        firsts = [ir.Operation.create("torch.aten.slice.Tensor", results=[r.type],
                                      operands=[s, along, start, end, step]).result
                  for r, s in zip(op.results, sort.results)]
    for r, first in zip(op.results, firsts):
        r.replace_all_uses_with(first)
    op.erase()


def _vtensor_dims(type_text: str) -> list[str] | None:
    """The dims of a ``!torch.vtensor<[...],dtype>`` type as text (``?`` for dynamic), or None."""
    m = re.fullmatch(r"!torch\.vtensor<\[([^\]]*)\],\w+>", type_text)
    return None if m is None else [d.strip() for d in m.group(1).split(",") if d.strip()]


#: Ops writing ``src`` (operand 1, or 2 for ``index_put``) into a copy of ``self`` (operand 0).
_UPDATES = {"torch.aten.slice_scatter": 1, "torch.aten.select_scatter": 1, "torch.aten.diagonal_scatter": 1,
            "torch.aten.as_strided_scatter": 1, "torch.aten.index_put": 2, "torch.aten.index_put.hacked_twin": 2,
            "torch.aten._index_put_impl": 2, "torch.aten._index_put_impl.hacked_twin": 2}
#: Ops IREE performs as ``iree_linalg_ext.scatter`` into (a copy of) operand 0.
_SCATTERS = re.compile(r"^torch\.aten\.(?:_?index_put(?:_impl)?(?:\.hacked_twin)?|scatter(?:_add|_reduce)?(?:\.\w+)?"
                       r"|index_add|index_copy)$")
#: Ops whose result IREE may take as a view or a copy of their first operand's buffer.
_VIEWS = re.compile(r"^torch\.aten\.(?:slice\.Tensor|select\.int|clone|view|reshape|_reshape_alias|unsqueeze"
                    r"|squeeze(?:\.dim)?|transpose\.int|permute|expand|narrow|contiguous|alias|detach|flatten\.using_ints"
                    r"|unflatten\.int|t|numpy_T|diagonal|as_strided|lift_fresh_copy)$")

#: Views that keep every element where it is (a new shape of the same buffer). A scatter into
#: a chain of only these needs no copy of its own, and must not get one: behind the barriers
#: IREE 3.13 elided the clone and scattered in place into the graph argument itself, which
#: another op of the graph then read (``v1 = v0.clone(); v1.as_strided(...).add_(1); v0 * 3``
#: read v1's values; the argument's buffer came back as v1's result).
_RESHAPES = re.compile(r"^torch\.aten\.(?:clone|view|reshape|_reshape_alias|unsqueeze|squeeze(?:\.dim)?"
                       r"|flatten\.using_ints|unflatten\.int|contiguous|alias|detach|lift_fresh_copy)$")

_SHAPE = re.compile(r"vtensor<\[([-\d,]*)\]")


def _shape(value: Any) -> list[int] | None:
    m = _SHAPE.search(str(value.type))
    return [int(d) for d in m.group(1).split(",") if d] if m else None


def _int_constants(value: Any) -> list[int] | None:
    """The ints of a ``torch.prim.ListConstruct`` of ``torch.constant.int`` (or one constant)."""
    try:
        owner = value.owner
        name = owner.operation.name if hasattr(owner, "operation") else owner.name
        if name == "torch.constant.int":
            return [int(str(owner.attributes["value"]).split(":")[0])]
        if name == "torch.prim.ListConstruct":
            out = []
            for v in owner.operands:
                ints = _int_constants(v)
                if ints is None or len(ints) != 1:
                    return None
                out += ints
            return out
    except (AttributeError, KeyError, ValueError):
        return None
    return None


def _moves_elements(view: Any) -> bool:
    """Whether view op ``view`` makes IREE copy its operand: it drops, repeats or reorders
    elements. A reshape, or a permutation that moves only size-1 dims, keeps them in place
    (IREE folds it into a reshape of the same buffer); unknown forms count as moving."""
    if _RESHAPES.match(view.name):
        return False
    shape = _shape(view.operands[0])
    if shape is None:
        return True
    if str(view.results[0].type) == str(view.operands[0].type) and view.name in (
            "torch.aten.slice.Tensor", "torch.aten.narrow", "torch.aten.expand"):
        return False  # the whole tensor
    order = None
    if view.name == "torch.aten.permute":
        order = _int_constants(view.operands[1])
    elif view.name == "torch.aten.transpose.int":
        dims = [_int_constants(v) for v in view.operands[1:3]]
        if all(d is not None and len(d) == 1 for d in dims):
            order = list(range(len(shape)))
            a, b = (d[0] % len(shape) for d in dims)  # type: ignore[index]
            order[a], order[b] = order[b], order[a]
    elif view.name in ("torch.aten.t", "torch.aten.numpy_T") and len(shape) == 2:
        order = [1, 0]
    if order is None or len(order) != len(shape):
        return True
    kept = [d % len(shape) for d in order if shape[d % len(shape)] != 1]
    return kept != sorted(kept)


def _barrier(value: Any) -> Any:
    """``value`` read through a new ``util.optimization_barrier``, built at the insertion point."""
    from torch_mlir import ir

    from .donation import _builtin_type

    to = ir.Operation.create("torch_c.to_builtin_tensor", results=[ir.Type.parse(_builtin_type(str(value.type)))],
                             operands=[value])
    kept = ir.Operation.create("util.optimization_barrier", results=[to.result.type], operands=[to.result])
    return ir.Operation.create("torch_c.from_builtin_tensor", results=[value.type], operands=[kept.result]).result


def _scatter_into_own_copy(op: Any, chain: list[Any]) -> None:
    """Give the scatter ``op`` a destination of its own: its view ``chain`` (the view ops from
    the tensor it views, a graph argument or a computed value, up to operand 0) rebuilt on a
    barrier of that tensor, the result behind a second barrier.

    A scatter into a slice of a tensor fused with the slice's copy into one dispatch whose
    copy IREE 3.13 cannot distribute ("write affecting operations on global resources are
    restricted to workgroup distributed contexts"). Behind a barrier the view is copied by a
    dispatch of its own and the scatter writes in place into that copy. Each scatter needs
    its own copy, all the way down: two scatters reading one barrier, or barriers of one
    shared view, wrote into one buffer (each result then held both writes), as IREE does not
    copy a tied operand that a barrier passes through.
    """
    from torch_mlir import ir

    with ir.InsertionPoint(op), op.location:
        value = _barrier(chain[0].operands[0])
        for view in chain:
            copy = view.clone()
            copy.operands[0] = value
            value = copy.results[0]
        op.operands[0] = _barrier(value)


def materialize_self_updates(mlir: str) -> str:
    """``mlir`` with the value written by an update into its own buffer's copy (``x[1:] =
    x[:-1].clone()``) read through ``util.optimization_barrier``.

    IREE 3.13 elides the ``clone`` and performs such an update as one copy inside the
    destination buffer (``stream.cmd.copy %x[0], %x[4], 36``), which the runtime refuses at
    every call: "source and target ranges must not overlap within the same buffer" (iree-cpu;
    the tensor could not be read again). Behind the barrier the written value is a buffer of
    its own, copied first. Source and destination are compared by the tensor they view, so two
    separate ``view`` ops of one buffer count as one (the iree-vulkan rolling-cache shift).

    A scatter whose destination is a view (``a[1:4].clone()[idx] = v``) gets that view
    rebuilt for it alone (``_scatter_into_own_copy``).
    """
    if not any(op in mlir for op in (*_UPDATES, "torch.aten.scatter", "torch.aten.index_add", "torch.aten.index_copy")):
        return mlir
    from .donation import _builtin_type, _is_block_argument, _materialize

    def views(value: Any) -> list[Any]:
        """The view ops from the value ``value`` is a view of up to ``value`` (empty: no view)."""
        chain = []
        while not _is_block_argument(value) and _VIEWS.match(value.owner.operation.name):
            chain.append(value.owner.operation)
            value = chain[-1].operands[0]
        return chain[::-1]

    def root(value: Any) -> Any:
        """The value ``value`` is a view chain of (itself if it is no view)."""
        chain = views(value)
        return chain[0].operands[0] if chain else value

    def reads_its_destination(src: Any, dst: Any) -> bool:
        return root(src) == root(dst)

    def separate(block: Any, op: Any) -> bool:
        op = op.operation
        changed = False
        at = _UPDATES.get(op.name)
        if at is not None and len(op.operands) > at:
            src = op.operands[at]
            if reads_its_destination(src, op.operands[0]) and _builtin_type(str(src.type)) is not None:
                _materialize(block, src)
                changed = True
        if _SCATTERS.match(op.name) and op.operands:
            chain = views(op.operands[0])
            if any(_moves_elements(v) for v in chain) \
                    and all(_builtin_type(str(v.results[0].type)) is not None for v in chain) \
                    and _builtin_type(str(chain[0].operands[0].type)) is not None:
                _scatter_into_own_copy(op, chain)
                changed = True
        return changed

    return _rewrite_each_op(mlir, separate)
