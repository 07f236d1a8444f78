"""Kernels for the ``Lazy`` dispatch key: tensor factories with ``device="lazy"``.

``torch.zeros(3, device="lazy")`` has no lazy tensor argument, so it never
reaches ``LazyTensor.__torch_dispatch__``; it reaches the ``Lazy`` dispatch
key. Registering the two allocation primitives there is enough: every other
factory (zeros, ones, full, randn, arange, tensor(...)) is composite and
continues on the LazyTensor these return (``zero_``, ``fill_``, ``normal_``,
``copy_``, ``arange.out`` ...).
"""

from __future__ import annotations

from typing import Any

import torch

from .ir import Output

_lib: torch.library.Library | None = None


def _empty(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None, memory_format: Any = None) -> torch.Tensor:
    from .tensor import LazyTensor, _Untraceable, _wrap, from_cpu, record

    kwargs = {"dtype": dtype or torch.get_default_dtype()}
    index = torch.device(device).index or 0 if device is not None else 0
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        # channels_last(_3d): eager's strides. ``cpu_t.to("lazy")`` comes here with the
        # CPU tensor's suggested format (the Lazy device does not take ``empty_strided``
        # there), and ``as_strided`` addresses the storage in that order.
        stride = torch.empty(list(size), device="meta", memory_format=memory_format).stride()
        return _empty_strided(size, stride, dtype, layout, device, pin_memory)
    try:
        node, template = record(torch.ops.aten.empty.memory_format, (list(size),), kwargs)
    except _Untraceable:  # a dtype the backend cannot compile: device data from the host
        return from_cpu(torch.zeros(list(size), dtype=kwargs["dtype"]), index)
    t = _wrap(node, template, index)
    assert isinstance(t, LazyTensor)
    return t


def _empty_strided(size: Any, stride: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                   pin_memory: Any = None) -> torch.Tensor:
    from .tensor import LazyTensor, _Untraceable, _wrap, from_cpu, record

    kwargs = {"dtype": dtype or torch.get_default_dtype()}
    index = torch.device(device).index or 0 if device is not None else 0
    try:
        node, template = record(torch.ops.aten.empty_strided.default, (list(size), list(stride)), kwargs)
    except _Untraceable:  # a dtype the backend cannot compile: device data from the host
        return from_cpu(torch.zeros(list(size), dtype=kwargs["dtype"]), index)
    t = _wrap(node, template, index)
    assert isinstance(t, LazyTensor)
    return t


# Factories whose composite kernels allocate ``empty(0)`` and then resize it
# through an ``out=`` op. Lazy tensors have fixed shapes, so these are computed
# on the CPU (cheap, exact, and the same random numbers for randperm) and
# uploaded as device data.
_HOST_FACTORIES = [
    "arange", "arange.start", "arange.start_step", "range", "range.step",
    "linspace", "logspace", "randperm", "randperm.generator", "eye", "eye.m",
    "scalar_tensor", "tril_indices", "triu_indices",
]


def _host_factory(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        from .tensor import from_cpu

        device = kwargs.pop("device", None)
        kwargs.pop("pin_memory", None)
        host = op(*args, device="cpu", **kwargs)
        index = torch.device(device).index if device is not None else None
        return from_cpu(host, index or 0)

    return kernel


def _efficientzerotensor(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                         pin_memory: Any = None) -> torch.Tensor:
    """Forward-mode AD's zero tangents (``make_dual``, ``unpack_dual`` of an unused input) raised
    "Could not run 'aten::_efficientzerotensor' ... 'Lazy' backend" (adversarial sweep). Lazy
    tensors have no ZeroTensor form: plain zeros, the values the ZeroTensor stands for."""
    from .tensor import from_cpu

    index = torch.device(device).index if device is not None else None
    return from_cpu(torch.zeros(size, dtype=dtype), index or 0)


def _copy_from(src: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    # Reached when PyTorch copies into a lazy tensor with Python dispatch
    # excluded (``torch.tensor(data, device="lazy")``).
    from .fallback import copy_into

    return copy_into(dst, src)


def _one_hot(self: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
    # one_hot is composite: on lazy tensors it compares with arange and never
    # reads out of bounds, but a class out of range must still raise as on the
    # CPU: its checks (lazy_core.checks), then PyTorch's decomposition.
    from .checks import check_one_hot

    check_one_hot(self, num_classes)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten.one_hot.default.decompose(self, num_classes)


def _linear(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    # linear is composite, and for a tensor subclass it adds the bias out of place, so a
    # bias of more dims than the product broadcast it (``F.linear(x1d, w, b3d)`` of shape
    # [3, 0, 3], fuzz seed 1) where eager's in-place add raises. Such a bias is rare: the
    # CPU kernel, run on zeros of the operands' layouts, says what eager does with it.
    # So for a bias of another dtype: eager raises (addmm's check) or, on the matmul path
    # (a strided bias), adds it in place and keeps the product's dtype, where the out-of-place
    # add promoted (float64 for a float32 product, fuzz seed 4101).
    want = None
    if bias is not None and (bias.dim() > 1 or bias.dtype != input.dtype or bias.dtype != weight.dtype):
        stand_ins = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).zero_()
                     for t in (input, weight, bias) if t.numel() <= 1 << 22]
        if len(stand_ins) == 3:
            want = torch.ops.aten.linear.default(*stand_ins).dtype
    out = torch.ops.aten.linear.default.decompose(input, weight, bias)
    return out if want is None or out.dtype == want else out.to(want)


def _ctc_loss(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
              target_lengths: torch.Tensor, blank: int = 0, reduction: int = 1,
              zero_infinity: bool = False) -> torch.Tensor:
    # ctc_loss is composite. For plain tensors it reads the lengths into a list and builds the
    # mean's divisor on the loss's device, so CUDA data with CPU lengths works; a tensor
    # subclass takes another path that divides the loss by ``target_lengths`` as given, and
    # CPU lengths raised "two devices" for the default ``reduction="mean"`` (the adversarial
    # sweep). The mean here divides by the lengths moved to the loss's device, as that path does.
    decompose = torch.ops.aten.ctc_loss.Tensor.decompose
    if reduction != 1 or not isinstance(target_lengths, torch.Tensor) or target_lengths.device == log_probs.device:
        return decompose(log_probs, targets, input_lengths, target_lengths, blank, reduction, zero_infinity)
    loss = decompose(log_probs, targets, input_lengths, target_lengths, blank, 0, zero_infinity)
    return (loss / target_lengths.to(loss.device).clamp_min(1)).mean()


def _may_need_grad(a: torch.Tensor) -> bool:
    """ATen's ``_may_require_fw_or_bw_grad`` less its test for a tensor subclass (true of every
    lazy tensor)."""
    import torch.autograd.forward_ad as fwAD

    return (torch.is_grad_enabled() and a.requires_grad) or fwAD.unpack_dual(a).tangent is not None


def _eigvalsh(a: torch.Tensor, UPLO: str = "L") -> torch.Tensor:  # noqa: N803
    # eigvalsh and svdvals are composite: for a tensor subclass they ask _linalg_eigh /
    # _linalg_svd for the vectors too (only a gradient needs them), which no backend computes
    # as LAPACK does (their signs), so the call ran eagerly. Without a gradient they ask for the
    # values only, as eager's kernel does for a plain tensor (lowering/jacobi.py lowers that).
    if _may_need_grad(a):
        return torch.ops.aten.linalg_eigvalsh.default.decompose(a, UPLO)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten._linalg_eigh.default(a, UPLO, False)[0]


def _svdvals(a: torch.Tensor, *, driver: str | None = None) -> torch.Tensor:
    if _may_need_grad(a):
        return torch.ops.aten.linalg_svdvals.default.decompose(a, driver=driver)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten._linalg_svd.default(a, False, False, driver=driver)[1]


def _local_scalar_dense(t: torch.Tensor) -> Any:
    """``item()`` reached below Python dispatch: ``torch.tensor([a[0], a[1]])`` of 0-d lazy
    tensors reads each in C++ with the Python key excluded, and raised "Could not run
    'aten::_local_scalar_dense' with arguments from the 'Lazy' backend" (a CUDA tensor works).
    The value is read as ``.item()`` reads it (found by the adversarial sweep)."""
    from .tensor import LazyTensor, materialize

    if not isinstance(t, LazyTensor):
        raise NotImplementedError("aten::_local_scalar_dense on the Lazy key of a non-lazy tensor")
    return materialize(t, "item").item()


def register() -> None:
    """Install the Lazy-key kernels (idempotent)."""
    global _lib
    if _lib is not None:
        return
    from .executor import traced

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", traced(_empty), "Lazy")
    lib.impl("empty_strided", traced(_empty_strided), "Lazy")
    lib.impl("_copy_from", traced(_copy_from), "Lazy")
    lib.impl("_local_scalar_dense", _local_scalar_dense, "Lazy")
    lib.impl("_efficientzerotensor", traced(_efficientzerotensor), "Lazy")
    lib.impl("one_hot", _one_hot, "AutogradLazy")
    lib.impl("linear", _linear, "AutogradLazy")
    lib.impl("ctc_loss.Tensor", _ctc_loss, "AutogradLazy")
    lib.impl("linalg_eigvalsh", _eigvalsh, "AutogradLazy")
    lib.impl("linalg_svdvals", _svdvals, "AutogradLazy")
    for name in _HOST_FACTORIES:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet), overload or "default")
        lib.impl(name, traced(_host_factory(op)), "Lazy")
    _lib = lib


__all__ = ["register", "Output"]
