"""``F.embedding_bag`` and ``nn.EmbeddingBag``, forward and backward, as gathers and scatter-adds.

torch-mlir 20261001 has no lowering for ``aten._embedding_bag`` (nor its
backwards): every graph holding one failed to compile on every backend and ran
op by op (tools/nn_sweep.py, ``embedding_bag_*``). Bags are written here with
ops every backend compiles:

* each index's bag is the number of bag starts at or before its position,
  minus one (a comparison of positions with ``offsets``, summed); an index
  before the first offset or equal to ``padding_idx`` belongs to no bag. The
  extra offset of ``include_last_offset`` should be the number of indices;
  where it is not, the CPU kernel's slow path (``max``, float64,
  ``padding_idx``) ends the last bag at the last index anyway, and its fast
  path adds rows up to the extra offset but counts a ``mean``'s divisor up to
  the last index: both are followed;
* ``sum`` and ``mean`` add the (weighted) rows into their bag with a
  scatter-add, as the CPU kernel adds them, one index after the other; ``mean``
  divides by the bag's size, an empty bag is 0;
* ``max`` takes, per bag and column, the largest row with the CPU kernel's
  rule: the first row of the bag starts the maximum and a later one replaces
  it only when strictly greater, so a NaN counts only as the bag's first row
  and ties keep the earliest index. It broadcasts rows over bags
  (``[bags, indices, dim]``); an empty bag is 0 with index 0.

The second to fourth results (``offset2bag``, ``bag_size``,
``max_indices``) take the shapes of PyTorch's meta kernel, which the tracer
gives the node: ``offset2bag`` is every index's bag, ``bag_size`` the size
of each bag (one per offset), ``max_indices`` is empty except in ``max``
mode; the tracer then reshapes them as the CPU kernel returns them
(lazy_core/cpu_results.py). The backwards recompute the bags from
``offsets`` rather than trust them: the CPU kernel leaves ``offset2bag``
empty in ``sum`` mode.
"""

from __future__ import annotations

import torch

from lazy_core.cpu_results import FAST_PATH_DTYPES, MAX, MEAN, SUM

_SUM, _MEAN, _MAX = SUM, MEAN, MAX


def _bags(indices: torch.Tensor, offsets: torch.Tensor, bags: int,
          padding_idx: int, end: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Each index's bag by position (``offset2bag``), and whether it counts in it (not before the
    first offset, not at or past ``end`` when given, not ``padding_idx``)."""
    positions = torch.arange(indices.shape[0], device=indices.device)
    bag = (offsets[:bags][None, :] <= positions[:, None]).sum(1) - 1
    kept = bag >= 0
    if end is not None:
        kept = kept & (positions < end)
    if padding_idx >= 0:
        kept = kept & (indices != padding_idx)
    return bag, kept


def _counted(bag: torch.Tensor, kept: torch.Tensor, bags: int) -> torch.Tensor:
    """Each index's bag, ``bags`` (one past the last) where it does not count."""
    return torch.where(kept, bag, bags)


def _bag_count(offsets: torch.Tensor, include_last_offset: bool) -> int:
    return offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]


def _sizes(bag: torch.Tensor, bags: int) -> torch.Tensor:
    """How many indices each bag holds (``bags`` entries)."""
    return torch.zeros(bags + 1, dtype=torch.int64, device=bag.device).scatter_add(
        0, bag, torch.ones_like(bag))[:bags]


def embedding_bag(weight: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                  scale_grad_by_freq: bool = False, mode: int = _SUM, sparse: bool = False,
                  per_sample_weights: torch.Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int = -1) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``aten._embedding_bag`` (and ``_embedding_bag_forward_only``) for 1-d ``indices``."""
    bags = _bag_count(offsets, include_last_offset)
    offset2bag, kept = _bags(indices, offsets, bags, padding_idx)
    bag = _counted(offset2bag, kept, bags)
    size = _sizes(bag, bags)
    if include_last_offset and mode != _MAX and weight.dtype in FAST_PATH_DTYPES and padding_idx < 0:
        # The CPU kernel's fast path adds the last bag's rows up to the extra
        # offset, and still divides a mean by the count up to the last index.
        _, cut = _bags(indices, offsets, bags, padding_idx, end=offsets[bags])
        bag = _counted(offset2bag, cut, bags)
    rows = weight.index_select(0, indices)  # [N, D]
    dim = weight.shape[1]
    bag_size = torch.cat([size, size.new_zeros(offsets.shape[0] - bags)])
    if mode == _MAX:
        out, max_indices = _bag_max(rows, indices, bag, bags)
        return out, offset2bag, bag_size, max_indices
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.to(rows.dtype)[:, None]
    index = bag[:, None].expand(rows.shape[0], dim)
    out = torch.zeros(bags + 1, dim, dtype=rows.dtype, device=rows.device).scatter_add(0, index, rows)[:bags]
    if mode == _MEAN:
        out = out / size.clamp(min=1)[:, None].to(out.dtype)
    return out, offset2bag, bag_size, indices.new_zeros(0)


def _bag_max(rows: torch.Tensor, indices: torch.Tensor, bag: torch.Tensor, bags: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per bag and column, the CPU kernel's maximum and the index of the row it came from."""
    positions = torch.arange(rows.shape[0], device=rows.device)
    member = bag[None, :] == torch.arange(bags, device=rows.device)[:, None]  # [B, N]
    first = torch.where(member, positions[None, :], rows.shape[0]).amin(1)  # [B]: the bag's first row
    is_first = member & (positions[None, :] == first[:, None])
    # A NaN never beats the running maximum; only as a bag's first row is it kept.
    candidates = torch.where(torch.isnan(rows)[None] & ~is_first[:, :, None], float("-inf"), rows[None])
    candidates = torch.where(member[:, :, None], candidates, float("-inf"))  # [B, N, D]
    best = candidates.amax(1)  # NaN where the first row is NaN
    nan_best = torch.isnan(best)
    hit = member[:, :, None] & ((candidates == best[:, None, :]) | (nan_best[:, None, :] & is_first[:, :, None]))
    at = torch.where(hit, positions[None, :, None], rows.shape[0]).amin(1)  # [B, D], the earliest
    empty = ~member.any(1)[:, None]
    safe = at.clamp(max=rows.shape[0] - 1)
    max_indices = torch.where(empty, 0, indices[safe])
    return torch.where(empty, 0.0, best).to(rows.dtype), max_indices


def _sum_end(offsets: torch.Tensor, bags: int, mode: int, dtype: torch.dtype,
             padding_idx: int) -> torch.Tensor | None:
    """Where the forward's last ``sum`` bag ended: the extra offset of ``include_last_offset``
    (``offsets`` one longer than the bags) on the CPU kernel's fast path, as ``embedding_bag``
    adds rows; None elsewhere (the slow path ends the last bag at the last index). Rows past it
    took no part in the bags, so their gradient is 0. The CPU backward reads a bag past the
    gradient's last row for them (uninitialized memory: values up to 1e31 that change from run
    to run); lazy gave them the last bag's gradient."""
    if mode != _SUM or offsets.shape[0] <= bags or dtype not in FAST_PATH_DTYPES or padding_idx >= 0:
        return None
    return offsets[bags]


def embedding_bag_backward(grad: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor,
                           offset2bag: torch.Tensor, bag_size: torch.Tensor, maximum_indices: torch.Tensor,
                           num_weights: int, scale_grad_by_freq: bool, mode: int, sparse: bool,
                           per_sample_weights: torch.Tensor | None, padding_idx: int = -1) -> torch.Tensor:
    """``aten._embedding_bag_backward``, dense and not scaled by frequency (decompositions.py keeps
    those forms whole): the weight's gradient ``[num_weights, D]``."""
    bags, dim = grad.shape
    offset2bag, kept = _bags(indices, offsets, bags, padding_idx,
                             end=_sum_end(offsets, bags, mode, grad.dtype, padding_idx))
    bag = _counted(offset2bag, kept, bags)
    weight_grad = torch.zeros(num_weights, dim, dtype=grad.dtype, device=grad.device)
    if mode == _MAX:
        empty = _sizes(bag, bags) == 0
        return weight_grad.scatter_add(0, maximum_indices, torch.where(empty[:, None], 0.0, grad).to(grad.dtype))
    padded = torch.cat([grad, grad.new_zeros(1, dim)])  # bag ``bags``: no bag, a zero gradient
    rows = padded.index_select(0, bag)  # [N, D]
    if mode == _MEAN:
        rows = rows / _sizes(bag, bags).clamp(min=1).index_select(0, bag.clamp(max=bags - 1))[:, None].to(rows.dtype)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.to(rows.dtype)[:, None]
    rows = torch.where(kept[:, None], rows, 0.0).to(rows.dtype)
    return weight_grad.scatter_add(0, indices[:, None].expand(indices.shape[0], dim), rows)


def per_sample_weights_backward(grad: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor,
                                offsets: torch.Tensor, offset2bag: torch.Tensor, mode: int,
                                padding_idx: int = -1) -> torch.Tensor:
    """``aten._embedding_bag_per_sample_weights_backward``: each index's row dotted with its
    bag's gradient (``sum`` mode only, as PyTorch allows weights there only)."""
    bags = grad.shape[0]
    offset2bag, kept = _bags(indices, offsets, bags, padding_idx,
                             end=_sum_end(offsets, bags, mode, grad.dtype, padding_idx))
    bag = _counted(offset2bag, kept, bags)
    padded = torch.cat([grad, grad.new_zeros(1, grad.shape[1])])
    dots = (padded.index_select(0, bag) * weight.index_select(0, indices).to(grad.dtype)).sum(1)
    return torch.where(kept, dots, 0.0).to(grad.dtype)
