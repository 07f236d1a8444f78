"""``F.linear_cross_entropy``'s chunked ops traced as the math they compute.

``torch_nn::_linear_cross_entropy_batch_chunked`` (``reduction`` mean or sum) and its
``_no_reduction`` twin are ``torch.library.custom_op`` s whose Python kernel walks the batch in
chunks, writing matrix products into narrowed scratch buffers in place (``mm(out=)``,
``exp_``, ``index_add_`` through ``narrow`` views), which a lazy tensor cannot take; opaque to
the lowering, each call ran eagerly (the OpInfo sweep's two ``linear_cross_entropy.chunked``).
The handlers here compute the same results with whole-batch functional ops that trace:

* ``logits = X W^T + b``, shifted by each row's max; ``d = sum of exp`` per row;
* per-row weights ``w`` (the class weight of the target, 0 for ``ignore_index``), over
  ``-sum(w)`` for a mean (NaN for a zero sum, as the kernel) or ``-1`` for a sum: the kernel's
  ``neg_weight_target``;
* the loss ``sum_n w_n (log d_n - logit_n[t_n])`` (scaled as above), and the gradients the
  scalar op returns with it (its backward only scales them): with ``p = softmax * w``,
  ``dL/dlogits = -p + w * onehot(t)``, so ``dX = -p W + w W[t]``, ``dW = -p^T X + index_add(t, w X)``,
  ``db = -sum p + index_add(t, w)``; a gradient not asked for is the kernel's empty tensor.

The target reaches ``index_select``/``gather``, guarded like any other (an out-of-range class
raises eager's error at the read). Only what the kernel computes in the input's dtype is traced
(float32/float64 with that accumulation dtype, no label smoothing, a known reduction, an int64
target, a bias of the classes' shape, no gradient refused by the kernel's own checks); any other
call runs the kernel eagerly, for its values or its error.
"""

from __future__ import annotations

from typing import Any

import torch

from . import fallback

aten = torch.ops.aten

__all__ = ["HANDLERS"]

_SCALAR_ARGS = ("input", "linear_weight", "target", "linear_bias", "weight", "reduction", "ignore_index",
                "label_smoothing", "batch_chunk_size", "acc_policy", "acc_dtype", "allow_retain_graph",
                "compute_input_grad", "compute_linear_weight_grad", "compute_linear_bias_grad")
_NONE_ARGS = ("input", "linear_weight", "target", "linear_bias", "weight", "ignore_index", "batch_chunk_size",
              "acc_policy", "acc_dtype")


def _bind(names: tuple[str, ...], args: tuple, kwargs: dict) -> dict:
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def _traceable(b: dict, reduction: str) -> bool:
    x, lw, target, bias = b["input"], b["linear_weight"], b["target"], b.get("linear_bias")
    weight = b.get("weight")
    dtype = x.dtype
    if dtype not in (torch.float32, torch.float64) or b.get("acc_dtype") != dtype:
        return False
    if lw.dtype != dtype or (weight is not None and weight.dtype != dtype) or (bias is not None and bias.dtype != dtype):
        return False
    if reduction not in ("mean", "sum", "none") or target.dtype != torch.int64 or b.get("acc_policy") == "auto":
        return False
    if float(b.get("label_smoothing", 0.0)) > 0.0 or x.dim() != 2 or lw.dim() != 2 or target.dim() != 1:
        return False
    if bias is not None and tuple(bias.shape) != tuple(lw.shape[:-1]):
        return False
    if reduction != "none" and torch.is_grad_enabled():
        # The kernel's own refusals (a gradient that was not precomputed but is wanted).
        for tensor, flag in ((x, "compute_input_grad"), (lw, "compute_linear_weight_grad"),
                             (bias, "compute_linear_bias_grad")):
            if tensor is not None and tensor.requires_grad and not b.get(flag):
                return False
    return True


def _row_weights(target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int, num_classes: int,
                 dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``(target, w)``: an ignored target replaced by class 0 when it is not a class (the kernel's
    ``corrected_target``), and each row's class weight, 0 where ignored."""
    mask = target == ignore_index
    if ignore_index < 0 or ignore_index >= num_classes:
        target = torch.where(mask, 0, target)
    if weight is None:
        return target, (~mask).to(dtype)
    return target, torch.where(mask, 0, weight.index_select(0, target))


def _shifted_logits(x: torch.Tensor, lw: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    logits = torch.mm(x, lw.T)
    if bias is not None:
        logits = logits + bias
    return logits - torch.amax(logits, dim=1, keepdim=True)


def chunked(func: Any, args: tuple, kwargs: dict) -> Any:
    """``_linear_cross_entropy_batch_chunked``: ``(loss, grad_input, grad_linear_weight,
    grad_linear_bias)``."""
    b = _bind(_SCALAR_ARGS, args, kwargs)
    reduction = b["reduction"]
    if not _traceable(b, reduction) or reduction == "none":
        return fallback.run_eagerly(func, args, kwargs, why="unsupported by backend for these arguments")
    x, lw, bias = b["input"], b["linear_weight"], b.get("linear_bias")
    dtype = x.dtype
    target, w = _row_weights(b["target"], b.get("weight"), int(b["ignore_index"]), lw.shape[0], dtype)
    if reduction == "mean":
        total = w.sum()
        w = w / torch.where(total == 0, torch.nan, -total)
    else:
        w = -w
    logits = _shifted_logits(x, lw, bias)
    target_logit = logits.gather(1, target.unsqueeze(1)).squeeze(1)
    exp = torch.exp(logits)
    denom = exp.sum(1)
    loss = torch.dot(w, target_logit) - torch.dot(w, torch.log(denom))
    if reduction == "mean" and x.shape[0] == 0:
        loss = torch.full_like(loss, torch.nan)
    p = exp * (w / denom).unsqueeze(1)  # softmax, times each row's weight
    empty = (0, 0)
    grad_input = (torch.index_select(lw, 0, target) * w.unsqueeze(1) - torch.mm(p, lw)
                  if b.get("compute_input_grad") else x.new_empty(empty))
    grad_lw = (torch.index_add(-torch.mm(p.T, x), 0, target, x * w.unsqueeze(1))
               if b.get("compute_linear_weight_grad") else x.new_empty(empty))
    grad_bias = (torch.index_add(-p.sum(0), 0, target, w)
                 if b.get("compute_linear_bias_grad") else x.new_empty((0,)))
    return loss, grad_input, grad_lw, grad_bias


def chunked_no_reduction(func: Any, args: tuple, kwargs: dict) -> Any:
    """``_linear_cross_entropy_batch_chunked_no_reduction``: each row's ``w (log d - logit[t])``."""
    b = _bind(_NONE_ARGS, args, kwargs)
    if not _traceable(b, "none"):
        return fallback.run_eagerly(func, args, kwargs, why="unsupported by backend for these arguments")
    x, lw, bias = b["input"], b["linear_weight"], b.get("linear_bias")
    target, w = _row_weights(b["target"], b.get("weight"), int(b["ignore_index"]), lw.shape[0], x.dtype)
    logits = _shifted_logits(x, lw, bias)
    target_logit = logits.gather(1, target.unsqueeze(1)).squeeze(1)
    return (torch.log(torch.exp(logits).sum(1)) - target_logit) * w


def _handlers() -> dict[Any, Any]:
    try:  # defines the ops (``torch.nn.functional`` imports it only at the first call)
        import torch.nn.modules.linear_cross_entropy  # noqa: F401
    except ImportError:
        return {}
    found = {}
    for name, handler in (("_linear_cross_entropy_batch_chunked", chunked),
                          ("_linear_cross_entropy_batch_chunked_no_reduction", chunked_no_reduction)):
        packet = getattr(torch.ops.torch_nn, name, None)
        if packet is not None:
            found[packet.default] = handler
    return found


#: op -> handler (``fallback.SPECIAL_HANDLERS``); empty on a torch without these ops.
HANDLERS: dict[Any, Any] = _handlers()
