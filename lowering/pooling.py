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

__all__ = ["adaptive_avg_pool2d", "adaptive_avg_pool2d_backward", "adaptive_max_pool2d", "max_pool2d_with_indices",
           "max_pool3d_with_indices", "max_pool3d_with_indices_backward", "adaptive_max_pool2d_backward",
           "adaptive_max_pool3d", "adaptive_max_pool3d_backward"]


def per_dim(v: Any, n: int) -> list[int]:
    """A pooling argument (an int, or one value or ``n`` of them) as ``n`` values."""
    if isinstance(v, int):
        return [v] * n
    v = list(v)
    return v * n if len(v) == 1 else v


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


def _along(v: torch.Tensor, i: int, dims: int) -> torch.Tensor:
    """A vector over output dim ``i`` of ``dims``, shaped to broadcast over the output's grid."""
    return v[(None,) * i + (slice(None),) + (None,) * (dims - 1 - i)]


def _scan(x: torch.Tensor, first: tuple[torch.Tensor, ...], axes: list[list[_Axis]],
          out: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    """Max and flat index over windows whose k-th element along pooled dim ``i`` is
    ``axes[i][k]``, window positions visited in row-major order (eager's). ``first``: each
    window's first position at or past 0 along each dim, eager's initial index (a window with
    no valid element, all in the padding, keeps it). Flat indices address the pooled dims of
    one plane, as eager's do."""
    dims = len(out)
    sizes = x.shape[-dims:]
    out_shape = (*x.shape[:-dims], *out)
    floating = x.dtype.is_floating_point
    # Eager starts from -inf, or from the lowest value where the type has no infinity.
    lowest = float("-inf") if floating else torch.iinfo(x.dtype).min
    best = torch.full(out_shape, lowest, dtype=x.dtype, device=x.device)
    index = None
    for i, f in enumerate(first):
        index = _along(f, i, dims) if index is None else index * sizes[i] + _along(f, i, dims)

    def visit(i: int, v: torch.Tensor, masks: list[torch.Tensor], flat: torch.Tensor | None) -> None:
        nonlocal best, index
        if i == dims:
            take = (v > best) | torch.isnan(v) if floating else v > best
            for ok in masks:
                take = take & ok
            best = torch.where(take, v, best)
            index = torch.where(take, flat, index)
            return
        for a in axes[i]:
            ok = _valid(a)
            here = _along(_flat(a, out[i], x.device), i, dims)
            visit(i + 1, _pick(v, i - dims, a, out[i]), masks if ok is None else [*masks, _along(ok, i, dims)],
                  here if flat is None else flat * sizes[i] + here)

    visit(0, x, [], None)
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


def _max_pool(x: torch.Tensor, dims: int, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool) -> tuple[torch.Tensor, torch.Tensor]:
    from torch._meta_registrations import pooling_output_shape

    k = per_dim(kernel_size, dims)
    s = per_dim(stride, dims) if stride else k
    p = per_dim(padding, dims)
    d = per_dim(dilation, dims)
    sizes = x.shape[-dims:]
    out = tuple(pooling_output_shape(sizes[i], k[i], p[i], s[i], d[i], ceil_mode) for i in range(dims))
    starts = [torch.arange(out[i], device=x.device) * s[i] - p[i] for i in range(dims)]
    axes = [[_strided(j * d[i] - p[i], s[i], out[i], sizes[i]) or _positions(starts[i], j, d[i], sizes[i], sizes[i])
             for j in range(k[i])] for i in range(dims)]
    return _scan(x, tuple(_first(starts[i], d[i]) for i in range(dims)), axes, out)


def max_pool2d_with_indices(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    return _max_pool(x, 2, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool3d_with_indices(x: torch.Tensor, kernel_size: Any, stride: Any = (), padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """torch-mlir's ``max_pool3d`` failed to compile on IREE for 11 of 29 random shapes ("inferred
    input/output operand #1 has shape's dimension #0 to be 6, but found 4"); eager's scan does not."""
    return _max_pool(x, 3, kernel_size, stride, padding, dilation, ceil_mode)


def _scatter_to_maxima(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor, dims: int) -> torch.Tensor:
    """Each output's gradient added at its window's maximum, the flat position ``indices`` holds
    in its plane of the last ``dims`` dims, as eager's kernels do."""
    batch = list(x.shape[:-dims])
    plane = 1
    for size in x.shape[-dims:]:
        plane *= size
    out = torch.zeros(*batch, plane, dtype=grad.dtype, device=grad.device)
    # A non-negative dim: torch-mlir 20261001's scatter lowering crashes the process on dim -1.
    out = out.scatter_add(len(batch), indices.reshape(*batch, -1), grad.reshape(*batch, -1))
    return out.reshape(x.shape)


def max_pool3d_with_indices_backward(grad: torch.Tensor, x: torch.Tensor, *_window: Any) -> torch.Tensor:
    """The gradient at each window's maximum (``indices``, the last argument). torch-mlir's
    lowering never compiled on IREE (39 of 39 random shapes)."""
    return _scatter_to_maxima(grad, x, _window[-1], 3)


def adaptive_max_pool2d_backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``adaptive_max_pool2d_backward`` (also ``adaptive_max_pool1d``'s): no torch-dialect op, so
    every training step through ``nn.AdaptiveMaxPool1d/2d`` ran it eagerly and was cut in two."""
    return _scatter_to_maxima(grad, x, indices, 2)


def adaptive_max_pool3d_backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """``adaptive_max_pool3d_backward``: ran eagerly, as the 2-d one."""
    return _scatter_to_maxima(grad, x, indices, 3)


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


def _adaptive_max_pool(x: torch.Tensor, output_size: Any, dims: int) -> tuple[torch.Tensor, torch.Tensor]:
    out = per_dim(output_size, dims)
    out = [x.shape[i - dims] if o is None else o for i, o in enumerate(out)]
    windows = [_adaptive_windows(x.shape[i - dims], out[i], x.device) for i in range(dims)]
    return _scan(x, tuple(w[0] for w in windows), [w[1] for w in windows], tuple(out))


def adaptive_max_pool2d(x: torch.Tensor, output_size: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return _adaptive_max_pool(x, output_size, 2)


def adaptive_max_pool3d(x: torch.Tensor, output_size: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """torch-mlir's ``adaptive_max_pool3d`` skips a NaN (its maximum compares ordered): a window
    holding one gave the largest other value and its index, where eager gives NaN."""
    return _adaptive_max_pool(x, output_size, 3)


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
    oh, ow = per_dim(output_size, 2)
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
