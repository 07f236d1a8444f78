"""Float ops of half-precision inputs computed in float32 and rounded once, as eager does.

PyTorch's CPU kernels compute a float16 or bfloat16 elementwise op in float
(``at::opmath_type``) and round the result once; an integer input is first
converted to the default float dtype. The decompositions of
``hyperbolic.py``, ``elu.py`` and ``log10.py`` run their formulas the same way,
so that their intermediate values (``x*x``, ``expm1``) neither overflow nor
round in half precision.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from lazy_core.ir import Node, Output

__all__ = ["compute_dtype", "in_opmath", "real_input"]

_HALF = (torch.float16, torch.bfloat16)


def compute_dtype(x: torch.Tensor) -> tuple[torch.dtype, torch.dtype]:
    """(result dtype, dtype to compute in) of a float op of ``x``."""
    out = x.dtype if x.is_floating_point() else torch.get_default_dtype()
    return out, torch.float32 if out in _HALF else out


def in_opmath(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` on ``x`` cast to its compute dtype, the result rounded once to the result dtype."""

    @functools.wraps(fn)
    def run(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        out, compute = compute_dtype(x)
        return fn(x.to(compute), *args, **kwargs).to(out)

    return run


def real_input(node: Node) -> bool:
    """The op's input is not complex: the real formulas do not apply to a complex one,
    which keeps torch-mlir's lowering (``_ONLY_WHEN``)."""
    x = node.args[0]
    return isinstance(x, Output) and x.meta is not None and not x.meta.dtype.is_complex
