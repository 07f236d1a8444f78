"""``cummax``/``cummin`` as a log-step scan of (value, index) pairs.

torch-mlir has no op for either, so every graph holding one was cut around an eager call (the
OpInfo sweep). Eager's kernel walks the dim once and takes element ``i`` when it is NaN, or when
the running value is not NaN and ``x[i] >= running`` (``<=`` for cummin): the result at ``i``
is the maximum of the prefix under the order "NaN above every number, later index above earlier
on ties". A maximum under a total order is associative, so the prefix results come from
``ceil(log2 n)`` rounds of combining each position with the one ``2**k`` before it (the
Hillis-Steele scan), with only slices, comparisons and ``where``: exact, NaN and ties included.
The positions before the start combine with a value every element beats (-inf, or the integer
minimum; +inf and the maximum for cummin). ``cummaxmin_backward`` (their gradient) is the
scatter-add of the output gradient onto the chosen indices, as eager's kernel.
"""

from __future__ import annotations

import torch

__all__ = ["cummax", "cummaxmin_backward", "cummin"]


def _bound(dtype: torch.dtype, low: bool) -> float | int:
    if dtype.is_floating_point:
        return float("-inf") if low else float("inf")
    info = torch.iinfo(dtype)
    return info.min if low else info.max


def _scan(x: torch.Tensor, dim: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if x.dim() == 0:
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    values = x.to(torch.uint8) if x.dtype == torch.bool else x
    shape = [1] * x.dim()
    shape[dim] = n
    indices = torch.arange(n, device=x.device).view(shape).expand(x.shape)
    floating = values.is_floating_point()
    fill = _bound(values.dtype, low=largest)
    step = 1
    while step < n:
        head_v = torch.full_like(values.narrow(dim, 0, step), fill)
        prev_v = torch.cat([head_v, values.narrow(dim, 0, n - step)], dim)
        prev_i = torch.cat([torch.zeros_like(indices.narrow(dim, 0, step)), indices.narrow(dim, 0, n - step)], dim)
        beats = values >= prev_v if largest else values <= prev_v
        if floating:
            beats = torch.isnan(values) | (~torch.isnan(prev_v) & beats)
        values = torch.where(beats, values, prev_v)
        indices = torch.where(beats, indices, prev_i)
        step *= 2
    if x.dtype == torch.bool:
        values = values.to(torch.bool)
    return values, indices.contiguous()


def cummax(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _scan(x, dim, largest=True)


def cummin(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _scan(x, dim, largest=False)


def cummaxmin_backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, dim: int) -> torch.Tensor:
    if x.numel() == 0:
        return x.new_zeros(x.shape)
    if x.dim() == 0:
        return grad.clone()
    return torch.zeros_like(grad).scatter_add(dim % x.dim(), indices, grad)
