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
folds the ``torch_c`` casts away. A view to a dtype of another width changes
the shape, and stays as it is.

IREE 3.13 has a lowering, but its ``torch-iree-bitcast-tensor`` pass crashes
(signal 11) on a rank-0 ``view.dtype``: ``torch.signbit(x[1])``,
``torch.copysign(y[0], x[1])`` failed to compile on iree-cpu and iree-vulkan.
So ``route_zero_dim_bitcasts``, on the finished FX graph for every target,
reinterprets a 0-d tensor through shape [1].
"""

from __future__ import annotations

import re
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
            if src is None or dst is None or src[1] != dst[1]:
                continue
            with ir.InsertionPoint(op), op.location:
                builtin = ir.Operation.create("torch_c.to_builtin_tensor", results=[ir.Type.parse(src[0])],
                                              operands=[source]).result
                cast = _elementwise_bitcast(ir, builtin, ir.Type.parse(dst[0]))
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
