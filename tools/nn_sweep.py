"""Forward and backward of common NN forms on one lazy backend, against eager PyTorch.

    python -m tools.nn_sweep --backend iree-cpu [--only conv_groups,pad_reflect]

Where the fuzzer (``tools/fuzz``) writes random programs of elementwise ops,
reductions and views, this sweep runs the layer-level forms real models use
with their less common settings: grouped, dilated and transposed convolutions,
padding modes, pooling with ``ceil_mode``/``divisor_override``, adaptive pools
of sizes that do not divide, norms, losses with label smoothing, class weights
and ``ignore_index``, attention with masks, ``interpolate`` in every mode. Each
form runs forward, then backward with a fixed random upstream gradient, under
``LAZY_STRICT=1``; outputs and every input's gradient are compared with eager.
A form is ``ok``, ``mismatch`` (a wrong value: the worst finding), or
``error`` (a graph that did not compile, or an exception eager did not raise).
It found the nearest-upsampling scale bug (test_zoo_ops.py). Exit status 1
on any mismatch; errors are reported, for issue lists, not failed on.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

#: The device auxiliary tensors of a form are made on (the form's inputs are passed in).
_device = "cpu"


def _randn(*shape: int) -> torch.Tensor:
    """A fixed random tensor (its seed is its shape) on the current device."""
    g = torch.Generator().manual_seed(sum(shape) * 31 + len(shape))
    return torch.randn(*shape, generator=g).to(_device)


def _const(data: Any, **kwargs: Any) -> torch.Tensor:
    return torch.tensor(data, **kwargs).to(_device)


def _ints(high: int, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed)).to(_device)


X4 = (2, 4, 7, 9)  # NCHW
X3 = (2, 4, 11)  # NCL

#: name -> (form, input shapes). Inputs require grad; auxiliary tensors come from _randn/_const/_ints.
FORMS: dict[str, tuple[Callable[..., torch.Tensor], tuple[tuple[int, ...], ...]]] = {
    "conv_groups_dilation": (lambda x, w: F.conv2d(x, w, padding=2, dilation=2, groups=2), (X4, (6, 2, 3, 3))),
    "conv_groups_same": (lambda x, w: F.conv2d(x, w, padding="same", groups=2), (X4, (6, 2, 3, 3))),
    "conv_groups_channels_last": (lambda x, w: F.conv2d(x.contiguous(memory_format=torch.channels_last), w,
                                                        groups=2), (X4, (6, 2, 3, 3))),
    "conv_transpose_output_padding": (lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
                                      (X4, (4, 3, 3, 3))),
    "conv1d_after_reflect_pad": (lambda x, w: F.conv1d(F.pad(x, (2, 2), mode="reflect"), w), (X3, (3, 4, 5))),
    "pad_replicate": (lambda x: F.pad(x, (1, 2, 3, 0), mode="replicate"), (X4,)),
    "pad_circular": (lambda x: F.pad(x, (1, 2, 3, 1), mode="circular"), (X4,)),
    "pad_reflect_2d": (lambda x: F.pad(x, (2, 1, 1, 3), mode="reflect"), (X4,)),
    "avg_pool_ceil_no_pad_count": (lambda x: F.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True,
                                                          count_include_pad=False), (X4,)),
    "avg_pool_divisor": (lambda x: F.avg_pool2d(x, 2, divisor_override=3), (X4,)),
    "max_pool_ceil_dilation": (lambda x: F.max_pool2d(x, 3, 2, padding=1, dilation=2, ceil_mode=True), (X4,)),
    "adaptive_avg_not_dividing": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)), (X4,)),
    "adaptive_max_not_dividing": (lambda x: F.adaptive_max_pool2d(x, (3, 4)), (X4,)),
    "avg_pool_1d_ceil": (lambda x: F.avg_pool1d(x, 3, 2, padding=1, ceil_mode=True), (X3,)),
    "lp_pool": (lambda x: F.lp_pool2d(x.abs() + 0.1, 2, 2), (X4,)),
    "group_norm": (lambda x: F.group_norm(x, 2, _randn(4), _randn(4)), (X4,)),
    "instance_norm": (lambda x: F.instance_norm(x), (X4,)),
    "layer_norm_2d": (lambda x: F.layer_norm(x, (7, 9), _randn(7, 9), _randn(7, 9)), (X4,)),
    "batch_norm_training": (lambda x: F.batch_norm(x, None, None, _randn(4), _randn(4), training=True), (X4,)),
    "local_response_norm": (lambda x: F.local_response_norm(x, 3), (X4,)),
    "rms_norm": (lambda x: F.rms_norm(x, (9,), _randn(9)), (X4,)),
    "cross_entropy_smoothing_ignore": (lambda x: F.cross_entropy(
        x.reshape(-1, 9), _const([1, 2, -100, 3] * 14), label_smoothing=0.1, ignore_index=-100), (X4,)),
    "cross_entropy_weights": (lambda x: F.cross_entropy(x.reshape(-1, 9), _const([1, 2, 0, 3] * 14),
                                                        weight=_randn(9).abs()), (X4,)),
    "cross_entropy_probabilities": (lambda x: F.cross_entropy(x.reshape(-1, 9), F.softmax(_randn(56, 9), -1)), (X4,)),
    "nll_sum": (lambda x: F.nll_loss(F.log_softmax(x.reshape(-1, 9), -1), _const([1, 8, 0, 3] * 14),
                                     reduction="sum"), (X4,)),
    "bce_logits_pos_weight": (lambda x: F.binary_cross_entropy_with_logits(
        x, (_randn(*X4) > 0).float(), pos_weight=_randn(9).abs()), (X4,)),
    "kl_div_batchmean": (lambda x: F.kl_div(F.log_softmax(x, -1), F.softmax(_randn(*X4), -1),
                                            reduction="batchmean"), (X4,)),
    "smooth_l1_beta": (lambda x: F.smooth_l1_loss(x, _randn(*X4), beta=0.5), (X4,)),
    "huber_delta": (lambda x: F.huber_loss(x, _randn(*X4), delta=0.7), (X4,)),
    "cosine_similarity": (lambda x: F.cosine_similarity(x, _randn(*X4), dim=1), (X4,)),
    "cdist": (lambda x: torch.cdist(x.flatten(2), _randn(2, 5, 63)), (X4,)),
    "sdpa_causal": (lambda x: F.scaled_dot_product_attention(x, x * 0.5, x, is_causal=True), (X4,)),
    "sdpa_bool_mask": (lambda x: F.scaled_dot_product_attention(x, x, x, attn_mask=_randn(7, 7) > 0), (X4,)),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), (X4,)),
    "gelu_float64": (lambda x: F.gelu(x.double()), (X4,)),
    "uint32_product": (lambda x: x + ((x.abs() * 100).to(torch.uint32) * 3).float(), (X4,)),
    "softplus_beta_threshold": (lambda x: F.softplus(x * 10, beta=2, threshold=5), (X4,)),
    "mish_hardswish_silu": (lambda x: F.mish(x) + F.hardswish(x) + F.hardsigmoid(x) + F.silu(x), (X4,)),
    "glu": (lambda x: F.glu(x, 1), (X4,)),
    "prelu": (lambda x: F.prelu(x, _randn(4)), (X4,)),
    "celu_selu_elu": (lambda x: F.celu(x, 0.7) + F.selu(x) + F.elu(x, 1.3), (X4,)),
    "log_sigmoid_large": (lambda x: F.logsigmoid(x * 30), (X4,)),
    "unfold": (lambda x: F.unfold(x, (2, 3), padding=1, stride=2), (X4,)),
    "fold": (lambda x: F.fold(x, (4, 5), (3, 2)), ((2, 18, 8),)),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x[:, :, :6, :8], 2), (X4,)),
    "roll_flip": (lambda x: torch.roll(x, (2, -3), (2, 3)).flip(1), (X4,)),
    "cumprod_logcumsumexp": (lambda x: (x * 0.1).cumprod(2) + torch.logcumsumexp(x, 3), (X4,)),
    "einsum": (lambda x: torch.einsum("bchw,bcwk->bhk", x, _randn(2, 4, 9, 3)), (X4,)),
    "baddbmm": (lambda x: torch.baddbmm(_randn(8, 7, 7), x.reshape(8, 7, 9), _randn(8, 9, 7), beta=0.5,
                                        alpha=1.5), (X4,)),
    "gather": (lambda x: x.gather(3, _ints(9, (2, 4, 7, 3), 3)), (X4,)),
    "scatter_add": (lambda x: torch.zeros(2, 4, 7, 5, device=x.device).scatter_add(
        3, _ints(5, X4, 4), x), (X4,)),
    "index_add_alpha": (lambda x: torch.zeros(2, 4, 3, 9, device=x.device).index_add(
        2, _const([0, 2, 1, 0, 2, 1, 1]), x, alpha=0.5), (X4,)),
    "embedding_padding_idx": (lambda w: F.embedding(_const([[0, 2, 5], [5, 1, 0]]), w, padding_idx=5), ((6, 3),)),
    "embedding_bag_mean": (lambda w: F.embedding_bag(_const([0, 2, 5, 1, 4]), w, _const([0, 2]), mode="mean"),
                           ((6, 3),)),
    "topk_and_sort": (lambda x: torch.topk(x, 3, -1).values + torch.sort(x, 2, descending=True).values[
        :, :, :3, :3].sum(), (X4,)),
    "median_kthvalue": (lambda x: x.median(3).values + x.kthvalue(3, 3).values, (X4,)),
    "norms": (lambda x: torch.linalg.vector_norm(x, 3, (2, 3)) + x.norm(p=1) + torch.linalg.matrix_norm(x[0, 0]),
              (X4,)),
    "var_std_corrections": (lambda x: x.var((1, 3), unbiased=True).sum() + x.std(2, correction=0).sum(), (X4,)),
    "log_softmax_float64": (lambda x: F.log_softmax(x, 1, dtype=torch.float64).float() + F.softmin(x, 2), (X4,)),
    "interpolate_nearest_fractional": (lambda x: F.interpolate(x, scale_factor=(1.7, 0.6), mode="nearest"), (X4,)),
    "interpolate_bilinear": (lambda x: F.interpolate(x, size=(5, 11), mode="bilinear"), (X4,)),
    "interpolate_bicubic": (lambda x: F.interpolate(x, size=(5, 11), mode="bicubic"), (X4,)),
    "interpolate_area": (lambda x: F.interpolate(x, size=(3, 4), mode="area"), (X4,)),
    "affine_grid_sample": (lambda x: F.grid_sample(x, F.affine_grid(
        _const([[[0.9, 0.1, 0.05], [-0.1, 1.1, 0.0]]] * 2), [2, 4, 5, 6], align_corners=False),
        align_corners=False), (X4,)),
    "grid_sample_nearest_border": (lambda x: F.grid_sample(x, _randn(2, 3, 4, 2) * 0.8, mode="nearest",
                                                           padding_mode="border", align_corners=True), (X4,)),
    "masked_fill_softmax": (lambda x: x.masked_fill(x > 0.5, float("-inf")).softmax(-1).nan_to_num(), (X4,)),
    "amax_amin": (lambda x: x.amax((2, 3)) - x.amin(1).sum(), (X4,)),
    "prod": (lambda x: (x * 0.5 + 1).prod(3), (X4,)),
    "atan2_hypot": (lambda x: torch.atan2(x, _randn(*X4)) + torch.hypot(x, _randn(*X4)), (X4,)),
    "lerp_addcmul_addcdiv": (lambda x: torch.lerp(x, _randn(*X4), 0.3) + torch.addcmul(x, x, _randn(*X4), value=0.5)
                             + torch.addcdiv(x, x, _randn(*X4).abs() + 1, value=2), (X4,)),
    "repeat_interleave": (lambda x: x.repeat_interleave(2, dim=2), (X4,)),
    "logit_eps": (lambda x: torch.logit(torch.sigmoid(x), eps=1e-3), (X4,)),
    "special_functions": (lambda x: torch.special.xlog1py(x, x.abs()) + torch.special.entr(x.abs())
                          + torch.special.log_ndtr(x), (X4,)),
    "lgamma_digamma": (lambda x: torch.lgamma(x.abs() + 0.5) + torch.digamma(x.abs() + 0.5), (X4,)),
    "erfinv": (lambda x: torch.erfinv(torch.tanh(x) * 0.99), (X4,)),
}


def _run(form: Callable[..., torch.Tensor], shapes: tuple[tuple[int, ...], ...],
         device: str) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    """The form's output and its inputs' gradients, computed on ``device``, as CPU tensors."""
    global _device
    _device = "cpu"
    inputs = [_randn(*s).to(device).requires_grad_() for s in shapes]
    upstream = None
    _device = device
    try:
        out = form(*inputs)
        _device = "cpu"
        upstream = _randn(*out.shape) if out.dim() else torch.tensor(1.3)
        (out * upstream.to(device)).sum().backward()
        return out.detach().cpu(), [None if i.grad is None else i.grad.cpu() for i in inputs]
    finally:
        _device = "cpu"


def check(name: str) -> tuple[str, str]:
    """(status, detail) of one form: ``ok``, ``mismatch`` or ``error``."""
    form, shapes = FORMS[name]
    want, want_grads = _run(form, shapes, "cpu")
    try:
        got, got_grads = _run(form, shapes, "lazy")
    except Exception as e:  # a compile failure (strict) or an error eager did not raise
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    problems = []
    if got.shape != want.shape:
        problems.append(f"shape {tuple(got.shape)}, eager {tuple(want.shape)}")
    elif not torch.allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True):
        problems.append(f"output off by {(got - want).abs().nan_to_num(float('inf')).max().item():.3g}")
    for i, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
        if (g is None) != (w is None):
            problems.append(f"gradient {i} missing")
        elif g is not None and not torch.allclose(g, w, rtol=1e-3, atol=1e-3, equal_nan=True):
            problems.append(f"gradient {i} off by {(g - w).abs().nan_to_num(float('inf')).max().item():.3g}")
    return ("mismatch", "; ".join(problems)) if problems else ("ok", "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.nn_sweep", description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="iree-cpu")
    p.add_argument("--only", default="", help=f"comma-separated forms, of: {', '.join(FORMS)}")
    args = p.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(FORMS)
    unknown = [n for n in names if n not in FORMS]
    if unknown:
        p.error(f"unknown forms {unknown}")
    os.environ["LAZY_STRICT"] = "1"
    import lazy_core

    lazy_core.init(args.backend)
    counts = {"ok": 0, "mismatch": 0, "error": 0}
    for i, name in enumerate(names, 1):
        status, detail = check(name)
        counts[status] += 1
        if status != "ok":
            print(f"[{i}/{len(names)}] {name}: {status.upper()} {detail}", flush=True)
        gc.collect()  # the failed form's pending tensors must not join the next form's graph
    print(f"{args.backend}: {counts['ok']} ok, {counts['mismatch']} mismatches, {counts['error']} errors "
          f"of {len(names)} forms", flush=True)
    return 1 if counts["mismatch"] else 0


if __name__ == "__main__":
    sys.exit(main())
