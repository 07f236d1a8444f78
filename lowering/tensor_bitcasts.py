"""``aten.view.dtype`` as an elementwise bitcast on the linalg-on-tensors target.

torch-mlir 20261001 has no linalg lowering for ``torch.aten.view.dtype``
(a reinterpretation of the bits, ``x.view(torch.int32)``), so every graph
that holds one failed on the linalg-on-tensors target and ran eagerly:
``x.view(torch.int32)`` itself, and ``torch.signbit`` and ``torch.copysign``,
whose PyTorch decompositions read the sign bit that way (IREE's own torch
input conversion has a lowering, so only the reference backend was hit).

For element types of one width it is an elementwise ``arith.bitcast``. On
a tensor that op is outside the linalg-on-tensors backend contract
(torch-mlir's verifier rejects it), and ``tensor.bitcast``, inside it, is
not bufferized by the reference backend's pipeline; a ``linalg.generic``
whose body is the scalar ``arith.bitcast`` is both. So on the
backend-contract torch form, before the linalg pipeline, each same-width
``view.dtype`` becomes ``torch_c.to_builtin_tensor``, that generic, and
``torch_c.from_builtin_tensor``; the pipeline's finalizing type conversion
folds the ``torch_c`` casts away.

A view to a dtype of another width changes the last dim (``float32`` as
``int16`` doubles it), and ran eagerly on the reference backend. It becomes
integer arithmetic on the bits, little-endian as the CPU lays them out
(``_split_bits``, ``_join_bits``): to a narrower type, each element's bits
shifted right by ``j * width`` and truncated make its ``j``-th part along a new
last dim, which is then merged with the one before; to a wider type, the parts
along the split last dim are zero-extended, shifted left and or-ed. Floats go
through the integer of their width first. Only static shapes are rewritten.

IREE 3.13 has a lowering, but its ``torch-iree-bitcast-tensor`` pass crashes
(signal 11) on a rank-0 ``view.dtype``: ``torch.signbit(x[1])``,
``torch.copysign(y[0], x[1])`` failed to compile on iree-cpu and iree-vulkan.
So ``route_zero_dim_bitcasts``, on the finished FX graph for every target,
reinterprets a 0-d tensor through shape [1].
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph

from .fx_rewrite import call_like, calls_on_tensors

__all__ = ["view_dtype_as_linalg", "route_zero_dim_bitcasts"]

_VTENSOR = re.compile(r"^!torch\.vtensor<\[([^\]]*)\],([a-z0-9]+)>$")
#: torch-mlir's element types to builtin ones: the signedness lives in the torch type only.
_SIGNLESS = re.compile(r"^[su]i(\d+)$")


def _builtin(torch_type: str) -> tuple[str, int] | None:
    """The builtin tensor type of a ``!torch.vtensor`` type and its element width, or None."""
    m = _VTENSOR.match(torch_type)
    if m is None:
        return None
    dims, dtype = m.group(1), m.group(2)
    signless = _SIGNLESS.match(dtype)
    element = f"i{signless.group(1)}" if signless else dtype
    width = re.search(r"\d+", element)
    if width is None or element == "i1":
        return None
    shape = "".join(f"{d.strip()}x" for d in dims.split(",") if d.strip())
    return f"tensor<{shape}{element}>", int(width.group())


def _elementwise_bitcast(ir: Any, x: Any, result_type: Any) -> Any:
    """``linalg.generic`` applying ``arith.bitcast`` to each element of ``x`` (at the insertion point)."""
    shaped = ir.RankedTensorType(x.type)
    index = ir.IndexType.get()
    sizes = []
    for d in range(shaped.rank):
        if shaped.is_dynamic_dim(d):
            at = ir.Operation.create("arith.constant", results=[index],
                                     attributes={"value": ir.IntegerAttr.get(index, d)}).result
            sizes.append(ir.Operation.create("tensor.dim", results=[index], operands=[x, at]).result)
    empty = ir.Operation.create("tensor.empty", results=[result_type], operands=sizes).result
    dims = ", ".join(f"d{i}" for i in range(shaped.rank))
    identity = f"affine_map<({dims}) -> ({dims})>"
    generic = ir.Operation.create(
        "linalg.generic", results=[result_type], operands=[x, empty], regions=1,
        attributes={
            "indexing_maps": ir.Attribute.parse(f"[{identity}, {identity}]"),
            "iterator_types": ir.Attribute.parse(
                "[" + ", ".join(["#linalg.iterator_type<parallel>"] * shaped.rank) + "]"),
            "operandSegmentSizes": ir.Attribute.parse("array<i32: 1, 1>"),
        })
    out_element = ir.RankedTensorType(result_type).element_type
    block = generic.regions[0].blocks.append(shaped.element_type, out_element)
    with ir.InsertionPoint(block):
        bits = ir.Operation.create("arith.bitcast", results=[out_element], operands=[block.arguments[0]]).result
        ir.Operation.create("linalg.yield", operands=[bits])
    return generic.result


def _with_element(ir: Any, shape: list[int], element: Any) -> Any:
    return ir.RankedTensorType.get(shape, element)


def _as_integers(ir: Any, x: Any, width: int) -> Any:
    """``x`` with its elements' bits as signless integers of ``width`` (itself if it is one)."""
    shaped = ir.RankedTensorType(x.type)
    integer = ir.IntegerType.get_signless(width)
    if shaped.element_type == integer:
        return x
    return _elementwise_bitcast(ir, x, _with_element(ir, list(shaped.shape), integer))


def _from_integers(ir: Any, x: Any, result_type: Any) -> Any:
    """The integer tensor ``x`` with its bits as ``result_type``'s elements."""
    if ir.RankedTensorType(x.type).element_type == ir.RankedTensorType(result_type).element_type:
        return x
    return _elementwise_bitcast(ir, x, result_type)


def _generic(ir: Any, inputs: list[Any], maps: list[str], iterators: list[str], init: Any,
             body: Callable[[Any, list[Any]], Any]) -> Any:
    """One ``linalg.generic`` writing into ``init``; ``body(block, arguments)`` returns the yielded value."""
    result_type = init.type
    generic = ir.Operation.create(
        "linalg.generic", results=[result_type], operands=[*inputs, init], regions=1,
        attributes={
            "indexing_maps": ir.Attribute.parse("[" + ", ".join(maps) + "]"),
            "iterator_types": ir.Attribute.parse(
                "[" + ", ".join(f"#linalg.iterator_type<{t}>" for t in iterators) + "]"),
            "operandSegmentSizes": ir.Attribute.parse(f"array<i32: {len(inputs)}, 1>"),
        })
    elements = [ir.RankedTensorType(v.type).element_type for v in (*inputs, init)]
    block = generic.regions[0].blocks.append(*elements)
    with ir.InsertionPoint(block):
        ir.Operation.create("linalg.yield", operands=[body(block, list(block.arguments))])
    return generic.result


def _arith(ir: Any, name: str, result: Any, *operands: Any) -> Any:
    return ir.Operation.create(f"arith.{name}", results=[result], operands=list(operands)).result


def _shift_of_part(ir: Any, dim: int, width: int, wide: Any) -> Any:
    """In a generic's body: ``linalg.index(dim) * width`` as an integer of type ``wide``."""
    index = ir.Operation.create("linalg.index", results=[ir.IndexType.get()],
                                attributes={"dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)}).result
    part = _arith(ir, "index_cast", wide, index)
    step = ir.Operation.create("arith.constant", results=[wide],
                               attributes={"value": ir.IntegerAttr.get(wide, width)}).result
    return _arith(ir, "muli", wide, part, step)


def _bitcast_across_widths(ir: Any, x: Any, width: int, result_type: Any, result_width: int) -> Any:
    """``x`` reinterpreted as ``result_type``, whose elements are narrower or wider (static shapes)."""
    shape = list(ir.RankedTensorType(x.type).shape)
    out_shape = list(ir.RankedTensorType(result_type).shape)
    rank = len(shape)
    bits = _as_integers(ir, x, width)
    narrow = ir.IntegerType.get_signless(min(width, result_width))
    wide = ir.IntegerType.get_signless(max(width, result_width))
    ratio = max(width, result_width) // min(width, result_width)
    dims = [f"d{i}" for i in range(rank + 1)]
    split = f"affine_map<({', '.join(dims)}) -> ({', '.join(dims)})>"
    whole = f"affine_map<({', '.join(dims)}) -> ({', '.join(dims[:rank])})>"
    groups = ir.Attribute.parse("[" + ", ".join([f"[{i}]" for i in range(rank - 1)] + [f"[{rank - 1}, {rank}]"]) + "]")
    if result_width < width:  # _split_bits: part j of each element along a new last dim
        parts_type = _with_element(ir, [*shape, ratio], narrow)
        empty = ir.Operation.create("tensor.empty", results=[parts_type]).result

        def part(block: Any, args: list[Any]) -> Any:
            shifted = _arith(ir, "shrui", wide, args[0], _shift_of_part(ir, rank, min(width, result_width), wide))
            return _arith(ir, "trunci", narrow, shifted)

        parts = _generic(ir, [bits], [whole, split], ["parallel"] * (rank + 1), empty, part)
        merged = ir.Operation.create("tensor.collapse_shape", results=[_with_element(ir, out_shape, narrow)],
                                     operands=[parts], attributes={"reassociation": groups}).result
        return _from_integers(ir, merged, result_type)
    # _join_bits: the parts along the split last dim, or-ed into one wide element each
    parts = ir.Operation.create("tensor.expand_shape", results=[_with_element(ir, [*out_shape, ratio], narrow)],
                                operands=[bits], attributes={
                                    "reassociation": groups,
                                    "static_output_shape": ir.Attribute.parse(
                                        f"array<i64: {', '.join(str(d) for d in [*out_shape, ratio])}>")}).result
    zero = ir.Operation.create("arith.constant", results=[wide], attributes={"value": ir.IntegerAttr.get(wide, 0)}).result
    empty = ir.Operation.create("tensor.empty", results=[_with_element(ir, out_shape, wide)]).result
    zeros = ir.Operation.create("linalg.fill", results=[empty.type], operands=[zero, empty], regions=1,
                                attributes={"operandSegmentSizes": ir.Attribute.parse("array<i32: 1, 1>")})
    fill_block = zeros.regions[0].blocks.append(wide, wide)
    with ir.InsertionPoint(fill_block):
        ir.Operation.create("linalg.yield", operands=[fill_block.arguments[0]])

    def join(block: Any, args: list[Any]) -> Any:
        extended = _arith(ir, "extui", wide, args[0])
        shifted = _arith(ir, "shli", wide, extended, _shift_of_part(ir, rank, min(width, result_width), wide))
        return _arith(ir, "ori", wide, args[1], shifted)

    joined = _generic(ir, [parts], [split, whole], ["parallel"] * rank + ["reduction"], zeros.result, join)
    return _from_integers(ir, joined, result_type)


def _load_dialects(context: Any, pipeline: str) -> None:
    """Load ``pipeline``'s dialects (``torch_c`` among them) into ``context``.

    An op built in a context that has not loaded its dialect is an
    unregistered op, which the conversion patterns do not recognize (the
    pipeline then failed on a malformed ``torch_c`` cast). ``torch_c`` is
    loaded only by the passes that depend on it, when they run: running the
    pipeline on an empty module loads them all (about 2 ms, once per context).
    """
    from torch_mlir import ir
    from torch_mlir.passmanager import PassManager

    with context:
        if not context.is_dialect_loaded("torch_c"):
            PassManager.parse(pipeline).run(ir.Module.create(ir.Location.unknown()).operation)


def view_dtype_as_linalg(module: Any, pipeline: str) -> int:
    """Rewrite ``module`` (torch backend-contract form, about to run the linalg-on-tensors
    ``pipeline``) in place; returns how many changed."""
    from torch_mlir import ir

    found: list[Any] = []

    def collect(op: Any) -> Any:
        if op.name == "torch.aten.view.dtype":
            found.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    if not found:
        return 0
    _load_dialects(module.context, pipeline)
    changed = 0
    with module.context:
        for op in found:
            source, result = op.operands[0], op.results[0]
            src = _builtin(str(source.type))
            dst = _builtin(str(result.type))
            if src is None or dst is None or (src[1] != dst[1] and "?" in src[0] + dst[0]):
                continue
            with ir.InsertionPoint(op), op.location:
                builtin = ir.Operation.create("torch_c.to_builtin_tensor", results=[ir.Type.parse(src[0])],
                                              operands=[source]).result
                if src[1] == dst[1]:
                    cast = _elementwise_bitcast(ir, builtin, ir.Type.parse(dst[0]))
                else:
                    cast = _bitcast_across_widths(ir, builtin, src[1], ir.Type.parse(dst[0]), dst[1])
                back = ir.Operation.create("torch_c.from_builtin_tensor", results=[result.type],
                                           operands=[cast]).result
            result.replace_all_uses_with(back)
            op.erase()
            changed += 1
    return changed


def route_zero_dim_bitcasts(g: Graph) -> int:
    """Each 0-d ``aten.view.dtype`` of ``g`` as ``view([1])``, ``view.dtype``, ``view([])``
    (see the module docstring); returns how many changed."""
    view, view_dtype = torch.ops.aten.view.default, torch.ops.aten.view.dtype
    changed = 0
    for node, x, val in calls_on_tensors(g, (view_dtype,)):
        out = node.meta.get("val")
        if val.dim() != 0 or not isinstance(out, torch.Tensor):
            continue
        with g.inserting_before(node):
            one = call_like(g, view, (x, [1]), val.reshape(1), node)
            cast = call_like(g, view_dtype, (one, node.args[1]), out.reshape(1), node)
        with g.inserting_after(node):
            back = call_like(g, view, (cast, []), out, node)
        node.replace_all_uses_with(back)
        g.erase_node(node)
        changed += 1
    return changed
