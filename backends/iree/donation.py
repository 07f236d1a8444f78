"""Buffer donation: a graph result written into the buffer of the argument it replaces.

A training step turns every parameter and every optimizer-state tensor into
a new value of the same shape and dtype; functionally each is a fresh result
buffer, and the old one is freed when the tensor's device data moves on. When
the caller can promise that nothing else will ever read the old buffer (the
lazy executor can, at a barrier where every live tensor is part of the
graph), the new value may be written into the old buffer instead: no result
allocation, half the peak memory for weights and optimizer state.

IREE 3.13 supports this from its torch input: a function argument typed as
a mutable ``!torch.tensor`` (instead of a value ``!torch.vtensor``), read
with ``torch.copy.to_vtensor`` and written with
``torch.overwrite.tensor.contents`` (the form iree-turbine emits for in-place
updates), becomes a ``hal.tensor.alias`` of the caller's buffer view in
IREE's torch function conversion: the result is stored into that buffer.

IREE does *not* order the other reads of the argument's old value before
that write (measured on 3.13: returning ``(a * 2, -a)`` with ``a`` donated to
the first result gives ``-2a`` for the second; ``a.t()`` or ``a @ a`` donated
into ``a`` come out garbled, the kernel overwriting what it still reads). So
a pair is donated only when it is safe by construction: every op that reads
the argument lies on the way to the donated result, and every op between
the two is elementwise over the argument's shape. Then every dispatch that
reads the old value runs before the one that writes the result, or is that
dispatch and reads each element just before it writes it. That is exactly
an optimizer's state update (momentum buffers, Adam's moments, step
counters, a parameter updated where nothing else reads it); a parameter
also read by the forward and backward passes is computed functionally.

That alone is not enough when the new value is also read elsewhere (Adam's
parameter update reads the new moments): IREE may clone the cheap
elementwise chain into the reader's dispatch and recompute the new value
there from the argument, after another dispatch already wrote the new value
into it, so the chain runs twice (measured on 3.13, iree-vulkan, a tiny
RoBERTa whose whole AdamW step was one graph: every parameter off by 0.67
lr, the moments right). Such a value goes through ``util.optimization_barrier``
first (``_materialize``): its readers then read it as computed once, after
every read of the old buffer. A returned intermediate of the chain gets the
same barrier, for the same reason.

``donate_arguments`` rewrites the torch-dialect text handed to iree-compile
that way. Donated results are no longer returned; the backend hands the
argument's buffer view out as the result instead (see ``IreeBackend``).
The rewrite runs after torch-mlir's own pipelines, which only accept value
tensors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: argument index -> result index whose new value overwrites that argument's buffer.
Donations = Mapping[int, int]


def normalize(donated: Donations | None, n_args: int, n_results: int) -> dict[int, int]:
    """``donated`` as a plain dict, checked: indices in range, each result given to one argument."""
    out = dict(sorted((int(a), int(r)) for a, r in (donated or {}).items()))
    if any(not 0 <= a < n_args for a in out) or any(not 0 <= r < n_results for r in out.values()):
        raise ValueError(f"donation {out} out of range for {n_args} arguments and {n_results} results")
    if len(set(out.values())) != len(out):
        raise ValueError(f"donation {out} gives one result to two arguments")
    return out


def key_suffix(donated: Mapping[int, int]) -> str:
    """The donation pattern as text for cache keys (empty when nothing is donated)."""
    return ",".join(f"{a}>{r}" for a, r in sorted(donated.items()))


def donate_arguments(mlir: str, func_name: str, donated: Mapping[int, int]) -> tuple[str, dict[int, int]]:
    """``mlir`` with each donated argument made mutable and overwritten by its result.

    Returns the new text and the donations actually applied: a pair is
    skipped when the result is the argument itself (nothing to write), has
    another shape or dtype (IREE cannot alias buffers of different sizes), or
    when IREE could read the old value after writing the new one (see the
    module docstring and ``_safe_in_place``).
    """
    if not donated:
        return mlir, {}
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d

    with ir.Context() as ctx, ir.Location.unknown():
        torch_d.register_dialect(ctx)
        ctx.allow_unregistered_dialects = True  # torch_c and util ops (``_materialize``)
        module = ir.Module.parse(mlir)
        func = _find_func(module, func_name)
        block = func.regions[0].blocks[0]
        ret = block.operations[len(block.operations) - 1]
        results = list(ret.operands)
        applied: dict[int, int] = {}
        for a, r in sorted(donated.items()):
            arg = block.arguments[a]
            value = results[r]
            if value == arg or str(value.type) != str(arg.type) or not str(arg.type).startswith("!torch.vtensor<"):
                continue
            if _INTEGER_ELEMENT.search(str(arg.type)):
                continue  # IREE's torch input rejects a mutable integer argument (``_INTEGER_ELEMENT``)
            if _BOOL_ELEMENT.search(str(arg.type)):
                continue  # too many bool ops fold to their operand (``_BOOL_ELEMENT``)
            if _may_fold_to_argument(value, arg):
                continue  # nothing to write, and IREE would copy the buffer onto itself (``_IDENTITY_WHEN``)
            chain = _safe_in_place(arg, value, ret)
            if chain is None:
                continue
            # Read elsewhere, the new value must be computed once (module docstring); a
            # chain value the return reads could be recomputed from the written buffer too.
            shared = [v for v in chain if any((u.owner.operation == ret.operation) != (v == value) for u in v.uses)]
            if not all(_builtin_type(str(v.type)) for v in shared):
                continue
            for v in shared:
                _materialize(block, v)
            applied[a] = r
            vtensor = arg.type
            with ir.InsertionPoint.at_block_begin(block):
                read = ir.Operation.create("torch.copy.to_vtensor", results=[vtensor], operands=[arg])
            arg.replace_all_uses_except(read.result, read)
            arg.set_type(ir.Type.parse(str(vtensor).replace("!torch.vtensor<", "!torch.tensor<", 1)))
            # The return now reads the copy: overwrite with what it returned for ``r``.
            value = ret.operands[r]
            with ir.InsertionPoint(ret):
                ir.Operation.create("torch.overwrite.tensor.contents", operands=[value, arg])
        if not applied:
            return mlir, {}
        kept = [v for i, v in enumerate(ret.operands) if i not in set(applied.values())]
        with ir.InsertionPoint(ret), ret.location:
            ir.Operation.create("func.return", operands=kept)
        ret.erase()
        func.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in kept])
        )
        return module.operation.get_asm(enable_debug_info=True), applied


#: A signed or unsigned integer element type. IREE 3.13's torch input fails on any such mutable
#: argument ("failed to legalize unresolved target materialization from tensor<si64> to
#: tensor<i64>"), and the whole donating compile with it: the graph then compiled without any
#: donation. BatchNorm's ``num_batches_tracked`` is one, so a model with BatchNorm donated none of
#: its momentum buffers (a small ResNet on iree-cpu: 1 donating graph of 2, now 2).
_INTEGER_ELEMENT = re.compile(r",[su]i\d+>$")
#: A bool element type. On i1 nearly every op can fold to one of its operands (``x | x``,
#: ``x & x``, ``x * x``, ``x & True``, ``x ^ False``, ``x != False``, ``x + x`` lowered to ``or``),
#: and a donated result that folds to its own argument is a self-copy IREE's runtime refuses
#: (``_IDENTITY_WHEN``): fuzz found ``v.add_(v)`` of a bool failing its whole ``mark_step`` on
#: iree-cpu and iree-vulkan. Listing every such fold is a losing game, and a bool tensor is a mask
#: or a flag, never the optimizer state donation is for, so bool arguments are not donated.
_BOOL_ELEMENT = re.compile(r",i1>$")


# Ops computed element by element (the operand read at the result's own
# index when shapes are equal). Anything else between a donated argument and
# its result (views, reductions, matmuls, gathers, broadcasts) blocks donation.
_ELEMENTWISE = re.compile(
    r"^torch\.(?:aten\.(?:add|sub|mul|div|neg|sqrt|rsqrt|reciprocal|exp|log|pow|abs|sign|clamp\w*|maximum|minimum"
    r"|lerp|addcmul|addcdiv|where|relu|sigmoid|tanh|threshold|gt|ge|lt|le|eq|ne|logical_\w+|bitwise_\w+"
    r"|to|_to_copy|clone|copy|square|rsub|fill|zeros_like|ones_like|masked_fill)(?:\.\w+)?"
    r"|prims\.convert_element_type(?:\.\w+)?)$"
)


def _shape(type_text: str) -> str:
    return type_text.split("<", 1)[-1].split("]", 1)[0]


def _safe_in_place(arg, result, ret) -> list | None:  # noqa: ANN001 - torch_mlir.ir values and ops
    """The values computed from ``arg`` on the way to ``result`` (``result`` included) when IREE
    may write ``result`` into ``arg``'s buffer without a later read of the old value; None when not.

    Follows the values computed from ``arg`` up to ``result``. Each must be
    made by an elementwise op of ``arg``'s shape, and used only by ops that
    ``result`` depends on (an intermediate may also be returned, ``arg``
    itself may not). Then no dispatch that reads ``arg``, directly or
    through a fused producer, can run after the one that writes ``result``,
    and the one that writes it reads each element at its own index.
    """
    # Operations (not OpView wrappers): one Python object per op, so sets work.
    ret = ret.operation
    ancestors: set = set()
    stack = [result.owner.operation] if not _is_block_argument(result) else []
    while stack:
        op = stack.pop()
        if op in ancestors:
            continue
        ancestors.add(op)
        for v in op.operands:
            if not _is_block_argument(v):
                stack.append(v.owner.operation)
    shape = _shape(str(arg.type))
    seen: set = set()
    chain = [] if _is_block_argument(result) else [result]
    frontier = [arg]
    while frontier:
        value = frontier.pop()
        for use in value.uses:
            op = use.owner.operation
            if op == ret:
                if value == arg:
                    return None  # the old value is itself a result: it must survive
                continue
            if op not in ancestors:
                return None  # read by something the result does not wait for
            if op in seen:
                continue
            seen.add(op)
            if not _ELEMENTWISE.match(op.name):
                return None
            for r in op.results:
                if _shape(str(r.type)) != shape:
                    return None
                if r != result:
                    frontier.append(r)
                    chain.append(r)
    return chain


#: Ops IREE folds to one of their operands when the others are constants: ``x * 1``, ``x / 1``,
#: ``x - 0``, ``x ** 1``, an unbounded clamp. Measured on 3.13 (iree-cpu and iree-vulkan): when the
#: donated result folds to the argument itself, the write-back is a copy of the argument's buffer
#: onto itself, and once the function has more than one execution region (a graph that reads a
#: scalar input with ``aten.item``, as every integer scalar parameter is) the runtime refuses it
#: at every call: "source and target ranges overlap within the same buffer". A user's
#: ``p.mul_(1.0)`` (a decay factor of 1, a weight decay of 0) then failed its whole step. Each
#: entry: op name -> (the operand that may pass through, the alternative conditions that make
#: it pass: {other operand index: the constants it must be}); ``None`` is ``torch.constant.none``.
_INF = float("inf")
_UNBOUNDED = (None, -_INF, _INF)
_IDENTITY_WHEN: dict[str, tuple[int, list[dict[int, tuple]]]] = {
    **{f"torch.aten.{op}.{form}": (0, [{1: (1,)}]) for op in ("mul", "div") for form in ("Scalar", "Tensor")},
    # ``x + c * alpha``: the other operand is zero, or alpha is.
    **{f"torch.aten.{op}.{form}": (0, [{1: (0,)}, {2: (0,)}]) for op in ("add", "sub") for form in ("Scalar", "Tensor")},
    **{f"torch.aten.pow.{form}": (0, [{1: (1,)}]) for form in ("Tensor_Scalar", "Tensor_Tensor")},
    **{op: (0, [{1: _UNBOUNDED, 2: _UNBOUNDED}])
       for op in ("torch.aten.clamp", "torch.aten.clip", "torch.aten.clamp.Tensor", "torch.aten.clip.Tensor")},
    "torch.aten.clamp_min": (0, [{1: (-_INF,)}]),
    "torch.aten.clamp_max": (0, [{1: (_INF,)}]),
}
#: The same with the pass-through operand second: ``1 * x``, ``0 + x``.
_IDENTITY_WHEN_COMMUTED: dict[str, tuple[int, list[dict[int, tuple]]]] = {
    **{f"torch.aten.mul.{form}": (1, [{0: (1,)}]) for form in ("Scalar", "Tensor")},
    **{f"torch.aten.add.{form}": (1, [{0: (0,), 2: (1,)}]) for form in ("Scalar", "Tensor")},
}
#: Value-preserving ops (a dtype round trip f32 -> f64 -> f32 folds too) and involutions (``--x``).
_PASS_THROUGH = re.compile(
    r"^torch\.(?:aten\.(?:clone|contiguous|alias|detach|lift_fresh_copy|to\.\w+|_to_copy|type_as)"
    r"|prims\.convert_element_type)$"
)
_INVOLUTIONS = ("torch.aten.neg", "torch.aten.logical_not", "torch.aten.bitwise_not")


def _constant(value):  # noqa: ANN001, ANN202 - a torch_mlir.ir value; a float, None, or _UNKNOWN
    """What IREE can know ``value`` to be at compile time: a number, ``None`` for
    ``torch.constant.none``, or ``_UNKNOWN`` (a runtime value, a non-splat literal)."""
    from torch_mlir import ir

    if _is_block_argument(value):
        return _UNKNOWN
    op = value.owner.operation
    if op.name == "torch.constant.none":
        return None
    if op.name in ("torch.constant.float", "torch.constant.int", "torch.constant.bool"):
        attr = op.attributes["value"]
        return float(attr.value) if not isinstance(attr, ir.BoolAttr) else float(bool(attr.value))
    if op.name == "torch.vtensor.literal":
        attr = op.attributes["value"]
        if isinstance(attr, ir.DenseElementsAttr) and attr.is_splat:
            splat = attr.get_splat_value()
            return float(splat.value) if hasattr(splat, "value") else _UNKNOWN
        return _UNKNOWN
    if op.name in ("torch.aten.ones", "torch.aten.ones_like", "torch.aten.new_ones"):
        return 1.0
    if op.name in ("torch.aten.zeros", "torch.aten.zeros_like", "torch.aten.new_zeros"):
        return 0.0
    if op.name in ("torch.aten.full", "torch.aten.full_like", "torch.aten.new_full"):
        return _constant(op.operands[1])
    if op.name in ("torch.aten.item", "torch.prim.NumToTensor.Scalar", "torch.aten.scalar_tensor",
                   "torch.aten.Float.Tensor", "torch.aten.Int.Tensor", "torch.aten.squeeze",
                   "torch.aten.squeeze.dim", "torch.aten.to.dtype", "torch.aten._to_copy",
                   "torch.prims.convert_element_type", "torch.aten.clone", "torch.aten.detach"):
        return _constant(op.operands[0])
    return _UNKNOWN


_UNKNOWN = object()


def _may_fold_to_argument(value, arg) -> bool:  # noqa: ANN001 - torch_mlir.ir values
    """Whether IREE's folding may turn ``value`` into ``arg`` itself (``_IDENTITY_WHEN``).

    Conservative in the direction that matters: a form it does not know is
    assumed to compute a new value, which is what every op in the list does
    unless its other operands are the identity's constants. The cost of a
    wrong "may" is one buffer not donated.
    """
    if value == arg:
        return True
    if _is_block_argument(value):
        return False
    op = value.owner.operation
    name = op.name
    operands = list(op.operands)
    if _PASS_THROUGH.match(name) and operands:
        return _may_fold_to_argument(operands[0], arg)
    if name == "torch.aten.copy":
        return _may_fold_to_argument(operands[1], arg)
    if name in _INVOLUTIONS and operands and not _is_block_argument(operands[0]):
        inner = operands[0].owner.operation
        return inner.name == name and _may_fold_to_argument(inner.operands[0], arg)
    if name in ("torch.aten.maximum", "torch.aten.minimum", "torch.aten.fmax", "torch.aten.fmin"):
        return operands[0] == operands[1] and _may_fold_to_argument(operands[0], arg)
    if name.startswith("torch.aten.where"):
        condition = _constant(operands[0])
        if condition is not _UNKNOWN and condition is not None:
            return _may_fold_to_argument(operands[1 if condition else 2], arg)
        return operands[1] == operands[2] and _may_fold_to_argument(operands[1], arg)
    for table in (_IDENTITY_WHEN, _IDENTITY_WHEN_COMMUTED):
        if name not in table:
            continue
        through, conditions = table[name]
        if through >= len(operands) or not _may_fold_to_argument(operands[through], arg):
            continue
        for condition in conditions:
            if all(i < len(operands) and _constant(operands[i]) in allowed for i, allowed in condition.items()):
                return True
    return False


#: torch-dialect element types and their builtin-tensor spelling (what ``torch_c`` converts to).
_BUILTIN_ELEMENT = {"f16": "f16", "bf16": "bf16", "f32": "f32", "f64": "f64", "i1": "i1",
                    "si8": "i8", "ui8": "ui8", "si16": "i16", "si32": "i32", "si64": "i64"}


def _builtin_type(vtensor: str) -> str | None:
    """``!torch.vtensor<[2,?],f32>`` as ``tensor<2x?xf32>``; None for a type this does not know."""
    m = re.fullmatch(r"!torch\.vtensor<\[([^\]]*)\],(\w+)>", vtensor)
    element = _BUILTIN_ELEMENT.get(m.group(2)) if m else None
    if element is None:
        return None
    dims = [d.strip() for d in m.group(1).split(",") if d.strip()]
    return "tensor<" + "".join(d + "x" for d in dims) + element + ">"


def _materialize(block, value) -> None:  # noqa: ANN001 - torch_mlir.ir block and value
    """Route every reader of ``value`` through ``util.optimization_barrier``.

    IREE cannot see through the barrier, so no reader's dispatch recomputes
    ``value`` from its operands: it is computed once, by the dispatch that
    reads the donated argument, and read from that result. The ops are built
    generically (torch-mlir's context does not know IREE's ``util`` dialect);
    iree-compile parses the generic form.
    """
    from torch_mlir import ir

    vtensor = value.type
    builtin = ir.Type.parse(_builtin_type(str(vtensor)))
    owner = value.owner.operation
    ops = list(block.operations)
    after = next(i for i, op in enumerate(ops) if op.operation == owner) + 1
    with ir.InsertionPoint(ops[after]), owner.location:
        to = ir.Operation.create("torch_c.to_builtin_tensor", results=[builtin], operands=[value])
        kept = ir.Operation.create("util.optimization_barrier", results=[builtin], operands=[to.result])
        back = ir.Operation.create("torch_c.from_builtin_tensor", results=[vtensor], operands=[kept.result])
    value.replace_all_uses_except(back.result, to)


def _is_block_argument(value) -> bool:  # noqa: ANN001
    from torch_mlir import ir

    return isinstance(value, ir.BlockArgument) or isinstance(value.owner, ir.Block)


def _find_func(module, name: str):  # noqa: ANN001, ANN202 - torch_mlir.ir types
    for op in module.body.operations:
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == name:
            return op.operation
    raise ValueError(f"no func.func @{name} in the module")


def results_in_order(
    outs: list, args: list, donated: Mapping[int, int], n_results: int
) -> list:
    """The function's results in the graph's order: donated ones are their argument's buffer."""
    by_result = {r: a for a, r in donated.items()}
    it = iter(outs)
    return [args[by_result[r]] if r in by_result else next(it) for r in range(n_results)]
