"""Automatic mixed precision for lazy tensors: ``lazy_core.autocast``.

Why not ``torch.autocast("lazy")``: PyTorch only accepts autocast device types
with an ``Autocast<Backend>`` dispatch key (``torch._C._is_autocast_available``
is False for ``lazy`` in torch 2.x), and ``torch.autocast("cpu")`` leaves lazy
tensors alone (its kernels check ``tensor.is_cpu``). A dispatch-level cast
inside ``LazyTensor.__torch_dispatch__`` would be wrong too: that handler runs
*below* autograd, so autograd would record ``mm(float32, float32)`` and
backpropagate float32 gradients through a bfloat16 result.

So the casts are applied *above* autograd, by a ``TorchFunctionMode``: for a
function whose tensor arguments include a floating lazy tensor, the mode casts
those arguments per ATen's autocast policy (``aten/src/ATen/autocast_mode.cpp``
and ``autocast_mode.h``) and then calls the function. The casts are ordinary
``.to(dtype)`` calls, so autograd records them (gradients come back in each
parameter's own dtype) and they become IR nodes that fuse into the step graph.

Policies (the ``policy`` argument):

* ``"cpu"`` (default): ATen's CPU lists, so lazy code gets exactly the dtypes
  ``torch.autocast("cpu")`` gives on CPU tensors (the correctness reference).
* ``"cuda"``: ATen's CUDA lists, which also run softmax, log_softmax, the
  norms, exp/log/pow and sum/cumsum/prod in float32 (safer for float16).

As in ATen, a *lower* op casts float32 (not float64) arguments to the low
dtype; an *fp32* op casts low-precision arguments to float32; a *promote* op
casts every floating argument to the widest one among them. In-place and
``out=`` variants are never cast. Leaf tensors that require grad (weights) are
cast once per outermost ``autocast`` region (ATen's cast cache).

Limitation: the mode sees the outermost overridable call. A Python function
with its own ``__torch_function__`` check that is not in the lists (for
example ``F.multi_head_attention_forward``) runs its inner ops uncast.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

from .tensor import LazyTensor

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "LOWER", "FP32", "PROMOTE"]

# ATen's lower-precision list (shared by CPU and CUDA), by overridable function name.
_LOWER_COMMON = frozenset({
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "_convolution", "prelu", "addmm", "matmul", "mm", "linear",
    "addbmm", "baddbmm", "bmm", "linalg_vecdot", "scaled_dot_product_attention",
    "_native_multi_head_attention",
})
_LOWER_CUDA_ONLY = frozenset({
    "addmv", "addr", "einsum", "mv", "chain_matmul", "linalg_multi_dot", "lstm_cell", "gru_cell",
    "rnn_tanh_cell", "rnn_relu_cell",
})
# Losses and ops that need range or precision: float32 on every device.
_FP32_COMMON = frozenset({
    "prod", "cdist", "mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss", "cross_entropy",
    "cross_entropy_loss", "l1_loss", "huber_loss", "margin_ranking_loss", "soft_margin_loss",
    "triplet_margin_loss", "multi_margin_loss", "kl_div", "multilabel_margin_loss",
    "binary_cross_entropy_with_logits",
})
_FP32_CPU_ONLY = frozenset({
    "binary_cross_entropy", "avg_pool3d", "grid_sampler", "polar", "quantile", "nanquantile", "stft",
    "trace", "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve", "orgqr",
    "ormqr", "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d",
    "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d",
    "replication_pad3d", "ctc_loss", "fractional_max_pool2d", "fractional_max_pool3d",
    "adaptive_max_pool3d", "geqrf", "qr", "svd", "triangular_solve", "view_as_complex",
    "fft_fft", "fft_ifft", "fft_fft2", "fft_ifft2", "fft_fftn", "fft_ifftn", "fft_rfft", "fft_irfft",
    "fft_rfft2", "fft_irfft2", "fft_rfftn", "fft_irfftn", "fft_hfft", "fft_ihfft",
    "linalg_cond", "linalg_matrix_rank", "linalg_solve", "linalg_cholesky", "linalg_svdvals",
    "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_householder_product", "linalg_tensorinv",
    "linalg_tensorsolve", "linalg_qr", "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh",
    "linalg_lstsq", "linalg_inv_ex",
})
#: ``F.pad`` is one function for every mode; ATen's CPU list names the kernels of two of them.
_FP32_CPU_PAD_MODES = frozenset({"reflect", "replicate"})
_FP32_CUDA_ONLY = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm",
    "rms_norm", "group_norm", "frobenius_norm", "nuclear_norm", "cosine_similarity", "dist",
    "pdist", "renorm", "logsumexp", "softmax", "log_softmax", "cumprod", "cumsum", "sum",
    "linalg_vector_norm", "linalg_matrix_norm", "norm", "interpolate", "upsample",
    "upsample_nearest", "upsample_bilinear",
})
_PROMOTE_COMMON = frozenset({"cat", "stack", "concat", "concatenate", "index_copy"})
_PROMOTE_CUDA_ONLY = frozenset({
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
    "index_put", "tensordot", "scatter_add",
})

#: Per policy, the function names run in the low dtype, in float32, or promoted to the widest.
LOWER = {"cpu": _LOWER_COMMON, "cuda": _LOWER_COMMON | _LOWER_CUDA_ONLY}
FP32 = {"cpu": _FP32_COMMON | _FP32_CPU_ONLY, "cuda": _FP32_COMMON | _FP32_CUDA_ONLY}
PROMOTE = {"cpu": _PROMOTE_COMMON, "cuda": _PROMOTE_COMMON | _PROMOTE_CUDA_ONLY}

# Dunder methods and aliases that are the same op for the policy.
_ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__pow__": "pow", "__rpow__": "pow"}
_LOW_DTYPES = (torch.float16, torch.bfloat16)


@dataclass
class _State:
    enabled: bool = False
    dtype: torch.dtype = torch.bfloat16
    policy: str = "cpu"
    cache_enabled: bool = True
    depth: int = 0  # how many lazy_core.autocast regions are open (the mode is pushed once)
    cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)


_tls = threading.local()


def _state() -> _State:
    s = getattr(_tls, "state", None)
    if s is None:
        s = _tls.state = _State()
    return s


def is_autocast_enabled() -> bool:
    """True inside an enabled ``lazy_core.autocast`` region (this thread)."""
    return _state().enabled


def get_autocast_dtype() -> torch.dtype:
    """The low dtype of the innermost ``lazy_core.autocast`` region (this thread)."""
    return _state().dtype


def _eligible(x: Any) -> bool:
    """A floating, non-float64 lazy tensor: what ATen's ``is_autocast_eligible`` accepts."""
    return isinstance(x, LazyTensor) and x.is_floating_point() and x.dtype != torch.float64


def _cast(x: Any, dtype: torch.dtype, s: _State) -> Any:
    if not _eligible(x) or x.dtype == dtype:
        return x
    # Not under no_grad: such a cast has no grad_fn, and a later use with grad on took it from the
    # cache, so the weight got no gradient (a teacher/EMA pass sharing a weight; eager's cache
    # keeps it out too).
    cacheable = s.cache_enabled and x.is_leaf and x.requires_grad and torch.is_grad_enabled()
    if cacheable:
        hit = s.cache.get(id(x))
        if hit is not None and hit[0] is x and hit[1].dtype == dtype:
            return hit[1]
    out = x.to(dtype)
    if cacheable:
        s.cache[id(x)] = (x, out)  # holds x so its id is not reused while cached
    return out


def _promote_dtype(leaves: list[Any], low: torch.dtype) -> torch.dtype:
    """ATen's ``promote_type``: float32 if any eligible argument is float32, else the low dtype."""
    out = low
    for x in leaves:
        if _eligible(x) and x.dtype == torch.float32:
            out = torch.float32
    return out


def _policy_of(func: Callable, s: _State, args: tuple = (), kwargs: dict | None = None) -> tuple[str | None, str]:
    name = getattr(func, "__name__", "")
    name = _ALIASES.get(name, name)
    if name == "pad" and s.policy == "cpu":
        mode = kwargs.get("mode") if kwargs and "mode" in kwargs else (args[2] if len(args) > 2 else "constant")
        return ("fp32" if mode in _FP32_CPU_PAD_MODES else None), name
    if name in LOWER[s.policy]:
        return "lower", name
    if name in FP32[s.policy]:
        return "fp32", name
    if name in PROMOTE[s.policy]:
        return "promote", name
    return None, name


class _AutocastMode(TorchFunctionMode):
    """Casts the lazy arguments of listed functions; everything else passes through."""

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        s = _state()
        if not s.enabled or "out" in kwargs:
            return func(*args, **kwargs)
        kind, _ = _policy_of(func, s, args, kwargs)
        if kind is None:
            return func(*args, **kwargs)
        leaves, _ = tree_flatten((args, kwargs))
        if not any(_eligible(x) for x in leaves):
            return func(*args, **kwargs)
        if kind == "lower":
            target = s.dtype
        elif kind == "fp32":
            if kwargs.get("dtype") is not None:  # an explicit dtype wins (ATen's set_opt_dtype)
                return func(*args, **kwargs)
            target = torch.float32
        else:
            target = _promote_dtype(leaves, s.dtype)
        args, kwargs = tree_map(lambda x: _cast(x, target, s), (args, kwargs))
        return func(*args, **kwargs)


@dataclass(frozen=True)
class Settings:
    """One thread's autocast settings, as ``torch.utils.checkpoint`` saves CUDA's for replay."""

    enabled: bool
    dtype: torch.dtype
    policy: str
    cache_enabled: bool


def current_settings() -> Settings:
    s = _state()
    return Settings(s.enabled, s.dtype, s.policy, s.cache_enabled)


def restore_settings(want: Settings) -> None:
    """Make ``want`` this thread's settings, pushing or popping a mode of its own as needed.

    Idempotent (checkpoint restores one state per tensor argument, and in forward order).
    Checkpoint's recompute sets the forward's settings, then the ones saved before it: so a
    mode pushed here is on top of the mode stack when it is popped again."""
    s = _state()
    s.enabled, s.dtype, s.policy, s.cache_enabled = want.enabled, want.dtype, want.policy, want.cache_enabled
    mode = getattr(_tls, "restored_mode", None)
    if want.enabled and s.depth == 0 and mode is None:
        _tls.restored_mode = mode = _AutocastMode()
        mode.__enter__()
        s.depth = 1  # a lazy_core.autocast region opened inside must not push a second mode
    elif not want.enabled and mode is not None and s.depth == 1:
        _tls.restored_mode = None
        s.depth = 0
        s.cache.clear()
        mode.__exit__(None, None, None)


class autocast(contextlib.ContextDecorator):  # noqa: N801 - named like torch.autocast
    """``torch.autocast`` for device ``lazy``: run listed ops of lazy tensors in ``dtype``.

    ::

        with lazy_core.autocast(dtype=torch.bfloat16):
            loss = loss_fn(model(x), y)      # matmuls in bf16, the loss in float32
        loss.backward()                      # outside, as with torch.autocast

    ``enabled=False`` opens a region without casts inside an enabled one;
    regions nest and restore the outer settings on exit. Only lazy tensors are
    touched: CPU tensors follow ``torch.autocast("cpu")`` as usual.
    """

    def __init__(self, dtype: torch.dtype = torch.bfloat16, enabled: bool = True,
                 cache_enabled: bool = True, policy: str = "cpu") -> None:
        if dtype not in _LOW_DTYPES:
            raise RuntimeError(f"lazy_core.autocast: dtype must be torch.bfloat16 or torch.float16, got {dtype}")
        if policy not in LOWER:
            raise ValueError(f"lazy_core.autocast: policy must be one of {sorted(LOWER)}, got {policy!r}")
        self.dtype, self.enabled, self.cache_enabled, self.policy = dtype, bool(enabled), cache_enabled, policy
        self._saved: list[tuple[Any, ...]] = []
        self._modes: list[_AutocastMode | None] = []

    def __enter__(self) -> autocast:
        s = _state()
        self._saved.append((s.enabled, s.dtype, s.policy, s.cache_enabled))
        s.enabled, s.dtype, s.policy, s.cache_enabled = self.enabled, self.dtype, self.policy, self.cache_enabled
        mode = None
        if s.depth == 0:
            mode = _AutocastMode()
            mode.__enter__()
        self._modes.append(mode)
        s.depth += 1
        return self

    def __exit__(self, *exc: Any) -> None:
        s = _state()
        s.depth -= 1
        s.enabled, s.dtype, s.policy, s.cache_enabled = self._saved.pop()
        mode = self._modes.pop()
        if mode is not None:
            s.cache.clear()  # ATen clears its cast cache when the outermost region exits
            mode.__exit__(*exc)
