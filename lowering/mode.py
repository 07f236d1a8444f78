"""``torch.mode`` as comparisons of every pair of a row's elements.

``aten.mode`` has no torch-dialect op, so every call ran eagerly (the OpInfo ``mode``). Eager's
CPU kernel sorts each row (``std::sort`` on the values) and walks the runs of equal values,
keeping the first run longer than every earlier one: the most frequent value, the smallest of
those on a tie, and the index of the last element of its run. Here, per row of ``n`` elements:
``count[i]`` is the number of elements equal to element ``i``; the value is the smallest whose
count is the largest; its index the largest index holding it, which is where a stable sort puts
the end of the run (``std::sort`` is an insertion sort, stable, below 17 elements; for longer
rows the order of equal values, and so which of their indices eager returns, and which of
``0.0``/``-0.0``, is the sort's and not specified; here always the last).

Also unspecified by eager: rows holding NaN (``std::sort`` with NaN has no defined order: eager
gave the value 2 for ``[2, nan, 2, nan, nan]``). Here NaNs count as equal to each other and
above every number, like ``torch.sort``. The ``n x n`` comparisons bound ``n`` by
``MAX_ROW``; longer rows run eagerly (supported_ops.CALL_CONDITIONS).
"""

from __future__ import annotations

import torch

__all__ = ["MAX_ROW", "applies_call", "mode"]

#: The longest row compared pairwise (``n ** 2`` booleans per row).
MAX_ROW = 256

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.int16, torch.int32,
           torch.int64, torch.uint8)


def applies_call(args: tuple, kwargs: dict) -> bool:
    x = args[0] if args else kwargs.get("self")
    dim = kwargs.get("dim", args[1] if len(args) > 1 else -1)
    if not isinstance(x, torch.Tensor) or x.dtype not in _DTYPES or x.numel() == 0:
        return False
    if x.dim() == 0:
        return dim in (0, -1)
    if not -x.dim() <= dim < x.dim():
        return False
    return 1 <= x.shape[dim] <= MAX_ROW


def mode(x: torch.Tensor, dim: int = -1, keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    y = x.movedim(dim, -1)  # [..., n]
    n = y.shape[-1]
    a, b = y.unsqueeze(-1), y.unsqueeze(-2)  # a: element i, b: element j
    equal = a == b
    less = b < a  # [..., i, j]: y_j < y_i
    if x.is_floating_point():
        nan_a, nan_b = torch.isnan(a), torch.isnan(b)
        equal = equal | (nan_a & nan_b)
        less = less | (nan_a & ~nan_b)
    count = equal.to(torch.int32).sum(-1)  # [..., n]
    candidate = count == count.amax(-1, keepdim=True)
    # Element i is the mode's value if no candidate j is smaller.
    beaten = (less & candidate.unsqueeze(-2)).any(-1)
    chosen = candidate & ~beaten
    positions = torch.arange(n, device=x.device)
    index = torch.where(chosen, positions, -1).amax(-1, keepdim=True)  # the last of the run
    values = torch.gather(y, -1, index)
    if not keepdim:
        return values.squeeze(-1), index.squeeze(-1)
    return values.movedim(-1, dim), index.movedim(-1, dim)
