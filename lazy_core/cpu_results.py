"""Auxiliary results made as PyTorch's CPU kernels make them, not as its meta kernels size them.

A lazy tensor's sizes come from meta kernels. For a few multi-result ops the
meta kernel and the CPU kernel disagree about results that only the op's
backward reads, and a program that returns or inspects them saw other shapes
and values than eager (torch-mlir's e2e suite compares every result):

* ``native_batch_norm`` in eval mode: the CPU kernel returns empty
  ``save_mean``/``save_invstd`` (``[0]``); the meta kernel sizes them ``[C]``.
* ``_embedding_bag`` / ``_embedding_bag_forward_only``: the CPU kernel's
  ``offset2bag`` is empty in ``sum`` mode on its fast path (float32, float16
  or bfloat16 weights with unit column stride, no ``padding_idx``);
  ``bag_size`` has one entry per bag (``include_last_offset`` drops one) and
  is all zeros in ``sum`` mode; ``max_indices`` is zeros in ``sum`` mode and
  ``bag_size`` in ``mean`` mode. The meta kernel sizes ``offset2bag`` by the
  indices, ``bag_size`` by the offsets and ``max_indices`` empty.

The op is recorded as usual and its extra results are replaced by lazy
values of the CPU's sizes (made with ordinary ops, so they join the graph).
The backwards take either form: PyTorch's CPU backward recomputes an empty
``offset2bag``, and lowering/embedding_bag.py always recomputes the bags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

#: ``embedding_bag`` modes, and the weight dtypes of the CPU kernel's fast path (no ``padding_idx``),
#: shared with lowering/embedding_bag.py.
SUM, MEAN, MAX = 0, 1, 2
FAST_PATH_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _arg(args: tuple, kwargs: dict, index: int, name: str, default: Any) -> Any:
    return args[index] if index < len(args) else kwargs.get(name, default)


def _batch_norm(args: tuple, kwargs: dict, out: Any) -> Any:
    if _arg(args, kwargs, 5, "training", False):
        return out
    x = args[0]
    return out[0], x.new_empty((0,), dtype=out[1].dtype), x.new_empty((0,), dtype=out[2].dtype)


def _embedding_bag(args: tuple, kwargs: dict, out: Any) -> Any:
    weight, indices, offsets = args[0], args[1], args[2]
    mode = _arg(args, kwargs, 4, "mode", SUM)
    per_sample_weights = _arg(args, kwargs, 6, "per_sample_weights", None)
    include_last_offset = _arg(args, kwargs, 7, "include_last_offset", False)
    padding_idx = _arg(args, kwargs, 8, "padding_idx", -1)
    if padding_idx is None:
        padding_idx = -1
    result, offset2bag, bag_size, max_indices = out
    bags = offsets.shape[0] - (1 if include_last_offset else 0)
    if mode == MAX:
        return result, offset2bag, bag_size[:bags], max_indices
    if mode == MEAN:
        sizes = bag_size[:bags]
        return result, offset2bag, sizes, sizes.clone()
    fast = (weight.dtype in FAST_PATH_DTYPES and weight.stride(1) == 1 and padding_idx < 0
            and (per_sample_weights is None or per_sample_weights.stride(0) == 1))
    if fast:
        offset2bag = indices.new_empty((0,), dtype=offset2bag.dtype)
    zeros = offsets.new_zeros((bags,), dtype=bag_size.dtype)
    return result, offset2bag, zeros, zeros.clone()


#: op -> fix(args, kwargs, recorded results) -> results as the CPU kernel returns them.
FIXES: dict[Any, Callable[[tuple, dict, Any], Any]] = {
    aten.native_batch_norm.default: _batch_norm,
    aten._embedding_bag.default: _embedding_bag,
    aten._embedding_bag_forward_only.default: _embedding_bag,
}
