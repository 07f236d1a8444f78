"""Conversions from float64 to bfloat16 for the reference backend's JIT, through float32 as
eager converts.

LLVM lowers an ``arith.truncf`` from f64 to bf16 to a call to compiler-rt's ``__truncdfbf2``,
which neither MLIR's ExecutionEngine nor GCC 12's libgcc_s defines: a graph holding one failed
at its first run ("Symbols not found: [ __truncdfbf2 ]", then "Unknown function" at every
read). Under a bfloat16 default dtype, ``bool_tensor > nan`` made one (fuzz seed 4515 run
with ``torch.set_default_dtype(torch.bfloat16)``: 5 of 85 programs). Eager converts a double
to bfloat16 through float (``c10::BFloat16`` is made from a float), so each such truncation
becomes f64 -> f32 -> bf16 here; the pipeline's ``arith-expand`` writes the second step as
integer code, as it does for the bf16 roundings ``lowering.bf16`` emits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .mlir_walk import nested_operations

__all__ = ["BF16_SOURCE", "truncate_double_to_bf16_through_float"]

#: This file's text, for the on-disk cache key of the modules it rewrites.
BF16_SOURCE = Path(__file__).read_text()


def truncate_double_to_bf16_through_float(module: Any) -> Any:
    """``module`` (linalg on tensors, changed in place) with every scalar ``arith.truncf`` from
    f64 to bf16 split into two, through f32; returns it."""
    from torch_mlir import ir
    from torch_mlir.dialects import arith

    with module.context:
        f32, f64, bf16 = ir.F32Type.get(), ir.F64Type.get(), ir.BF16Type.get()
        for op in nested_operations(module.operation):
            if op.name != "arith.truncf" or op.operands[0].type != f64 or op.results[0].type != bf16:
                continue
            with ir.InsertionPoint(op), op.location:
                narrow = arith.TruncFOp(f32, op.operands[0]).result
                result = arith.TruncFOp(bf16, narrow).result
            op.results[0].replace_all_uses_with(result)
            op.erase()
    return module
