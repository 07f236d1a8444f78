"""``frexp`` read off the bits: the exponent field, and the fraction with the exponent of 1/2.

torch-mlir has no lowering of ``aten.frexp`` and PyTorch's decomposition is a prim, so a graph
holding one ran it eagerly and was cut in two (the OpInfo sweep). For a normal number the
exponent is the biased exponent field minus ``bias - 1`` and the mantissa is the number with
that field set to ``bias - 1`` (a magnitude in [0.5, 1), the sign kept). A subnormal's fraction
field, an integer below 2 ** mantissa_bits, converts exactly to a normal number of the same
dtype, whose frexp is the normal case, shifted by the subnormal scale. Zeros, infinities and NaN
are their own mantissa with exponent 0, as eager's ``std::frexp`` gives here.

Everything is integer arithmetic on the bits but the one conversion of the fraction, whose
result is normal: a device that flushes subnormals (iree-cpu, lavapipe) still gets them right.
The exponent field is a shift, not ``// 2 ** 52``: inside a decomposition an integer floor
division stays torch-mlir's, which divides in float64 and read the largest float64's bits as
the exponent field of infinity.
bfloat16 stays eager (the reference backend computes it in float32 and cannot read its bits),
as for ``nextafter``.
"""

from __future__ import annotations

import torch

__all__ = ["FORMATS", "frexp"]

#: The integer of a floating dtype's width, its fraction bits, and its exponent bias.
FORMATS = {
    torch.float64: (torch.int64, 52, 1023),
    torch.float32: (torch.int32, 23, 127),
    torch.float16: (torch.int16, 10, 15),
}


def frexp(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    itype, fraction_bits, bias = FORMATS[x.dtype]
    width = torch.iinfo(itype).bits
    magnitude = (1 << (width - 1)) - 1
    fraction = (1 << fraction_bits) - 1
    top = (1 << (width - 1 - fraction_bits)) - 1  # the exponent field of inf and NaN
    keep = ~magnitude + fraction  # the sign and the fraction bits (disjoint: their sum is their union)
    half = (bias - 1) << fraction_bits  # the exponent field of 0.5

    def field_of(bits: torch.Tensor) -> torch.Tensor:
        return (bits & magnitude) >> fraction_bits

    def normal(bits: torch.Tensor, field: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ((bits & keep) + half).view(x.dtype), (field - (bias - 1)).to(torch.int32)

    bits = x.view(itype)
    field = field_of(bits)
    mantissa, exponent = normal(bits, field)
    # A subnormal: its fraction as a number (exact), with x's sign, is normal.
    small = (bits & fraction).to(x.dtype).view(itype) + (bits & ~magnitude)
    small_mantissa, small_exponent = normal(small, field_of(small))
    subnormal = (field == 0) & ((bits & fraction) != 0)
    mantissa = torch.where(subnormal, small_mantissa, mantissa)
    exponent = torch.where(subnormal, small_exponent + (1 - bias - fraction_bits), exponent)
    special = ((field == 0) & ~subnormal) | (field == top)  # zeros, infinities, NaN
    return torch.where(special, x, mantissa), exponent.masked_fill(special, 0)
