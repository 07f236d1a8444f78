"""Math ops the reference pipeline would lower inexactly, computed by the C library.

MLIR's ``convert-math-to-llvm`` lowers ``math.log1p`` to ``log(1 + x)`` and
``math.expm1`` to ``exp(x) - 1``, and torch-mlir's
``refback-expand-ops-for-llvm`` expands ``math.tanh`` through ``exp``: all
three were 0 for ``x = 1e-8`` and hundreds of ulp off near 1e-3 on the
reference backend (eager: within one ulp), and so was every decomposition
built on them (``lowering/hyperbolic.py``, ``lowering/elu.py``,
``logsigmoid``). ``convert-math-to-libm`` cannot simply run first: it refuses
the math ops the C library lacks (``math.copysign``) and calls a ``rsqrtf``
that glibc does not have. So these three ops alone become calls to libm
(``log1pf``, ``expm1f``, ``tanhf`` and their float64 forms) before the
pipeline, as ``convert-math-to-libm`` writes them for the ops it is given;
the JIT resolves them in the process, like the ``asinhf`` calls it already
makes. A float16 op (which the pipeline computed in float16: ``log1p`` of
1e-3 was 2.3% off) calls the float32 function and rounds once, as eager does.

``math.erf`` too: the pipeline has a polynomial expansion for float32 only,
so a float64 ``erf`` (``gelu`` of a float64 model) failed to compile and ran
eagerly; ``erf``/``erff`` from libm serve both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .mlir_walk import nested_operations

__all__ = ["LIBM_CALLS", "LIBM_SOURCE", "call_libm"]

#: This file's text, for the on-disk cache key of the modules it rewrites.
LIBM_SOURCE = Path(__file__).read_text()

#: math op -> the C function of its float64 form (``f`` suffix for float32).
LIBM_CALLS = {"math.log1p": "log1p", "math.expm1": "expm1", "math.tanh": "tanh", "math.erf": "erf"}


def call_libm(module: Any) -> Any:
    """``module`` (linalg on tensors, changed in place) with every scalar op of
    ``LIBM_CALLS`` replaced by a call to its C function; returns it. float16 and
    bfloat16 are computed in float32 and rounded once, as eager does."""
    from torch_mlir import ir
    from torch_mlir.dialects import arith, func

    with module.context:
        f32, f64 = ir.F32Type.get(), ir.F64Type.get()
        halves = (ir.F16Type.get(), ir.BF16Type.get())
        declared: set[str] = set()
        for op in nested_operations(module.operation):
            base = LIBM_CALLS.get(op.name)
            t = op.results[0].type if base is not None and len(op.operands) == 1 else None
            if t not in (f32, f64, *halves):
                continue
            wide = f64 if t == f64 else f32
            name = base + ("f" if wide == f32 else "")
            if name not in declared:
                with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
                    decl = func.FuncOp(name, ir.FunctionType.get([wide], [wide]), visibility="private")
                    decl.attributes["llvm.readnone"] = ir.UnitAttr.get()
                declared.add(name)
            with ir.InsertionPoint(op), op.location:
                x = op.operands[0] if t == wide else arith.ExtFOp(wide, op.operands[0]).result
                result = func.CallOp([wide], ir.FlatSymbolRefAttr.get(name), [x]).results[0]
                if t != wide:
                    result = arith.TruncFOp(t, result).result
            op.results[0].replace_all_uses_with(result)
            op.erase()
    return module
