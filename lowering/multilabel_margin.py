"""``multilabel_margin_loss_forward`` as masks over each sample's classes.

No torch-dialect op, so ``F.multilabel_margin_loss`` ran eagerly (the OpInfo sweep). Eager's
kernel, per sample of ``C`` classes: the targets are ``target``'s entries before its first
negative one; ``is_target[i]`` says whether class ``i`` is one of them; the loss is
``sum over targets j, non-targets i of max(0, 1 - (x[j] - x[i])) / C``, then the reduction
(``none``: per sample; ``mean`` over samples; ``sum``). Here the targets are those entries
whose running count of negatives is still 0, ``is_target`` a comparison of every entry with
every class, the sum a masked one over the ``C x C`` pairs. An entry outside ``[-1, C)`` raises
eager's error at the read (lazy_core/checks.py guards the op: all entries, as eager checks them);
it is then read as class 0. A 0-d input is one sample of one class, as eager's; an empty batch
runs eagerly (supported_ops.CALL_CONDITIONS: eager's mean of no samples is not a number it
defines).
"""

from __future__ import annotations

import torch

__all__ = ["applies_call", "multilabel_margin_loss_forward"]


def applies_call(args: tuple, kwargs: dict) -> bool:
    x = args[0] if args else kwargs.get("self")
    t = args[1] if len(args) > 1 else kwargs.get("target")
    return (isinstance(x, torch.Tensor) and isinstance(t, torch.Tensor) and x.dtype in (torch.float32, torch.float64)
            and t.dtype == torch.int64 and x.dim() <= 2 and x.numel() > 0 and tuple(x.shape) == tuple(t.shape))


def multilabel_margin_loss_forward(x: torch.Tensor, target: torch.Tensor, reduction: int
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    rows = x.reshape(-1, x.shape[-1] if x.dim() else 1)  # [N, C]
    t = target.reshape(rows.shape)
    c = rows.shape[-1]
    valid = torch.cumsum((t < 0).to(torch.int32), -1) == 0  # before the first negative entry
    safe = torch.where(valid, t, 0)
    classes = torch.arange(c, device=x.device)
    hits = (safe.unsqueeze(-1) == classes) & valid.unsqueeze(-1)  # [N, j, i]
    is_target = hits.any(-2)  # [N, C]
    x_target = torch.gather(rows, -1, safe)  # [N, j]
    margin = 1 - x_target.unsqueeze(-1) + rows.unsqueeze(-2)  # [N, j, i]
    counted = valid.unsqueeze(-1) & ~is_target.unsqueeze(-2) & (margin > 0)
    loss = torch.where(counted, margin, 0.0).sum((-2, -1)) / c  # [N]
    if reduction == 1:
        loss = loss.mean()
    elif reduction == 2:
        loss = loss.sum()
    elif x.dim() < 2:
        loss = loss.reshape(())
    return loss, is_target.to(x.dtype).reshape(target.shape)
