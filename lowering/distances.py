"""``torch.cdist``'s and ``F.pdist``'s direct kernels and cdist's gradient, as broadcast differences.

``torch.cdist`` takes eager's matrix-product path for ``p = 2`` with more than 25 rows (it is
traced as the product's own ops) and otherwise calls ``aten._cdist_forward``, which torch-mlir
has no op for: every graph holding one ran it eagerly and was cut in two (the OpInfo sweep).
Here it is eager's direct kernel: per pair of rows, the sum of ``|x1 - x2| ** p`` rooted
(``p = 0``: the count of differing coordinates, NaN with a NaN; ``p = inf``: the largest
difference, where eager's running maximum from 0 skips NaN). Memory is
``rows1 * rows2 * columns`` values, where eager loops.

``_cdist_backward`` is eager's formula for the gradient with respect to ``x1`` (autograd swaps
the arguments for ``x2``): ``grad * diff / dist`` for ``p = 2``, ``sign(diff)`` for ``p = 1``,
the differences equal to the maximum for ``p = inf``, ``sign(diff) |diff| ** (p - 1) /
dist ** (p - 1)`` otherwise, and zeros for ``p = 0`` and wherever the distance is 0 (the
gradient of a root at 0 would be NaN).
"""

from __future__ import annotations

import math

import torch

__all__ = ["PDIST_MAX_ROWS", "cdist_backward", "cdist_forward", "pdist_applies", "pdist_forward"]

#: ``pdist`` is written as one slice per row (the pairs of row ``i`` with the rows after it): the
#: graph grows with the rows, so more of them keep eager's kernel (supported_ops.CALL_CONDITIONS).
PDIST_MAX_ROWS = 256


def _differences(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    return x1.unsqueeze(-2) - x2.unsqueeze(-3)  # [..., r1, r2, m]


def cdist_forward(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: int | None = None) -> torch.Tensor:
    diff = _differences(x1, x2).abs()
    if p == 0:  # eager's min(ceil(|diff|), 1): a NaN counts as NaN
        return torch.where(torch.isnan(diff), diff, (diff != 0).to(diff.dtype)).sum(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    if math.isinf(p):  # eager's running max from 0 skips a NaN difference
        return diff.masked_fill(torch.isnan(diff), 0.0).amax(-1) if diff.shape[-1] else diff.sum(-1)
    return diff.pow(p).sum(-1).pow(1.0 / p)


def pdist_forward(x: torch.Tensor, p: float = 2) -> torch.Tensor:
    """``_pdist_forward`` (``F.pdist``): the distances of the pairs ``i < j`` of rows, in eager's
    order (``i`` major), with ``cdist``'s per-pair formulas above (eager's pdist and cdist kernels
    share them), but for ``p = inf``, where a NaN coordinate makes the distance NaN. An [N, M] input with N < 2 has no pair: an empty result."""
    n = x.shape[0]
    if n < 2:
        return x.new_zeros((0,))
    if math.isinf(p) and x.shape[1]:
        # Unlike cdist's, pdist's running maximum is vectorized: IEEE ``maximum``, a NaN wins.
        diff = _differences(x, x).abs()
        nan = torch.isnan(diff).any(-1)
        full = torch.where(nan, torch.nan, diff.masked_fill(torch.isnan(diff), 0.0).amax(-1))
    else:
        full = cdist_forward(x, x, p)  # [n, n]
    return torch.cat([full[i, i + 1:] for i in range(n - 1)])


def pdist_applies(args: tuple, kwargs: dict) -> bool:
    """A floating [N, M] input with at most ``PDIST_MAX_ROWS`` rows (what else eager gets)."""
    x = args[0] if args else kwargs.get("self")
    return (isinstance(x, torch.Tensor) and x.dim() == 2 and x.dtype in (torch.float32, torch.float64)
            and x.shape[0] <= PDIST_MAX_ROWS)


def cdist_backward(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float, dist: torch.Tensor) -> torch.Tensor:
    if p == 0 or x1.numel() == 0 or x2.numel() == 0:
        return torch.zeros_like(x1)
    diff = _differences(x1, x2)
    g, d = grad.unsqueeze(-1), dist.unsqueeze(-1)
    if p == 1:
        pair = diff.sign() * g
    elif p == 2:
        pair = torch.where(d == 0, torch.zeros_like(diff), diff * g / d)
    elif math.isinf(p):
        pair = diff.sign() * (diff.abs() == d) * g
    elif p < 2:
        pair = torch.where(d == 0, torch.zeros_like(diff), diff.sign() * diff.abs().pow(p - 1) * g / d.pow(p - 1))
    else:
        pair = torch.where(d == 0, torch.zeros_like(diff), diff * diff.abs().pow(p - 2) * g / d.pow(p - 1))
    return pair.sum(-2)
