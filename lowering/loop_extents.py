"""How many elements one output element of an ATen call loops over: lavapipe's guard.

Mesa's lavapipe ends every shader loop after 65,535 iterations without an error
(``lowering/short_loops.py``). Which calls IREE's SPIR-V code turns into one
long loop depends on how IREE tiles each op, and an adversarial run found it not
even monotonic in the size: ``mm`` with a contraction of 131,072 or 2**20 was
wrong and of 262,144 right; ``log_softmax`` and ``layer_norm`` along 131,072,
``mse_loss``/``aminmax``/``prod`` at 131,072, ``cross_entropy`` over 2**20 rows,
``scatter_add`` of 65,536 sources into one slot were all short. A list of the
sizes measured wrong cannot be trusted past the sizes measured, so the Vulkan
target goes by what each call could loop over: ``loop_extent`` is an upper
bound on the number of input elements that feed one output element (the
reduced elements of a reduction, the contraction of a matmul, the sources a
scatter may add into one slot, a pooling window), and a call whose bound passes
the limit runs eagerly (``short_loops.long_loop``).

The bound is by families, from the op's schema, and errs long:
- ops that loop over nothing (elementwise ops, views, copies, fills, gathers,
  concatenation, padding, non-accumulating scatters): 0;
- a ``dim`` argument (softmax, norms, var, sort, topk, argmax, ...): the product
  of those dims, all of them when it is None;
- families with their own arguments: contractions, normalizations (batch
  statistics in training, layer and group norms), losses that reduce,
  accumulating scatters, pooling windows, convolutions (``short_loops``);
- any other op: the element count of its largest tensor argument.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["loop_extent", "may_loop", "scan_extent"]

# Ops whose code has no loop over a dim of their input: each output element reads a fixed
# number of input elements. (Elementwise ops carry ATen's ``pointwise`` tag and views alias.)
_NO_LOOP = frozenset("""
    _to_copy copy clone contiguous fill zero zeros zeros_like ones ones_like full full_like empty
    empty_like empty_strided new_zeros new_ones new_full new_empty new_empty_strided arange
    scalar_tensor lift_fresh lift_fresh_copy detach alias_copy resize set masked_fill where
    constant_pad_nd reflection_pad1d reflection_pad2d reflection_pad3d replication_pad1d
    replication_pad2d replication_pad3d cat stack index_select gather index _unsafe_index take
    embedding slice_scatter select_scatter diagonal_scatter as_strided_scatter flip roll repeat
    tril triu diag_embed eye pixel_shuffle pixel_unshuffle im2col tile hardswish rsub
    randn_like rand_like randint_like normal uniform bernoulli exponential geometric log_normal
    cauchy random native_dropout
    repeat_interleave bucketize searchsorted upsample_nearest1d upsample_nearest2d
    upsample_nearest3d upsample_bilinear2d upsample_linear1d upsample_trilinear3d upsample_bicubic2d
    _upsample_nearest_exact1d _upsample_nearest_exact2d _upsample_nearest_exact3d
    _adaptive_avg_pool2d_backward _adaptive_avg_pool3d_backward nll_loss_backward
    nll_loss2d_backward addr outer one_hot expand_copy permute_copy view_copy
    _unsafe_view unfold_copy narrow_copy split_copy squeeze_copy unsqueeze_copy t_copy
    transpose_copy select_copy slice_copy diagonal_copy as_strided_copy _reshape_copy
    hardswish_backward rrelu_with_noise glu prelu _prelu_kernel log_sigmoid_forward
    log_sigmoid_backward glu_backward _prelu_kernel_backward reflection_pad1d_backward
    reflection_pad2d_backward reflection_pad3d_backward replication_pad1d_backward
    replication_pad2d_backward replication_pad3d_backward index_copy index_fill diff
    _unsafe_masked_index
""".split())

#: Losses reducing over their input (their gradients are elementwise).
_LOSSES = frozenset("""
    mse_loss l1_loss smooth_l1_loss huber_loss binary_cross_entropy binary_cross_entropy_with_logits
    kl_div soft_margin_loss margin_ranking_loss hinge_embedding_loss poisson_nll_loss
    cosine_embedding_loss triplet_margin_loss
""".split())


def _name(op: Any) -> str:
    """The op's name without the overload and without the in-place ``_``."""
    name = getattr(op, "_opname", None) or str(op).split(".")[-2]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _argument(op: Any, args: tuple, kwargs: dict, name: str) -> Any:
    schema = getattr(op, "_schema", None)
    if name in kwargs:
        return kwargs[name]
    for i, a in enumerate(schema.arguments if schema is not None else ()):
        if a.name == name:
            if i < len(args) and not a.kwarg_only:
                return args[i]
            return a.default_value if a.has_default_value() else None
    return None


def _has_argument(op: Any, name: str) -> bool:
    schema = getattr(op, "_schema", None)
    return schema is not None and any(a.name == name for a in schema.arguments)


def _tensor(x: Any) -> torch.Tensor | None:
    return x if isinstance(x, torch.Tensor) else None


def _dims_product(shape: list[int], dims: Any) -> int:
    """The number of elements along ``dims`` of ``shape`` (all of them when None or empty)."""
    if dims is None or isinstance(dims, (list, tuple)) and len(dims) == 0 or not shape:
        return math.prod(shape)
    dims = [dims] if isinstance(dims, int) else list(dims)
    return math.prod(shape[d % len(shape)] for d in dims)


def _last(t: Any, default: int = 0) -> int:
    t = _tensor(t)
    return int(t.shape[-1]) if t is not None and t.dim() else default


def _contraction(index: int) -> Callable[[tuple, dict], int]:
    return lambda args, kwargs: _last(args[index]) if len(args) > index else 0


def _attention(args: tuple, kwargs: dict) -> int:
    q, k = _tensor(args[0]), _tensor(args[1]) if len(args) > 1 else None
    return max(_last(q), int(k.shape[-2]) if k is not None and k.dim() >= 2 else 0)


def _normalized(args: tuple, kwargs: dict) -> int:
    return math.prod(args[1]) if len(args) > 1 else 0


def _layer_norm_backward(args: tuple, kwargs: dict) -> int:
    n = math.prod(args[2])
    x = _tensor(args[1])
    return max(n, x.numel() // max(n, 1) if x is not None else 0)


def _per_channel(x: Any) -> int:
    """Elements per channel (dim 1) of ``x``: what batch statistics reduce."""
    x = _tensor(x)
    return x.numel() // max(int(x.shape[1]), 1) if x is not None and x.dim() > 1 else 0


def _batch_norm(op: Any, args: tuple, kwargs: dict) -> int:
    """Batch statistics (training) reduce each channel; running statistics do not."""
    training = _argument(op, args, kwargs, "training")
    if training is None:
        training = _argument(op, args, kwargs, "train")
    return _per_channel(args[0]) if training is None or training else 0


def _batch_norm_backward(args: tuple, kwargs: dict) -> int:
    return _per_channel(args[1])


def _group_norm(args: tuple, kwargs: dict) -> int:
    n, c, hw, groups = (int(a) for a in args[3:7])
    return max(c // max(groups, 1) * hw, n * hw)


def _group_norm_backward(args: tuple, kwargs: dict) -> int:
    n, c, hw, groups = (int(a) for a in args[5:9])
    return max(c // max(groups, 1) * hw, n * hw)


def _loss(op: Any, args: tuple, kwargs: dict) -> int:
    """A loss reduces over its input's elements unless ``reduction`` is none (0)."""
    x = _tensor(args[0]) if args else None
    return x.numel() if x is not None and _argument(op, args, kwargs, "reduction") != 0 else 0


def _nll_loss(op: Any, args: tuple, kwargs: dict) -> int:
    """``nll_loss`` reduces over its targets (one per row) unless ``reduction`` is none (0)."""
    return _sources(1)(args, kwargs) if _argument(op, args, kwargs, "reduction") != 0 else 0


def _sources(index: int) -> Callable[[tuple, dict], int]:
    """A scatter that adds: every source might land in one slot."""
    def extent(args: tuple, kwargs: dict) -> int:
        x = args[index] if len(args) > index else None
        if isinstance(x, (list, tuple)):
            return max((t.numel() for t in x if isinstance(t, torch.Tensor)), default=0)
        return x.numel() if isinstance(x, torch.Tensor) else 0
    return extent


def _index_put(op: Any, args: tuple, kwargs: dict) -> int:
    """With ``accumulate``, every indexed position (or value) might add into one slot."""
    if not _argument(op, args, kwargs, "accumulate"):
        return 0
    return max(_sources(1)(args, kwargs), _sources(2)(args, kwargs))


def _scatter(op: Any, args: tuple, kwargs: dict) -> int:
    """``scatter`` adds (or multiplies) only with a ``reduce``."""
    return _sources(2)(args, kwargs) if _argument(op, args, kwargs, "reduce") is not None else 0


def _window(index: int) -> Callable[[tuple, dict], int]:
    """A pooling window: the product of the kernel sizes at ``args[index]``."""
    def extent(args: tuple, kwargs: dict) -> int:
        k = args[index] if len(args) > index else ()
        return math.prod(k) if isinstance(k, (list, tuple)) else int(k)
    return extent


def _adaptive(args: tuple, kwargs: dict) -> int:
    x, out = _tensor(args[0]), args[1]
    if x is None or not isinstance(out, (list, tuple)) or not out:
        return 0
    spatial = list(x.shape[-len(out):])
    return math.prod(-(-s // max(int(o), 1)) + 1 for s, o in zip(spatial, out))


def _upsample_backward(args: tuple, kwargs: dict) -> int:
    """Each input element of an upsampling gathers the outputs it was copied or blended into."""
    out, inp = args[1], args[2]
    return math.prod(-(-int(o) // max(int(i), 1)) + 1 for o, i in zip(out, inp[-len(out):]))


def _convolution_backward(args: tuple, kwargs: dict) -> int:
    grad, weight = _tensor(args[0]), _tensor(args[2])
    if grad is None or weight is None:
        return 0
    per_weight = grad.shape[0] * math.prod(grad.shape[2:])  # the weight's and bias's gradients
    per_input = max(weight.shape[0], weight.shape[1]) * math.prod(weight.shape[2:])  # the input's
    return max(int(per_weight), int(per_input))


def _except_dim(index: int) -> Callable[[tuple, dict], int]:
    """``renorm``, weight norm: one norm per slice along the dim at ``args[index]``, over the rest."""
    def extent(args: tuple, kwargs: dict) -> int:
        x = _tensor(args[0])
        if x is None or not x.dim():
            return 0
        return x.numel() // max(int(x.shape[int(args[index]) % x.dim()]), 1)
    return extent


def _ignoring_op(f: Callable[[tuple, dict], int]) -> Callable[[Any, tuple, dict], int]:
    return lambda op, args, kwargs: f(args, kwargs)


def _families() -> dict[str, Callable[[Any, tuple, dict], int]]:
    plain = {
        "mm": _contraction(0), "bmm": _contraction(0), "matmul": _contraction(0), "mv": _contraction(0),
        "dot": _contraction(0), "vdot": _contraction(0), "linear": _contraction(0), "addmm": _contraction(1),
        "baddbmm": _contraction(1), "addbmm": _contraction(1), "addmv": _contraction(1),
        "_cdist_forward": _contraction(0), "cdist": _contraction(0),
        "_scaled_dot_product_attention_math": _attention, "scaled_dot_product_attention": _attention,
        "_scaled_dot_product_flash_attention_for_cpu": _attention,
        "_scaled_dot_product_flash_attention": _attention, "_scaled_dot_product_efficient_attention": _attention,
        "native_layer_norm": _normalized, "layer_norm": _normalized, "rms_norm": _normalized,
        "_fused_rms_norm": _normalized, "native_layer_norm_backward": _layer_norm_backward,
        "native_batch_norm_backward": _batch_norm_backward, "batch_norm_backward": _batch_norm_backward,
        "native_group_norm": _group_norm, "native_group_norm_backward": _group_norm_backward,
        "scatter_add": _sources(2), "scatter_reduce": _sources(2), "index_add": _sources(2),
        "index_reduce": _sources(2), "embedding_dense_backward": _sources(1),
        "_embedding_bag": _sources(1), "embedding_bag": _sources(1), "_embedding_bag_backward": _sources(1),
        "_embedding_bag_dense_backward": _sources(1), "_embedding_bag_per_sample_weights_backward": _sources(1),
        "max_pool1d": _window(1), "max_pool2d": _window(1), "max_pool3d": _window(1),
        "max_pool2d_with_indices": _window(1), "max_pool3d_with_indices": _window(1),
        "avg_pool1d": _window(1), "avg_pool2d": _window(1), "avg_pool3d": _window(1),
        # Max-pool gradients scatter every pooled gradient: wrong (zeros) on lavapipe past about
        # 400,000 of them while the window was 4 (an adversarial run), so bounded by their count.
        "max_pool2d_with_indices_backward": _sources(0), "max_pool3d_with_indices_backward": _sources(0),
        "avg_pool2d_backward": _window(2), "avg_pool3d_backward": _window(2),
        "_adaptive_avg_pool2d": _adaptive, "_adaptive_avg_pool3d": _adaptive, "adaptive_avg_pool1d": _adaptive,
        "adaptive_max_pool2d": _adaptive, "adaptive_max_pool3d": _adaptive, "adaptive_max_pool1d": _adaptive,
        "convolution_backward": _convolution_backward, "col2im": _window(2),
        "renorm": _except_dim(2), "_weight_norm_interface": _except_dim(2), "norm_except_dim": _except_dim(2),
        "_weight_norm": _except_dim(2), "_unsafe_masked_index_put_accumulate": _sources(3),
    }
    for name in ("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
                 "_upsample_nearest_exact2d", "_upsample_nearest_exact3d"):
        plain[f"{name}_backward"] = _upsample_backward
    for name in ("upsample_linear1d", "upsample_bilinear2d", "upsample_bicubic2d", "upsample_trilinear3d"):
        plain[f"{name}_backward"] = _sources(0)  # a scatter of every gradient, wrong like max-pool's
    families: dict[str, Callable[[Any, tuple, dict], int]] = {
        name: _ignoring_op(f) for name, f in plain.items()}
    for name in ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                 "batch_norm", "_batch_norm_with_update", "_batch_norm_no_update"):
        families[name] = _batch_norm
    families["_native_batch_norm_legit_no_training"] = _ignoring_op(lambda a, k: 0)
    for name in _LOSSES:
        families[name] = _loss
    families["nll_loss_forward"] = families["nll_loss2d_forward"] = _nll_loss
    families["index_put"] = families["_index_put_impl"] = families["_unsafe_index_put"] = _index_put
    families["scatter"] = _scatter
    return families


_FAMILIES = _families()


def _pointwise(op: Any) -> bool:
    """ATen's ``pointwise`` tag, which in-place overloads (``abs_``, ``eq_.Scalar``) lack: for
    those, their functional overload's."""
    if torch.Tag.pointwise in getattr(op, "tags", ()):
        return True
    opname = getattr(op, "_opname", "")
    if not opname.endswith("_") or opname.endswith("__"):
        return False
    packet = getattr(torch.ops.aten, opname[:-1], None)
    functional = getattr(packet, getattr(op, "_overloadname", ""), None) if packet is not None else None
    return functional is not None and torch.Tag.pointwise in functional.tags


@functools.lru_cache(maxsize=4096)
def _no_loop(op: Any) -> bool:
    name = _name(op)
    if name in _NO_LOOP or _pointwise(op):
        return True
    schema = getattr(op, "_schema", None)
    if schema is not None and schema.returns and all(
            r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
        return True  # a view (an in-place op's result aliases what it wrote)
    if name.endswith("_backward") and name not in _FAMILIES:
        forward = getattr(torch.ops.aten, name[: -len("_backward")], None)
        if forward is not None and any(
                torch.Tag.pointwise in getattr(forward, o).tags for o in forward.overloads()):
            return True  # the gradient of an elementwise op is elementwise
        if name[: -len("_backward")] in _LOSSES:
            return True  # a loss's gradient is elementwise
    return False


_SCANS = frozenset({"cumsum", "cumprod"})
_MASKED_PUTS = frozenset({"index_put", "_index_put_impl", "_unsafe_index_put"})


def scan_extent(op: Any, args: tuple, kwargs: dict) -> int:
    """The length of the scan a call runs, or 0: ``cumsum``/``cumprod`` (in place and ``out=``
    too) along their dim, and what torch-mlir and lazy-mlir's lowerings compute with a scan over a
    mask (``masked_scatter``, ``x[mask] = values``: the rank of each true position)."""
    name = _name(op)
    x = _tensor(args[0]) if args else None
    if x is None:
        return 0
    if name in _SCANS:
        dim = _argument(op, args, kwargs, "dim")
        return int(x.shape[int(dim) % x.dim()]) if x.dim() and dim is not None else x.numel()
    if name == "masked_scatter":
        mask = _tensor(args[1]) if len(args) > 1 else None
        return max(x.numel(), mask.numel() if mask is not None else 0)
    if name in _MASKED_PUTS and len(args) > 1 and isinstance(args[1], (list, tuple)):
        masks = [t for t in args[1] if isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)]
        return max((t.numel() for t in masks), default=0)
    return 0


def may_loop(op: Any) -> bool:
    """Whether ``loop_extent`` can be more than 0 for some call of ``op`` (decided once per op)."""
    return not _no_loop(op)


def loop_extent(op: Any, args: tuple, kwargs: dict) -> int:
    """An upper bound on the input elements that one output element of this call loops over
    (the module docstring has the families); 0 for an op with no loop."""
    if _no_loop(op):
        return 0
    name = _name(op)
    family = _FAMILIES.get(name)
    try:
        if family is not None:
            return int(family(op, args, kwargs))
        x = _tensor(args[0]) if args else None
        if x is not None and _has_argument(op, "dim"):
            return _dims_product(list(x.shape), _argument(op, args, kwargs, "dim"))
        return max((t.numel() for t in _tensors(args, kwargs)), default=0)
    except (IndexError, TypeError, ValueError):
        return max((t.numel() for t in _tensors(args, kwargs)), default=0)


def _tensors(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    for a in (*args, *kwargs.values()):
        if isinstance(a, torch.Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(t for t in a if isinstance(t, torch.Tensor))
    return out
