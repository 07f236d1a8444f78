"""Average pooling as eager's CPU kernel computes it: a sum over each window, then a divide.

IREE 3.13 miscompiles torch-mlir's average pooling for many shapes: ``avg_pool2d`` of an
8 x 8 input with a 7 x 7 window gave 24 where eager gives 27, and a 3 x 4 input with a 2 x 2
window, a single window over a padded dim, or ``ceil_mode`` with a stride past the window
failed to compile ("inferred input/output operand #1 has shape's dimension #0 to be 3, but
found 2"), so the graph ran op by op. Here the pooling is ``kernel`` strided slices of the
zero-padded input added in the order eager's loop adds them (row-major within the window; a
zero sum made +0.0, as eager's from 0.0; float32 for half precision), divided by eager's
divisor: the window size clipped to the padded input (``count_include_pad``), or to the input,
or ``divisor_override``. Plain elementwise work, the same on every backend. A window of more
than ``MAX_WINDOW`` elements is summed one dim at a time (``k1 + k2`` slices, not ``k1 * k2``;
the sum's rounding then differs from eager's within float tolerance, integers stay exact):
IREE failed to compile 2 of 40 random 8..12-wide windows the same way. One whose extents add up
to more than ``MAX_SLICES`` keeps torch-mlir's lowering (IREE's fault may remain there).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch

from .pooling import per_dim

__all__ = ["avg_pool", "summable_window"]

#: The largest window (elements) summed slice by slice in eager's order.
MAX_WINDOW = 64
#: The most slices a window summed dim by dim may take; larger ones keep torch-mlir's lowering.
MAX_SLICES = 64


def _output_size(n: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """ATen's ``pooling_output_shape`` (dilation 1)."""
    out = (n + 2 * p - k + ((s - 1) if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1
    return out


def _divisor(n: int, k: int, s: int, p: int, out: int, include_pad: bool, device: Any) -> torch.Tensor:
    """Per output position of one dim: the cells its window counts."""
    start = torch.arange(out, device=device) * s - p
    end = torch.clamp(start + k, max=n + p)
    if include_pad:
        return end - start
    return torch.clamp(end, max=n) - torch.clamp(start, min=0)


def _tiled(sizes: list[int], k: list[int], s: list[int], p: list[int]) -> bool:
    """Windows that tile the input: no padding, stride = window, each size a multiple of it.
    Each window is then a block of a reshape, summed by one reduction."""
    return all(si == ki and pi == 0 and n % ki == 0 for n, ki, si, pi in zip(sizes, k, s, p, strict=True))


def summable_window(node: Any) -> bool:
    """Whether an ``avg_pool2d``/``avg_pool3d`` node's window is summed here: at most
    ``MAX_WINDOW`` elements, or extents adding up to at most ``MAX_SLICES`` (one strided slice
    each; a 10000-wide window would be 10000 of them), or windows that tile the input
    (``F.avg_pool1d(x, 10000)`` over 20000: torch-mlir's pooling failed to compile on iree-cpu
    for an AVX2 host, "operations with large vector sizes (16384 bytes)")."""
    dims = 3 if "3d" in str(node.op) else 2
    k = per_dim(node.args[1], dims)
    if math.prod(k) <= MAX_WINDOW or sum(k) <= MAX_SLICES:
        return True
    def arg(i: int, name: str) -> Any:
        return node.args[i] if len(node.args) > i else node.kwargs.get(name)

    s = per_dim(arg(2, "stride"), dims) if arg(2, "stride") else k
    p = per_dim(arg(3, "padding") or 0, dims)
    return _tiled(list(node.args[0].meta.shape[-dims:]), k, s, p)


def _window_sums(padded: torch.Tensor, k: list[int], s: list[int], out: list[int]) -> torch.Tensor:
    """Each window's sum: element by element in eager's (row-major) order for a window of up to
    ``MAX_WINDOW`` elements, else one dim at a time."""
    dims = len(k)
    lead = (slice(None),) * (padded.dim() - dims)
    if math.prod(k) <= MAX_WINDOW:
        total = None
        for offsets in itertools.product(*(range(kk) for kk in k)):
            window = padded[lead + tuple(slice(o, o + (out[i] - 1) * s[i] + 1, s[i]) for i, o in enumerate(offsets))]
            total = window if total is None else total + window
        return total
    total = padded
    for i in range(dims):
        axis = padded.dim() - dims + i
        summed = None
        for o in range(k[i]):
            window = total.narrow(axis, o, (out[i] - 1) * s[i] + 1)[(slice(None),) * axis + (slice(None, None, s[i]),)]
            summed = window if summed is None else summed + window
        total = summed
    return total


def avg_pool(op: Any) -> Any:
    """The decomposition of ``op`` (``avg_pool2d`` or ``avg_pool3d``)."""
    dims = 3 if "3d" in str(op) else 2

    def decomposed(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                   ceil_mode: bool = False, count_include_pad: bool = True,
                   divisor_override: Any = None) -> torch.Tensor:
        k = per_dim(kernel_size, dims)
        s = per_dim(stride, dims) if stride else k
        p = per_dim(padding, dims)
        sizes = list(x.shape[-dims:])
        out = [_output_size(n, k[i], s[i], p[i], ceil_mode) for i, n in enumerate(sizes)]
        work = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        # Zeros around, and past the end as far as a ceil_mode window reaches.
        pads: list[int] = []
        for i in reversed(range(dims)):
            reach = (out[i] - 1) * s[i] + k[i]
            pads += [p[i], max(p[i], reach - sizes[i] - p[i])]
        padded = torch.nn.functional.pad(work, pads) if any(pads) else work
        if _tiled(sizes, k, s, p):  # one block of a reshape per window, one reduction
            blocks = list(padded.shape[:-dims]) + [v for i in range(dims) for v in (out[i], k[i])]
            total = padded.reshape(blocks).sum([padded.dim() - dims + 2 * i + 1 for i in range(dims)])
        else:
            total = _window_sums(padded, k, s, out)
        # Eager's sum starts from 0.0, so a window of -0.0s sums to +0.0. A select, not ``0.0 + x``:
        # lavapipe's shader compiler drops an added constant zero (backends/iree/miscompiles.py).
        total = torch.where(total == 0, torch.zeros_like(total), total)
        if divisor_override:
            divisor = torch.full((), divisor_override, dtype=torch.int64, device=x.device)
        else:
            divisor = None
            for i in range(dims):
                d = _divisor(sizes[i], k[i], s[i], p[i], out[i], count_include_pad, x.device)
                d = d.view([-1] + [1] * (dims - 1 - i))
                divisor = d if divisor is None else divisor * d
        if not total.dtype.is_floating_point:  # integer pooling: C's truncating division, as eager
            return torch.div(total, divisor, rounding_mode="trunc").to(x.dtype)
        return (total / divisor.to(total.dtype)).to(x.dtype)

    return decomposed
