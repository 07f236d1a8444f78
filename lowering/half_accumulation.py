"""Reductions of float16 / bfloat16 tensors accumulate in float32, as PyTorch's do.

PyTorch's CPU (and CUDA) kernels accumulate a half-precision reduction in
float (``at::acc_type``) and round once at the end; torch-mlir lowers the
same op with an accumulator of the element type, rounding after every
addition. The error then grows with the reduced size: ``cumsum`` over 64
float16 values was off by 20 ulps on the reference backend, and
``cumsum([0, -0.61, 1.96, -1.0])`` in float16 ended at 0.3496 where eager
gives 0.3501 (fuzz seed 21). Upcasting the operands, running the op in
float32 and rounding each result back is what eager computes (inductor
makes the same choice for half-precision reductions).

Only ops that accumulate are listed: an elementwise op rounds once either
way, and a plain matmul already accumulates in f32 in the compilers. Left
out as well: ``prod`` and ``_log_softmax``, whose CPU kernels round in
float16 along the way (measured: their float32 results are farther from
eager's than the float16 ones).
"""

from __future__ import annotations

import torch

from lazy_core.ir import Node, Output, ScalarParam

aten = torch.ops.aten

HALF_DTYPES = (torch.float16, torch.bfloat16)

#: Ops whose CPU kernel accumulates a half-precision input in float32.
ACCUMULATING_OPS = frozenset({
    aten.sum.default, aten.sum.dim_IntList, aten.nansum.default,
    aten.mean.default, aten.mean.dim,
    aten.cumsum.default, aten.cumprod.default, aten.logcumsumexp.default,
    aten.var.correction, aten.std.correction, aten.var_mean.correction, aten.std_mean.correction,
    aten.linalg_vector_norm.default, aten.logsumexp.default,
    aten.native_layer_norm.default, aten.native_group_norm.default,
    aten.addmm.default, aten.addmv.default, aten.baddbmm.default, aten.addbmm.default,
})


def low_precision(node: Node, emulated_bf16: bool) -> frozenset[torch.dtype]:
    """The half-precision dtypes among ``node``'s tensor operands that it should
    accumulate in float32 (empty if none, or if the op does not accumulate).

    Under bf16 emulation bf16 values are float32 already: only float16 counts.
    """
    if node.op not in ACCUMULATING_OPS:
        return frozenset()
    found = {a.meta.dtype for a in node.args if is_tensor_operand(a) and a.meta.dtype in HALF_DTYPES}
    if emulated_bf16:
        found.discard(torch.bfloat16)
    return frozenset(found)


def is_tensor_operand(x: object) -> bool:
    """A traced tensor (a runtime scalar parameter is an Output too, of a ScalarParam)."""
    return isinstance(x, Output) and not isinstance(x.node, ScalarParam)
