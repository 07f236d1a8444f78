"""Shape functions for ATen ops that have a CPU kernel but no Meta one.

The tracer infers every result's shape and dtype by running the op on meta tensors
(``tensor._infer``); an op without a Meta kernel ran eagerly instead, cutting the graph,
even where the backend can lower it. For those ops the result metadata is built here,
after the CPU kernel has checked the arguments on an empty tensor of the same dtype:
those checks read arguments, not data, so a bad call raises PyTorch's own error at the
call, as eager does.
"""

from __future__ import annotations

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


#: op -> its shape function on meta tensors (same arguments as the op).
MISSING: dict[Any, Callable[..., Any]] = {
    aten.fake_quantize_per_tensor_affine_cachemask.default: _fake_quantize_cachemask,
}
