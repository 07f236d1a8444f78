"""Ops whose CPU kernel is a sequence of ATen ops, recorded as that sequence in half precision.

A float16 or bfloat16 tensor op rounds its result to its dtype. Where PyTorch's CPU
implementation of an op is a composite of other ops, every step rounds, and a
lowering that computes the op as one float32 expression rounded once is a few ulps
away. ``logsumexp`` (``logsumexp_out_impl`` in ATen's ReduceOps.cpp) is ``amax``,
``sub``, ``exp``, ``sum``, ``log``, ``add``: for three bf16 values of -1.5 it is
``bf16(log(3)) - 1.5`` = -0.3984375 in eager, -0.40234375 rounded once (fuzz seed 10
program 4 under a bf16 default dtype); an integer input, converted to a bf16 default
dtype first, was 3 ulps off. Recorded as those steps, each is rounded as eager rounds
it on every backend (the lowering's half-precision rules apply per op).

float32 and float64 inputs are recorded as the one op: there the difference is
float32's ulps, which every backend has anyway, and one fused op compiles smaller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

_HALF = (torch.float16, torch.bfloat16)


def _logsumexp(args: tuple, kwargs: dict) -> Any:
    """``logsumexp`` as ``logsumexp_out_impl`` computes it, or NotImplemented (record the op)."""
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    dtype = x.dtype
    if not dtype.is_floating_point and not dtype.is_complex:
        dtype = torch.get_default_dtype()  # the kernel converts integers and bools to it first
    if dtype not in _HALF or x.numel() == 0:
        return NotImplemented
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not dims:
        return NotImplemented
    if x.dtype != dtype:
        x = x.to(dtype)
    maxes = torch.amax(x, dims, True)
    maxes = maxes.masked_fill(maxes.abs() == torch.inf, 0)  # the kernel fills the squeezed view
    out = torch.sum(torch.exp(x - maxes), dims, keepdim).log()
    return out + (maxes if keepdim else maxes.squeeze(dims))


#: op -> fn(args, kwargs): its result, or NotImplemented where the op is recorded as usual.
STEPS: dict[Any, Callable[[tuple, dict], Any]] = {
    aten.logsumexp.default: _logsumexp,
}
