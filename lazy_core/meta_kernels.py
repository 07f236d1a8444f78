"""Shape functions for ATen ops that have a CPU kernel but no Meta one.

The tracer infers every result's shape and dtype by running the op on meta tensors
(``tensor._infer``); an op without a Meta kernel ran eagerly instead, cutting the graph,
even where the backend can lower it. For those ops the result metadata is built here,
after the CPU kernel has checked the arguments on an empty tensor of the same dtype:
those checks read arguments, not data, so a bad call raises PyTorch's own error at the
call, as eager does.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def _checked_on_empty(op: Any, self: torch.Tensor, *args: Any) -> None:
    op(torch.empty(0, dtype=self.dtype), *args)


def _fake_quantize_cachemask(self: torch.Tensor, scale: float, zero_point: int, quant_min: int,
                             quant_max: int) -> tuple[torch.Tensor, torch.Tensor]:
    _checked_on_empty(aten.fake_quantize_per_tensor_affine_cachemask.default, self, scale, zero_point,
                      quant_min, quant_max)
    return torch.empty_like(self), torch.empty_like(self, dtype=torch.bool)


def _mvlgamma(self: torch.Tensor, p: int) -> torch.Tensor:
    """Its Meta kernel skips the CPU kernel's ``p >= 1`` check: ``mvlgamma(x, 0)`` read 0."""
    _checked_on_empty(aten.mvlgamma.default, self, p)
    return aten.mvlgamma.default(self, p)


def _geqrf(self: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(QR, tau)``: ``A``'s shape and ``min(m, n)`` reflectors per matrix."""
    aten.geqrf.default(torch.empty((0, 0) if self.dim() >= 2 else (0,), dtype=self.dtype))  # eager's checks
    m, n = self.shape[-2], self.shape[-1]
    return torch.empty_like(self), self.new_empty((*self.shape[:-2], min(m, n)))


def _multilabel_margin(self: torch.Tensor, target: torch.Tensor, reduction: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Its Meta kernel gives a per-sample loss of shape [1] for a 0-d or 1-d input, where the CPU
    kernel's is 0-d."""
    loss, is_target = aten.multilabel_margin_loss_forward.default(self, target, reduction)
    if reduction == 0 and self.dim() < 2:
        loss = loss.reshape(())
    return loss, is_target


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, bias: Any = None,
                out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """The CPU kernel's checks (``_grouped_mm_validate_inputs``) and result: its Meta kernel
    is CUDA's, which takes bfloat16 only, where the CPU kernel also takes float32 and float16."""
    def check(ok: bool, msg: str) -> None:
        if not ok:
            raise RuntimeError(msg)

    floats = (torch.bfloat16, torch.float32, torch.float16)
    check(a.dtype in floats, f"Expected mat_a to be Float32, BFloat16 or Float16 matrix, got {_scalar_name(a)}")
    check(b.dtype in floats, f"Expected mat_b to be Float32, BFloat16 or Float16 matrix, got {_scalar_name(b)}")
    check(a.dim() in (2, 3), "mat_a has to be 2 or 3d")
    check(b.dim() in (2, 3), "mat_b has to be 2 or 3d")
    if a.dim() == 3 or b.dim() == 3:
        check(a.shape[-1] == b.shape[-2], "contraction dimension of mat_a and mat_b must match")
    for m in (a, b):
        align = 16 // m.element_size()
        st, sz = m.stride(), m.shape
        if st[-2] == 1 and st[-1] >= max(1, sz[-2]):
            check(st[-1] % align == 0, "strides should be multiple of 16 bytes")
        elif st[-1] == 1 and st[-2] >= max(1, sz[-1]):
            check(st[-2] % align == 0, "strides should be multiple of 16 bytes")
        else:
            check(False, f"Invalid strides/sizes, got {list(st)} for strides and {list(sz)} for sizes")
    check((offs is not None) == (a.dim() == 2 or b.dim() == 2),
          "Have to provide offsets if there is a 2d matrix, or no offset if both matrices are 3d")
    if offs is not None:
        check(offs.dim() == 1, "offs has to be 1D")
        check(offs.dtype == torch.int32, "Offsets have to be int32")
    check(bias is None, "Bias not supported yet")
    check(out_dtype in (None, a.dtype), "Grouped gemm output dtype must match `mat_a` dtype")
    if a.dim() == 2 and b.dim() == 2:
        size = (offs.shape[0], a.shape[0], b.shape[1])
    elif a.dim() == 2:
        check(offs.shape[0] == b.shape[0], "matrix batch sizes have to match")
        size = (a.shape[0], b.shape[-1])
    elif b.dim() == 2:
        check(offs.shape[0] == a.shape[0], "matrix batch sizes have to match")
        size = (a.shape[1], b.shape[1])
    else:
        check(a.shape[0] == b.shape[0], "batched dimension has to match")
        size = (a.shape[0], a.shape[1], b.shape[-1])
    return a.new_empty(size)


def _scalar_name(t: torch.Tensor) -> str:
    """ATen's name of ``t``'s dtype (``Float``, ``Int``), as its error messages print it."""
    return torch.empty(0, dtype=t.dtype).type().split(".")[-1].removesuffix("Tensor")


#: op -> its shape function on meta tensors (same arguments as the op). Also ops whose Meta
#: kernel misses an argument check of the CPU kernel.
MISSING: dict[Any, Callable[..., Any]] = {
    aten.fake_quantize_per_tensor_affine_cachemask.default: _fake_quantize_cachemask,
    aten.mvlgamma.default: _mvlgamma,
    aten.geqrf.default: _geqrf,
    aten.multilabel_margin_loss_forward.default: _multilabel_margin,
    aten._grouped_mm.default: _grouped_mm,
}


def _quantized_decomposed(op: Any) -> Callable[..., Any] | None:
    """PT2E's ``quantized_decomposed`` ops: their Python kernel run on the meta arguments.

    Their Meta kernels skip the kernels' argument checks (a ``quant_min`` outside the dtype,
    a ``dtype`` that is no integer type, a dequantized input of another dtype, scales that
    do not match the axis), so a bad call raised only at the read, from the compiled graph.
    The kernels' other operations all have Meta kernels. A ``.tensor`` overload's scale and
    zero point are read with ``item()``: they become one-element CPU tensors of the same
    shape (a wrong numel raises the kernel's own error), as the checks read no data."""
    decomposed = sys.modules.get("torch.ao.quantization.fx._decomposed")
    if decomposed is None:  # the ops are registered by that module: it is loaded if one runs
        return None
    kernel = getattr(decomposed, op._schema.name.split("::")[-1] + ("_tensor" if op._overloadname == "tensor" else ""),
                     None)
    if kernel is None or op._overloadname not in ("default", "tensor"):
        return None
    if op._overloadname == "default":
        return kernel

    def checked(input: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, *args: Any,
                **kwargs: Any) -> torch.Tensor:
        return kernel(input, torch.ones(scale.shape, dtype=scale.dtype),
                      torch.zeros(zero_point.shape, dtype=zero_point.dtype), *args, **kwargs)

    return checked


_NAMESPACES: dict[str, Callable[[Any], Callable[..., Any] | None]] = {
    "quantized_decomposed": _quantized_decomposed,
}


def shape_function(op: Any) -> Callable[..., Any]:
    """What the tracer runs on meta tensors for ``op``: a function above, else ``op`` itself."""
    fn = MISSING.get(op)
    if fn is None:
        by_namespace = _NAMESPACES.get(op.namespace)
        fn = (by_namespace(op) if by_namespace else None) or op
        MISSING[op] = fn
    return fn
