"""``log10`` as ``log(x) / ln 10``.

torch-mlir lowers ``aten.log10`` to ``math.log10``, which IREE's llvm-cpu
target does not expand (it has approximations of ``log``, ``log2`` and
``log1p``, not of ``log10``): the op becomes a call to libm's ``log10f``, and
IREE links its executables without a libm (``iree-lld: error: undefined
symbol: log10f``). Every graph holding a ``log10``, of any float dtype, failed
to compile and ran op by op on the CPU.

``log`` lowers on every backend, and dividing by ``ln 10`` (rounded to the
compute dtype) stays within 1.6 ulp of the exact value where eager's
``log10`` is within 0.5, what JAX does too (``jnp.log10``). Half precision is
computed in float32 and rounded once, as eager does.
"""

from __future__ import annotations

import math

import torch

from .opmath import in_opmath

__all__ = ["log10"]


@in_opmath
def log10(x: torch.Tensor) -> torch.Tensor:
    return torch.log(x) / math.log(10.0)
