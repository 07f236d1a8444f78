"""``torch._grouped_mm`` (the MoE experts' matmul) as dense matmuls and a selection.

No torch-dialect op, so every call ran eagerly, cutting the graph three times per MoE layer in
each direction: transformers' default experts path (``integrations/moe.py``, "grouped_mm") and
torchtitan-style MoE code call it. The groups are data (``offs``, int32 end offsets), so the
result's shape is known when tracing but each row's group is not.

Eager's CPU kernel (``_grouped_mm_fallback``) loops over the groups; group ``g`` spans
``at::slice(start, end)`` with ``start`` the previous group's end (0 first) and ``end = offs[g]``:
a negative bound counts from the end, then both are clamped to the axis and an ``end`` before
``start`` leaves the group empty. Here every group's span becomes a mask over the axis, and:

* 2d x 3d (``(S, K) @ (G, K, N)``, the experts' forward): every row times every group's matrix,
  ``(G, S, N)``, then each row takes the product of the last group covering it (a later group's
  write wins in eager's loop). Rows no group covers are left uninitialized by eager; zeros here.
  G times eager's arithmetic, but matmuls, and never ``0 * inf`` from another group's weights.
* 3d x 2d (``(G, M, K) @ (K, N)`` grouped along N): the same along the columns.
* 2d x 2d (``(M, S) @ (S, N)`` grouped along S, the weight gradient): ``(G, M, N)``, each group
  the product of both operands with the other groups' entries set to zero (not multiplied: an
  inf elsewhere stays out). An empty group is zeros, as eager's ``mm_out`` over K = 0.
* 3d x 3d without ``offs``: ``bmm``.

Sums of products in another order than eager's per-group ``mm`` may round differently (as any
two matmul kernels). The call conditions (``applies_call``) bound the dense intermediate by
``MAX_DENSE`` elements; larger calls run eagerly, as do a ``bias`` or an ``out_dtype`` other
than the input's (eager raises for both).
"""

from __future__ import annotations

import math

import torch

__all__ = ["MAX_DENSE", "applies_call", "grouped_mm"]

#: The most elements of the dense ``(G, rows, cols)`` product computed for one call.
MAX_DENSE = 1 << 26

_FLOATS = (torch.float32, torch.bfloat16, torch.float16)


def _arg(args: tuple, kwargs: dict, i: int, name: str) -> object:
    return kwargs.get(name, args[i] if len(args) > i else None)


def applies_call(args: tuple, kwargs: dict) -> bool:
    a, b, offs = _arg(args, kwargs, 0, "self"), _arg(args, kwargs, 1, "mat2"), _arg(args, kwargs, 2, "offs")
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dtype not in _FLOATS or b.dtype != a.dtype:
        return False
    if _arg(args, kwargs, 3, "bias") is not None or _arg(args, kwargs, 4, "out_dtype") not in (None, a.dtype):
        return False
    if (a.dim(), b.dim()) == (3, 3):
        return offs is None
    if not isinstance(offs, torch.Tensor) or offs.dim() != 1 or offs.dtype != torch.int32 or offs.numel() == 0:
        return False
    if (a.dim(), b.dim()) == (2, 3):
        dense = (b.shape[0], a.shape[0], b.shape[2])
    elif (a.dim(), b.dim()) == (3, 2):
        dense = (a.shape[0], a.shape[1], b.shape[1])
    elif (a.dim(), b.dim()) == (2, 2) and a.shape[1] == b.shape[0]:
        dense = (offs.shape[0], a.shape[0], max(a.shape[1], b.shape[1]))
    else:
        return False
    return math.prod(dense) <= MAX_DENSE


def _positions(n: int, device: torch.device) -> torch.Tensor:
    """``0, 1, ..., n - 1``, not as ``arange``: IREE 3.13 merges an iota with a sort's index iota
    of the same length (MoE code sorts the rows by expert just before this), and the sort then
    writes its indices into the shared buffer in place (backends/iree/miscompiles.py refuses
    such a graph)."""
    return torch.ones(n, dtype=torch.int64, device=device).cumsum(0) - 1


def _covering_group(offs: torch.Tensor, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cover, last)``: ``cover[g, i]`` says group ``g``'s span holds index ``i`` of an axis of
    ``size``; ``last[i]`` is the last group holding ``i``, -1 for none."""
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])

    def bound(v: torch.Tensor) -> torch.Tensor:  # at::slice's: wrapped once, then clamped
        return torch.where(v < 0, v + size, v).clamp(0, size)

    start = bound(starts)
    end = torch.maximum(bound(ends), start)
    index = _positions(size, offs.device)
    cover = (index >= start.unsqueeze(1)) & (index < end.unsqueeze(1))
    groups = _positions(offs.shape[0], offs.device).unsqueeze(1)
    last = torch.where(cover, groups, -1).amax(0)
    return cover, last


def _pick(dense: torch.Tensor, last: torch.Tensor, dim: int) -> torch.Tensor:
    """``dense[last[i], ...]`` along ``dim`` (rows or columns of the result), zero where
    ``last`` is -1."""
    shape = [1] * (dense.dim() - 1)
    shape[dim] = -1
    where = last.reshape(shape)
    picked = dense.gather(0, where.clamp(min=0).unsqueeze(0).expand(1, *dense.shape[1:])).squeeze(0)
    return torch.where(where >= 0, picked, torch.zeros((), dtype=dense.dtype, device=dense.device))


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor | None = None, bias: object = None,
               out_dtype: object = None) -> torch.Tensor:
    if offs is None:
        return torch.bmm(a, b)
    zero = torch.zeros((), dtype=a.dtype, device=a.device)
    if a.dim() == 2 and b.dim() == 3:
        _, last = _covering_group(offs, a.shape[0])
        return _pick(torch.matmul(a.unsqueeze(0), b), last, 0)
    if a.dim() == 3 and b.dim() == 2:
        _, last = _covering_group(offs, b.shape[1])
        return _pick(torch.matmul(a, b), last, 1)
    cover, _ = _covering_group(offs, a.shape[1])
    left = torch.where(cover.unsqueeze(1), a.unsqueeze(0), zero)
    right = torch.where(cover.unsqueeze(2), b.unsqueeze(0), zero)
    return torch.bmm(left, right)
