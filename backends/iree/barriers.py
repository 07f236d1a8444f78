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

import subprocess
from collections.abc import Callable
from typing import Any

from ..mlir_walk import nested_operations

Predicate = Callable[[Any], bool]

#: Seconds ``iree-opt`` may spend expanding softmax before the graph is refused.
EXPAND_SOFTMAX_TIMEOUT = 60


class ExpansionFailed(RuntimeError):
    """IREE's softmax decomposition did not finish (an upstream hang) or failed; the graph is refused."""


def _expand_softmax(global_opt_ir: str) -> str:
    """``global_opt_ir`` with ``linalg.softmax`` expanded, in an ``iree-opt`` process.

    Without the pass's own fusion (``use-fusion=false``: the exponentials are computed once, as
    their own op, not fused into the sum and the division): with it, IREE 3.13's
    ``iree-codegen-decompose-softmax`` never returned on some modules (fuzz seed 4302 program
    3', a [3, 4] softmax over dim 1, ran at 100% CPU past the fuzzer's 600 s; a tiny Llama's
    training step past 5 minutes), so their graphs were refused. Unfused, both expand in a
    fraction of a second, and the ops are the same. The pass still runs in an ``iree-opt``
    process with a timeout: a pass running in-process cannot be stopped."""
    from iree.compiler.tools.binaries import find_tool

    try:
        proc = subprocess.run(
            [find_tool("iree-opt"), "--mlir-print-debuginfo",
             "--pass-pipeline=builtin.module(util.func(iree-codegen-decompose-softmax{use-fusion=false}))", "-"],
            input=global_opt_ir, capture_output=True, text=True, timeout=EXPAND_SOFTMAX_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ExpansionFailed(f"IREE's iree-codegen-decompose-softmax ran past {EXPAND_SOFTMAX_TIMEOUT} s") from None
    if proc.returncode != 0:
        raise ExpansionFailed(f"iree-opt failed to expand softmax: {proc.stderr.strip()[:2000]}")
    return proc.stdout


def isolate(global_opt_ir: str, *, results_of: Predicate, inputs_of: Predicate | None = None,
            expand_softmax: bool = False) -> str | None:
    """``global_opt_ir`` with a barrier on every used result of each op
    ``results_of`` selects and on each input another linalg op computes of each op ``inputs_of``
    selects (not its accumulators), or None where no barrier was placed. ``expand_softmax`` first
    expands ``linalg.softmax`` (IREE raises softmax-shaped code into it before this phase and
    expands it again inside one dispatch) so the reductions in it show."""
    from iree.compiler import ir

    if expand_softmax and "linalg.softmax" in global_opt_ir:
        global_opt_ir = _expand_softmax(global_opt_ir)
    with ir.Context(), ir.Location.unknown():
        module = ir.Module.parse(global_opt_ir)
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
