"""The backward of ``logsigmoid``, as PyTorch's CPU kernel computes it.

PyTorch's decomposition picks ``1``/``0`` and ``1``/``-1`` with
``torch.where(x < 0, 1, 0)``: 0-d integer literals that torch-mlir cannot
legalize to linalg (``failed to legalize operation 'torch.vtensor.literal'``),
so every training step through ``F.logsigmoid`` failed to compile on the
reference backend. The kernel's ``max_deriv - sign * z / (1 + z)`` is
``1 - q`` below zero and ``q`` elsewhere, ``q = z / (1 + z)``, with ``z``
the forward's buffer ``exp(-|x|)`` (recomputed where the buffer is empty,
as on CUDA). Half precision is computed in float32 and rounded once.
"""

from __future__ import annotations

import torch

from .opmath import compute_dtype

__all__ = ["log_sigmoid_backward"]


def log_sigmoid_backward(grad: torch.Tensor, x: torch.Tensor, buffer: torch.Tensor) -> torch.Tensor:
    out, compute = compute_dtype(grad)
    grad, x = grad.to(compute), x.to(compute)
    z = buffer.to(compute) if buffer.numel() else torch.exp(-x.abs())
    q = z / (z + 1)
    return (grad * torch.where(x < 0, 1 - q, q)).to(out)
