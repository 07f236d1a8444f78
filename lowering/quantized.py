"""Affine (fake) quantization as plain arithmetic, so graphs that hold it compile.

PT2E-quantized models carry ``quantized_decomposed.{quantize,dequantize}_per_{tensor,channel}``
around every quantized op, and quantization-aware training calls
``fake_quantize_per_tensor_affine``. torch-mlir has no torch-dialect op for any of them, so each
ran eagerly and cut the graph (six cases of torch-mlir's e2e suite, every 4th case, fell back on
them). Their values are plain float32 arithmetic:

- ``quantized_decomposed.*``: PyTorch's own Python kernels (``torch.ao.quantization.fx._decomposed``,
  registered as their CompositeExplicitAutograd implementation) are traceable as they are, so the
  decomposition is that kernel, traced. It is the definition, not a copy of it.
- ``fake_quantize_per_tensor_affine_cachemask`` has a C++ kernel only. Written here after it
  (``fake_quantize_tensor_cachemask_kernel``): the reciprocal of the scale is taken in float32
  (``1.0f / scale``), the product rounded half to even (``nearbyint``), the zero point added in
  float32; the result is ``(clamp(q) - zero_point) * scale`` rounded to float32, and the mask
  ``qmin <= q <= qmax``.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import torch

aten = torch.ops.aten


def _quantized_decomposed_ops() -> dict[Any, Any]:
    """``quantized_decomposed`` overload -> its Python kernel (empty if PyTorch lacks them)."""
    try:
        from torch.ao.quantization.fx import _decomposed as qd
    except ImportError:  # pragma: no cover - every supported PyTorch has it
        return {}
    ns = torch.ops.quantized_decomposed
    return {
        ns.quantize_per_tensor.default: qd.quantize_per_tensor,
        ns.quantize_per_tensor.tensor: qd.quantize_per_tensor_tensor,
        ns.dequantize_per_tensor.default: qd.dequantize_per_tensor,
        ns.dequantize_per_tensor.tensor: qd.dequantize_per_tensor_tensor,
        ns.quantize_per_channel.default: qd.quantize_per_channel,
        ns.dequantize_per_channel.default: qd.dequantize_per_channel,
    }


#: The ``quantized_decomposed`` ops decomposed into their own kernels.
QUANTIZED_DECOMPOSED = _quantized_decomposed_ops()


def _float32(value: float) -> float:
    """``value`` rounded to float32, as C++ does when a ``double`` scale meets a ``float``
    (in Python: a tensor made here would be a constant of the traced graph)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # rounds past float32's largest value
        return math.copysign(math.inf, value)


def fake_quantize_per_tensor_affine_cachemask(
    x: torch.Tensor, scale: float, zero_point: int, quant_min: int, quant_max: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The CPU kernel's arithmetic: float32 for float32 and the half types (C++ promotes
    ``half * float`` to float), float64 for a float64 input's product; every result is rounded
    to float32 first (measured: a float64 ``5 * 0.3f`` is 1.5, not 1.5000000596)."""
    scale32 = _float32(scale)
    # The division rounded once is exactly C++'s 1.0f / scale (a zero scale: its signed infinity).
    inv_scale = _float32(1.0 / scale32) if scale32 else math.copysign(math.inf, scale32)
    wide = x if x.dtype == torch.float64 else x.to(torch.float32)
    q = torch.round(wide * inv_scale) + float(zero_point)
    mask = (q >= quant_min) & (q <= quant_max)
    out = (torch.clamp(q, quant_min, quant_max) - float(zero_point)) * scale32
    return out.to(torch.float32).to(x.dtype), mask
