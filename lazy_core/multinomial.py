"""``torch.multinomial`` recorded in the graph, drawing eager's samples.

The CPU kernel samples without replacement, and one sample with replacement,
by an exponential race (PyTorch's ``Distributions.cpp``, after the Gumbel-max
trick): ``q = empty_like(p).exponential_(1)``, then ``argmax(p / q)`` for one
sample (``topk(p / q, n)`` for more, see ``recordable``). The exponential draws come from the CPU
generator as every random op's here (``fallback.run_random``), so recording
that form picks exactly eager's samples, and HF ``generate(do_sample=True)``
no longer breaks its graph (and runs a CPU op) at every token.

Eager's data checks (an entry that is NaN, infinite or negative; a row that
sums to 0) become device-side checks (``checks.py``) that raise PyTorch's
errors at the next read; its argument checks run at the call, on a CPU tensor
of ones of the same shape, once per shape. More than one sample still runs
eagerly.
"""

from __future__ import annotations

from typing import Any

import torch

from . import checks

_INVALID = "probability tensor contains either `inf`, `nan` or element < 0"
_ZERO_SUM = "invalid multinomial distribution (sum of probabilities <= 0)"

#: (shape, dtype, num_samples, replacement) whose argument checks passed on the CPU.
_checked: set[tuple] = set()


def _bound(args: tuple, kwargs: dict) -> tuple[Any, int, bool, Any]:
    names = ("self", "num_samples", "replacement")
    b = dict(zip(names, args))
    b.update(kwargs)
    return b["self"], int(b["num_samples"]), bool(b.get("replacement", False)), b.get("generator")


def recordable(args: tuple, kwargs: dict) -> bool:
    """Whether this call is recorded: one sample (else it runs eagerly).

    More samples without replacement are ``topk(p / q, n)`` on the CPU, which takes
    categories of probability 0 (ties at 0) in its own order once fewer than ``n`` are
    positive: ``[0, 5, 3]`` where the recorded ``topk`` gave ``[0, 1, 2]``.
    """
    _, n, _, _ = _bound(args, kwargs)
    return n == 1


def multinomial(args: tuple, kwargs: dict) -> torch.Tensor:
    """The samples of ``aten.multinomial(self, num_samples, replacement, generator=)``, recorded."""
    p, n, replacement, generator = _bound(args, kwargs)
    key = (tuple(p.shape), p.dtype, n, replacement)
    if key not in _checked:
        # PyTorch's own errors for what needs no data: rank, dtype, n <= 0, n > categories.
        torch.multinomial(torch.ones(p.shape, dtype=p.dtype), n, replacement,
                          generator=torch.Generator().manual_seed(0))
        _checked.add(key)
    if checks.enabled():
        # Explicit ops: inside dispatch, ``&`` is ``aten.__and__``, which torch-mlir does not lower.
        valid = torch.logical_and(p.max() < float("inf"), p.min() >= 0)
        checks.check_data(torch.logical_not(valid), RuntimeError, _INVALID, "aten.multinomial")
        sums = p.sum(-1) == 0
        checks.check_data(sums.any() if p.dim() == 2 else sums, RuntimeError, _ZERO_SUM, "aten.multinomial")
    q = torch.empty_like(p).exponential_(1, generator=generator)
    return (p / q).argmax(-1, keepdim=True)  # ties only among zeros: the first, as eager
