"""Barriers that keep values out of one IREE dispatch, placed before dispatch formation.

IREE's dispatch formation cannot fuse across a barrier: a value behind one is
written to memory by one dispatch and read by the next, which the runtime
orders. The barrier is ``iree_tensor_ext.compute_barrier.start`` (the op IREE
itself puts after each imported argument), not ``util.optimization_barrier``:
it carries its value's dynamic sizes, so IREE still resolves the sizes of
what comes after it ("'tensor.dim' op unexpected during shape cleanup" made
every dynamic-shape compile behind a ``util.optimization_barrier`` fail).
The workarounds for SPIR-V code that goes wrong when two ops share a dispatch
(fused_reductions.py, sign_extensions.py) put them into IREE's
``global-optimization`` phase IR and compile again from there
(``--compile-from=global-optimization``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..mlir_walk import nested_operations

Predicate = Callable[[Any], bool]


def isolate(global_opt_ir: str, *, results_of: Predicate, inputs_of: Predicate | None = None,
            expand_softmax: bool = False) -> str | None:
    """``global_opt_ir`` with a barrier on every used result of each op
    ``results_of`` selects and on each input another linalg op computes of each op ``inputs_of``
    selects (not its accumulators), or None where no barrier was placed. ``expand_softmax`` first
    expands ``linalg.softmax`` (IREE raises softmax-shaped code into it before this phase and
    expands it again inside one dispatch) so the reductions in it show."""
    from iree.compiler import ir, passmanager

    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(global_opt_ir)
        if expand_softmax:
            passmanager.PassManager.parse("builtin.module(util.func(iree-codegen-decompose-softmax))").run(
                module.operation)
        barriers = 0
        for op in nested_operations(module.operation):
            if inputs_of is not None and inputs_of(op):
                n_ins = len(op.operands) - len(op.results)
                produced = [v for v in list(op.operands)[:n_ins]
                            if isinstance(v.owner, ir.Operation | ir.OpView) and v.owner.name.startswith("linalg.")]
                for value in produced:
                    barrier, _ = _barrier(ir, value, ir.InsertionPoint(op), op.location)
                    op.replace_uses_of_with(value, barrier.result)
                    barriers += 1
            if results_of(op):
                for result in op.results:
                    if not list(result.uses):
                        continue
                    # Every use, not only linalg ones: a reshape between the two fuses as well.
                    barrier, sizes = _barrier(ir, result, ir.InsertionPoint.after(op), op.location)
                    result.replace_all_uses_except(barrier.result, [barrier, *sizes])
                    barriers += 1
        if not barriers:
            return None
        return module.operation.get_asm(enable_debug_info=True)


def _barrier(ir, value, ip, loc) -> tuple[Any, list[Any]]:  # noqa: ANN001 - iree.compiler.ir objects
    """``compute_barrier.start`` of ``value`` at ``ip``, and the ``tensor.dim`` ops that read its
    dynamic sizes for it (the caller keeps them reading ``value``)."""
    shaped = ir.RankedTensorType(value.type)
    index = ir.IndexType.get()
    sizes, dims = [], []
    for i in range(shaped.rank):
        if shaped.is_dynamic_dim(i):
            k = ir.Operation.create("arith.constant", results=[index],
                                    attributes={"value": ir.IntegerAttr.get(index, i)}, loc=loc, ip=ip)
            d = ir.Operation.create("tensor.dim", results=[index], operands=[value, k.result], loc=loc, ip=ip)
            sizes.append(d)
            dims.append(d.result)
    barrier = ir.Operation.create("iree_tensor_ext.compute_barrier.start", results=[value.type],
                                  operands=[value, *dims], loc=loc, ip=ip)
    return barrier, sizes
