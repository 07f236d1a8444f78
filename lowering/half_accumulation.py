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

Elementwise ops are widened too (``is_elementwise``): a float16 ``sigmoid`` or
``addcmul`` lowered in float16 takes several rounded steps where eager rounds
once. Matmuls, convolutions, softmax, batch norm, losses and pools were left
out once (a plain matmul was thought to accumulate in f32 in the
compilers): over 20000 or 65536 elements, float16 ``mm``, ``softmax``,
``log_softmax``, ``batch_norm``, ``instance_norm``, ``mse_loss`` and
``norm(dim=)`` came out 30% to 200x off eager on reference and iree-cpu
(torch-mlir e2e ``AtenInstanceNormModuleFp16``). Each op listed was checked
on the CPU: eager's float16 result equals the float32 result rounded once
(exactly, or within one float16 ulp for ``log_softmax`` along the last dim,
``binary_cross_entropy``, ``nll_loss`` and batch norm). Left out: ``prod``,
whose CPU kernel rounds in float16 along the way, and
``embedding_dense_backward``, whose CPU kernel accumulates with float16
``index_add`` (a float32 sum is up to 4x off eager's there).
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
    aten.mm.default, aten.bmm.default, aten.mv.default, aten.dot.default, aten.vdot.default,
    aten.convolution.default, aten.convolution_backward.default,
    aten._softmax.default, aten._log_softmax.default,
    aten._softmax_backward_data.default, aten._log_softmax_backward_data.default,
    aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_functional.default,
    aten._native_batch_norm_legit_no_training.default, aten.native_batch_norm_backward.default,
    aten.native_layer_norm_backward.default, aten.native_group_norm_backward.default,
    aten.norm.Scalar, aten.norm.ScalarOpt_dim, aten.norm.ScalarOpt_dtype, aten.norm.ScalarOpt_dim_dtype,
    aten.mse_loss.default, aten.l1_loss.default, aten.smooth_l1_loss.default, aten.huber_loss.default,
    aten.soft_margin_loss.default, aten.kl_div.default, aten.binary_cross_entropy.default,
    aten.binary_cross_entropy_with_logits.default, aten.nll_loss_forward.default,
    aten.nll_loss2d_forward.default,
    aten.avg_pool1d.default, aten.avg_pool2d.default, aten.avg_pool3d.default,
    aten.adaptive_avg_pool1d.default, aten.adaptive_avg_pool2d.default, aten.adaptive_avg_pool3d.default,
    aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default,
})

#: Ops whose CPU kernel takes a Python number beside a half-precision tensor in float32 (its
#: ``mul``/``div`` fast path reads the number's original value): ``x_f16 * 65536`` is finite
#: where 65536 in float16 is inf, and ``x_f16 / 1e-6`` is not a division by 1e-6 rounded to a
#: float16 subnormal. Other ops round the number to float16 first, as the lowering does:
#: ``(x_f16 + 70000) - 70000`` is NaN in eager, ``x_f16 == 0.1`` compares with 0.1 in float16.
SCALAR_OPMATH_OPS = frozenset({aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar})

#: Elementwise ops (PyTorch's ``pointwise`` tag, and these untagged ones) compute a
#: half-precision result in float32 and round it once in eager's CPU kernels, where
#: torch-mlir's lowering takes several float16 steps, each rounded, or a float16 polynomial
#: (reference, float16, 64 elements: ``sigmoid`` 24 one ulp off eager, ``rsqrt`` 18,
#: ``addcmul(value=0.3)`` 25, ``torch.round(x, decimals=1)`` of -2.05 gave -2.0 for eager's
#: -2.1). So they run on float32 copies, rounded once, as reductions do.
_UNTAGGED_ELEMENTWISE = frozenset({aten.hardswish.default, aten.hardsigmoid.default, aten.glu.default,
                                   aten.mish.default, aten.silu.default})
#: Elementwise ops a float32 computation would get wrong (the next float16, not float32;
#: ``xlogy``, whose CPU kernel rounds ``log(y)`` to the half dtype before the product) or
#: that select or copy values (exact either way: widening them adds only casts).
_NOT_WIDENED = frozenset({aten.nextafter.default, aten.xlogy.Tensor, aten.xlogy.Scalar_Other,
                          aten.xlogy.Scalar_Self, aten.where.self, aten.where.ScalarOther,
                          aten.where.ScalarSelf, aten.neg.default, aten.abs.default, aten.relu.default,
                          aten.clone.default, aten.masked_fill.Scalar, aten.masked_fill.Tensor})
#: ``x + alpha * y``: eager rounds ``alpha`` and a Python ``y`` to the result dtype, then
#: computes in float32 once (measured on 4096 elements: every other combination differs).
ALPHA_OPS = frozenset({aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar,
                       aten.rsub.Tensor, aten.rsub.Scalar})
#: Widened elementwise ops whose kernel reads a Python number in the result dtype, not in
#: float32 (``x16 + 0.3`` adds float16(0.3); ``x16 * 0.3`` multiplies by 0.3f:
#: ``SCALAR_OPMATH_OPS``). The other kernels read their numbers (slopes, ``beta``, ``value``)
#: in float32, as a widened op does.
ROUNDS_NUMBERS = ALPHA_OPS | frozenset({
    aten.pow.Tensor_Scalar, aten.pow.Scalar, aten.maximum.default, aten.minimum.default,
    aten.fmod.Scalar, aten.fmod.Tensor, aten.remainder.Scalar, aten.remainder.Tensor,
    aten.remainder.Scalar_Tensor,
    # ``clamp``'s kernel converts its bounds to the tensor's dtype first: ``clamp(x16, 1e-40,
    # -0.0)`` bounds below by float16(1e-40) = 0.0, so a negative x becomes 0.0 and stays it;
    # with the float32 bound it became 1e-40 and then -0.0 (fuzz seed 4530 program 23 under a
    # float16 default dtype, reference).
    aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default,
    # ``hardtanh`` is eager's ``clamp``; ``hardshrink``'s kernel reads ``lambd`` in the tensor's
    # dtype: ``hardshrink(x16, 0.30001)`` zeroes x = float16(0.30001) (an adversarial sweep).
    aten.hardtanh.default, aten.hardshrink.default,
})


def is_pointwise(node: Node) -> bool:
    """An elementwise op (PyTorch's ``pointwise`` tag, or ``_UNTAGGED_ELEMENTWISE``): its
    kernel converts every tensor operand to the result's dtype before computing."""
    return not isinstance(node.op, str) and (torch.Tag.pointwise in node.op.tags or node.op in _UNTAGGED_ELEMENTWISE)


def is_elementwise(node: Node) -> bool:
    """An elementwise op with a half-precision result that runs in float32 (``_UNTAGGED_ELEMENTWISE``).

    ``x + y``, ``x * y`` of operands of its dtype are one correctly rounded step either way,
    and stay as they are: only an ``alpha`` other than 1 makes ``add``/``sub`` two steps, and
    only a number or a 0-d tensor of another dtype makes ``mul``/``div`` differ (``SCALAR_OPMATH_OPS``).
    """
    meta = node.metas[0] if node.metas else None
    if meta is None or meta.dtype not in HALF_DTYPES or node.op in _NOT_WIDENED or not is_pointwise(node):
        return False
    if node.op in ALPHA_OPS:
        alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
        return isinstance(alpha, Output) or alpha != 1
    if node.op in SCALAR_OPMATH_OPS:
        return any(isinstance(a, int | float) and not isinstance(a, bool)
                   or isinstance(a, Output) and (isinstance(a.node, ScalarParam)
                                                 or not a.meta.shape and a.meta.dtype != meta.dtype)
                   for a in node.args[1:])
    return True


#: ``_softmax(x, dim, half_to_float=True)`` already computes in float32 (and refuses a float32 input).
_HALF_TO_FLOAT = frozenset({aten._softmax.default, aten._log_softmax.default})


def low_precision(node: Node, emulated_bf16: bool) -> frozenset[torch.dtype]:
    """The half-precision dtypes among ``node``'s tensor operands that it should
    accumulate in float32 (empty if none, or if the op does not accumulate).

    Under bf16 emulation bf16 values are float32 already: only float16 counts.
    """
    if is_elementwise(node):
        pass
    elif node.op not in ACCUMULATING_OPS or (node.op in _HALF_TO_FLOAT and len(node.args) > 2
                                             and node.args[2] is True):
        return frozenset()
    found = {a.meta.dtype for a in node.args if is_tensor_operand(a) and a.meta.dtype in HALF_DTYPES}
    if is_elementwise(node):
        # Its result's dtype too, whatever its operands': ``int_tensor * 0.1`` under a float16
        # default dtype is a float16 kernel (TensorIterator converts the integers first), and
        # computes in float32 like any other.
        found.add(node.metas[0].dtype)
    if node.kwargs.get("dtype") in HALF_DTYPES:  # ``x32.sum(dtype=torch.half)``: rounded to half,
        found.add(node.kwargs["dtype"])  # then summed in float32 (cast_to_dtype_operand)
    if emulated_bf16:
        found.discard(torch.bfloat16)
    return frozenset(found)


def cast_to_dtype_operand(node: Node, low: frozenset[torch.dtype]) -> torch.dtype | None:
    """The half-precision ``dtype=`` a reduction of ``node`` converts its input to first
    (``x32.sum(dtype=torch.half)``: eager rounds each value to half, then accumulates in
    float32 and rounds once; torch-mlir summed in half, and 100,000 values of 0.25 came to 512
    for eager's 24,992), or None."""
    dtype = node.kwargs.get("dtype")
    return dtype if dtype in low and not is_elementwise(node) else None


def is_tensor_operand(x: object) -> bool:
    """A traced tensor (a runtime scalar parameter is an Output too, of a ScalarParam)."""
    return isinstance(x, Output) and not isinstance(x.node, ScalarParam)
