"""Max pooling with indices as eager's CPU kernels compute them (NaN included).

torch-mlir finds a window's index by comparing its elements with the pooled
value, which a NaN never equals: a window holding a NaN got index -1. The
values were right (NaN propagates), but the backward scattered its gradient
at -1: ``adaptive_max_pool2d`` of a tensor holding a NaN then corrupted the
heap on iree-cpu and on the reference backend (``double free or corruption``,
SIGABRT) and ``max_pool2d``'s gradient went nowhere.

Eager's kernels (``MaxPoolKernel.cpp``, ``AdaptiveMaxPoolKernel.cpp``) scan
each window in row-major order from ``maxval = -inf`` and the first valid
element's index, and take an element when ``val > maxval || isnan(val)``:
the first of equal maxima wins, and the last NaN. The decompositions below
scan the same way, one window position (``kh * kw`` of them) at a time:
each position is a gather of rows and columns of the input (positions in
the padding, or past an adaptive window's end, are masked out), so the
whole scan is elementwise work over the output's shape.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["adaptive_avg_pool2d", "adaptive_avg_pool2d_backward", "adaptive_max_pool2d", "max_pool2d_with_indices"]


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    v = list(v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


#: One element of every window along one axis: a strided slice (start, step) when every
#: window has it in range (no padding, no ragged end: the common case, cheaper to compile),
#: else gather indices (clamped into range) and a validity mask.
_Axis = tuple[int, int] | tuple[torch.Tensor, torch.Tensor]


def _pick(x: torch.Tensor, dim: int, axis: _Axis, count: int) -> torch.Tensor:
    a, b = axis
    if isinstance(a, int):
        return x.narrow(dim, a, (count - 1) * b + 1)[(slice(None),) * (dim % x.dim()) + (slice(None, None, b),)]
    return x.index_select(dim, a)


def _flat(axis: _Axis, count: int, device: Any) -> torch.Tensor:
    a, b = axis
    return a + b * torch.arange(count, device=device) if isinstance(a, int) else a


def _valid(axis: _Axis) -> torch.Tensor | None:
    return None if isinstance(axis[0], int) else axis[1]


def _scan(x: torch.Tensor, first: tuple[torch.Tensor, torch.Tensor], rows: list[_Axis], cols: list[_Axis],
          out: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Max and flat index over windows whose k-th row (column) is ``rows[k]`` (``cols[k]``).
    ``first``: each window's first row and column at or past 0, eager's initial index (a window
    with no valid element, all in the padding, keeps it)."""
    width = x.shape[-1]
    out_shape = (*x.shape[:-2], *out)
    best = torch.full(out_shape, float("-inf"), dtype=x.dtype, device=x.device)
    index = first[0][:, None] * width + first[1][None, :]
    for r in rows:
        picked_rows = _pick(x, -2, r, out[0])
        r_flat, r_ok = _flat(r, out[0], x.device), _valid(r)
        for c in cols:
            v = _pick(picked_rows, -1, c, out[1])
            c_ok = _valid(c)
            take = (v > best) | torch.isnan(v)
            if r_ok is not None:
                take = take & r_ok[:, None]
            if c_ok is not None:
                take = take & c_ok[None, :]
            best = torch.where(take, v, best)
            index = torch.where(take, r_flat[:, None] * width + _flat(c, out[1], x.device)[None, :], index)
    return best, index.expand(out_shape).clone()


def _positions(start: torch.Tensor, k: int, step: int, limit: torch.Tensor | int, size: int,
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The k-th element of each window: ``start + k * step``, valid below ``limit`` and inside
    ``[0, size)``, clamped into range for the gather."""
    pos = start + k * step
    ok = (pos >= 0) & (pos < size) & (pos < limit)
    return pos.clamp(0, size - 1), ok


def _first(start: torch.Tensor, step: int) -> torch.Tensor:
    """Eager's ``while (start < 0) start += dilation``."""
    return torch.where(start < 0, start + torch.div(step - 1 - start, step, rounding_mode="floor") * step, start)


def max_pool2d_with_indices(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    from torch._meta_registrations import pooling_output_shape

    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride) if stride else (kh, kw)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    height, width = x.shape[-2], x.shape[-1]
    oh = pooling_output_shape(height, kh, ph, sh, dh, ceil_mode)
    ow = pooling_output_shape(width, kw, pw, sw, dw, ceil_mode)
    row0 = torch.arange(oh, device=x.device) * sh - ph
    col0 = torch.arange(ow, device=x.device) * sw - pw
    rows = [_strided(i * dh - ph, sh, oh, height) or _positions(row0, i, dh, height, height) for i in range(kh)]
    cols = [_strided(j * dw - pw, sw, ow, width) or _positions(col0, j, dw, width, width) for j in range(kw)]
    return _scan(x, (_first(row0, dh), _first(col0, dw)), rows, cols, (oh, ow))


def _strided(start: int, step: int, count: int, size: int) -> tuple[int, int] | None:
    """(start, step) when every window's element lies in ``[0, size)``, else None."""
    return (start, step) if start >= 0 and start + (count - 1) * step < size else None


def _adaptive_windows(size: int, out: int, device: Any) -> tuple[torch.Tensor, list[_Axis]]:
    """Eager's adaptive windows, ``[floor(o * size / out), ceil((o + 1) * size / out))``: their
    starts and their k-th elements (strided slices when ``out`` divides ``size``)."""
    o = torch.arange(out, device=device)
    if size % out == 0:
        k = size // out
        return o * k, [(i, k) for i in range(k)]
    start = torch.div(o * size, out, rounding_mode="floor")
    end = torch.div((o + 1) * size + out - 1, out, rounding_mode="floor")
    longest = max(-(-(k + 1) * size // out) - (k * size // out) for k in range(out))
    return start, [_positions(start, k, 1, end, size) for k in range(longest)]


def adaptive_max_pool2d(x: torch.Tensor, output_size: Any) -> tuple[torch.Tensor, torch.Tensor]:
    oh, ow = _pair(output_size)
    row0, rows = _adaptive_windows(x.shape[-2], oh, x.device)
    col0, cols = _adaptive_windows(x.shape[-1], ow, x.device)
    return _scan(x, (row0, col0), rows, cols, (oh, ow))


def _adaptive_average(size: int, out: int, device: Any) -> torch.Tensor:
    """[out, size]: row i averages input positions ``[floor(i * size / out), ceil((i + 1) * size / out))``,
    eager's adaptive window; each row holds ``1 / window length`` inside the window, 0 outside."""
    i = torch.arange(out, device=device)
    start = (i * size).div(out, rounding_mode="floor")
    end = ((i + 1) * size + out - 1).div(out, rounding_mode="floor")
    j = torch.arange(size, device=device)
    inside = (j >= start[:, None]) & (j < end[:, None])
    return inside / (end - start)[:, None]


def adaptive_avg_pool2d(x: torch.Tensor, output_size: Any) -> torch.Tensor:
    """``adaptive_avg_pool2d`` as ``Rh @ x @ Rw^T`` (``_adaptive_average``): torch-mlir's lowering of
    uneven windows failed on the reference backend (``interpolate(mode="area")`` of 7 x 9 to 5 x 4:
    a ``tensor.cast`` of incompatible shapes)."""
    oh, ow = _pair(output_size)
    rows = _adaptive_average(x.shape[-2], oh, x.device).to(x.dtype)
    cols = _adaptive_average(x.shape[-1], ow, x.device).to(x.dtype)
    return rows @ x @ cols.t()


def adaptive_avg_pool2d_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The gradient of ``adaptive_avg_pool2d(x, grad.shape[-2:])``: torch-mlir 20261001 lowers it only
    where every window has one size (a dividing ratio); ``adaptive_avg_pool2d(x, (3, 4))`` of 7 x 9
    and ``interpolate(mode="area")`` failed to compile. Windows along rows and columns are independent
    (an element's share is ``1 / (rows * cols)`` of its window), so the gradient is ``Rh^T @ grad @ Rw``
    with ``R`` the averaging matrices of ``_adaptive_average``."""
    rows = _adaptive_average(x.shape[-2], grad.shape[-2], grad.device).to(grad.dtype)
    cols = _adaptive_average(x.shape[-1], grad.shape[-1], grad.device).to(grad.dtype)
    return (rows.t() @ grad @ cols).to(x.dtype)
