"""``nextafter`` as integer steps on the operands' bits.

torch-mlir has no lowering of ``aten.nextafter`` and PyTorch's is a prim, so every graph holding
one ran it eagerly and was cut in two (the OpInfo sweep). The next representable number after
``x`` toward ``y`` is ``x``'s bit pattern, read as a sign-magnitude integer, one step up or down;
this is C's ``nextafter``, which eager's kernel calls, written on integers:

- a NaN operand gives NaN; ``x == y`` gives ``y`` (so ``nextafter(0.0, -0.0)`` is ``-0.0``);
- a zero ``x`` gives the smallest subnormal with ``y``'s sign;
- otherwise the magnitude grows when ``x`` moves away from zero and shrinks toward it.

Every comparison is made on integers (the bits mapped to a monotonic key), never on floats: a
device that flushes subnormals (lavapipe, CPUs with DAZ) would compare the smallest subnormal
equal to 0 and step from the wrong place. The result's bits are never touched by float
arithmetic, so a subnormal result survives. float16 steps on 16-bit integers, as eager.
"""

from __future__ import annotations

import torch

__all__ = ["nextafter"]

#: The integer of a floating dtype's width, the bit pattern of its +inf, and the width. Not
#: bfloat16: the reference backend computes it in float32 and cannot reinterpret its bits, so it
#: runs eagerly (decompositions.py, ``_ONLY_WHEN``).
BITS = {
    torch.float64: (torch.int64, 0x7FF0000000000000, 64),
    torch.float32: (torch.int32, 0x7F800000, 32),
    torch.float16: (torch.int16, 0x7C00, 16),
}


def nextafter(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.result_type(x, y)
    x, y = torch.broadcast_tensors(x.to(out), y.to(out))
    itype, inf_bits, width = BITS[out]
    bx, by = x.view(itype), y.view(itype)
    magnitude = (1 << (width - 1)) - 1
    ax, ay = bx & magnitude, by & magnitude
    kx, ky = torch.where(bx < 0, -ax, ax), torch.where(by < 0, -ay, ay)  # ordered as the numbers
    away = (ky > kx) == (bx >= 0)  # the magnitude grows
    stepped = bx + torch.where(away, 1, -1).to(itype)
    tiny = (by & ~magnitude) + 1  # y's sign and the smallest subnormal (the low bits are 0)
    bits = torch.where(ax == 0, tiny, stepped)
    bits = torch.where(kx == ky, by, bits)
    nan = (ax > inf_bits) | (ay > inf_bits)
    return torch.where(nan, x + y, bits.view(out))
