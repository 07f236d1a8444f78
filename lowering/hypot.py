"""``hypot`` scaled by the larger operand, so that it overflows only where the result does.

torch-mlir has no lowering of ``aten.hypot``: every graph holding one ran it eagerly and was cut
in two. PyTorch's decomposition, ``sqrt(a*a + b*b)``, squares first: ``hypot(1e30, 1)`` is inf
there in float32 and 1e30 in eager (``std::hypot``, or SLEEF's vectorized ``hypotf``). This is
the textbook scaling, ``m * sqrt(1 + (n/m)**2)`` with ``m = max(|a|, |b|)``, ``n = min``, which
stays within 2 ulp of eager. Eager's special cases are kept: an infinite operand gives inf even
beside a NaN, two zeros give +0.0. Half precision runs in float32 and is rounded once, as eager's
kernel does.
"""

from __future__ import annotations

import torch

__all__ = ["hypot"]


def hypot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    out = elementwise_dtypes(a, b, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)[1]
    compute = torch.float32 if out in (torch.float16, torch.bfloat16) else out
    a, b = a.to(compute).abs(), b.to(compute).abs()
    big, small = torch.where(a >= b, a, b), torch.where(a >= b, b, a)
    ratio = small / big
    r = big * torch.sqrt(1.0 + ratio * ratio)
    r = r.masked_fill(big == 0, 0.0)  # 0/0 above; hypot(-0, -0) is +0
    r = torch.where(torch.isnan(a) | torch.isnan(b), a + b, r)  # NaN, unless an operand is infinite
    r = r.masked_fill(torch.isinf(a) | torch.isinf(b), float("inf"))
    return r.to(out)
