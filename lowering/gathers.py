"""Ops that move elements by computed positions, written as gathers and scatter-adds along one dim.

``F.unfold`` (``im2col``), ``F.fold`` (``col2im``) and reflection padding
(and their backwards) failed to compile everywhere: torch-mlir leaves a
constant of ``im2col`` unlegalized and ``col2im`` crashed iree-compile, and
PyTorch's decompositions of all of them index with ``aten.index.Tensor``
holding ``None`` entries (the FX importer rejects such lists) or with
``_unsafe_masked_index`` (no lowering). Every one of them separates by dim:
the positions read along rows do not depend on the column, so each is
written here as ``index_select`` along one dim after the other (forward) or
a scatter-add into zeros along one dim after the other (the adjoint; ``scatter_add``
with the positions broadcast over the other dims: ``index_add`` has no
torch-dialect op), with the positions computed by ``arange`` arithmetic in
the graph.
"""

from __future__ import annotations

from typing import Any

import torch


def _pair(v: Any) -> tuple[int, int]:
    v = list(v) if not isinstance(v, int) else [v]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _add_at(shape: list[int], dim: int, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    """Zeros of ``shape`` with ``src``'s slices along ``dim`` added at positions ``index``."""
    view = [1] * src.dim()
    view[dim] = index.numel()
    return src.new_zeros(shape).scatter_add(dim, index.reshape(view).expand(src.shape), src)


def _window_positions(size: int, kernel: int, dilation: int, padding: int, stride: int,
                      device: Any) -> tuple[torch.Tensor, int]:
    """[kernel * blocks] positions in the padded dim read by each kernel offset at each block, and
    the number of blocks (im2col's output positions along this dim)."""
    blocks = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    offsets = torch.arange(kernel, device=device) * dilation
    starts = torch.arange(blocks, device=device) * stride
    return (offsets[:, None] + starts[None, :]).reshape(-1), blocks


def im2col(x: torch.Tensor, kernel_size: Any, dilation: Any, padding: Any, stride: Any) -> torch.Tensor:
    """``F.unfold``: ``[N, C, H, W]`` (or ``[C, H, W]``) to ``[N, C * kh * kw, blocks]``."""
    batched = x.dim() == 4
    x = x if batched else x.unsqueeze(0)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = map(_pair, (kernel_size, dilation, padding, stride))
    n, c, h, w = x.shape
    rows, bh = _window_positions(h, kh, dh, ph, sh, x.device)
    cols, bw = _window_positions(w, kw, dw, pw, sw, x.device)
    padded = torch.constant_pad_nd(x, (pw, pw, ph, ph))
    picked = padded.index_select(2, rows).index_select(3, cols)  # [N, C, kh * bh, kw * bw]
    out = picked.reshape(n, c, kh, bh, kw, bw).permute(0, 1, 2, 4, 3, 5).reshape(n, c * kh * kw, bh * bw)
    return out if batched else out.squeeze(0)


def col2im(cols: torch.Tensor, output_size: Any, kernel_size: Any, dilation: Any, padding: Any,
           stride: Any) -> torch.Tensor:
    """``F.fold``, the adjoint of ``im2col``: overlapping blocks are summed."""
    batched = cols.dim() == 3
    cols = cols if batched else cols.unsqueeze(0)
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = map(_pair, (output_size, kernel_size, dilation, padding,
                                                                 stride))
    n = cols.shape[0]
    c = cols.shape[1] // (kh * kw)
    rows, bh = _window_positions(h, kh, dh, ph, sh, cols.device)
    columns, bw = _window_positions(w, kw, dw, pw, sw, cols.device)
    blocks = cols.reshape(n, c, kh, kw, bh, bw).permute(0, 1, 2, 4, 3, 5).reshape(n, c, kh * bh, kw * bw)
    wide = _add_at([n, c, kh * bh, w + 2 * pw], 3, columns, blocks)
    full = _add_at([n, c, h + 2 * ph, w + 2 * pw], 2, rows, wide)
    out = full[:, :, ph:ph + h, pw:pw + w]
    return out if batched else out.squeeze(0)


def _reflected(size: int, before: int, after: int, device: Any) -> torch.Tensor:
    """For each position of a dim padded by reflection, the input position it copies."""
    q = torch.arange(-before, size + after, device=device)
    return (size - 1) - ((size - 1) - q.abs()).abs()


def reflection_pad(x: torch.Tensor, padding: Any) -> torch.Tensor:
    """``reflection_pad1d``/``2d``/``3d``: ``padding`` is (left, right[, top, bottom[, front,
    back]]), last dim first."""
    for k in range(len(padding) // 2):
        dim = x.dim() - 1 - k
        x = x.index_select(dim, _reflected(x.shape[dim], padding[2 * k], padding[2 * k + 1], x.device))
    return x


def replication_pad(x: torch.Tensor, padding: Any) -> torch.Tensor:
    """``replication_pad1d``/``2d``/``3d`` with a negative amount (eager crops that side): output
    position ``j`` of a dim reads input ``clamp(j - left, 0, n - 1)``, whatever the signs.
    torch-mlir's lowering failed to compile any negative amount."""
    for k in range(len(padding) // 2):
        dim = x.dim() - 1 - k
        x = x.index_select(dim, _replicated(x.shape[dim], padding[2 * k], padding[2 * k + 1], x.device))
    return x


def _replicated(n: int, left: int, right: int, device: Any) -> torch.Tensor:
    """The input position each output position of a replication-padded dim reads."""
    return (torch.arange(n + left + right, device=device) - left).clamp(0, n - 1)


def _pad_backward(grad: torch.Tensor, x: torch.Tensor, padding: Any, positions: Any) -> torch.Tensor:
    """The adjoint of a padding whose output positions read input ``positions(n, left, right,
    device)`` along each padded dim: each position's gradient added to the input it read."""
    for k in range(len(padding) // 2):
        dim = x.dim() - 1 - k
        shape = list(grad.shape)
        shape[dim] = x.shape[dim]
        grad = _add_at(shape, dim, positions(x.shape[dim], padding[2 * k], padding[2 * k + 1], grad.device), grad)
    return grad


def replication_pad_backward(grad: torch.Tensor, x: torch.Tensor, padding: Any) -> torch.Tensor:
    """The adjoint of ``replication_pad``. No torch-dialect op: every replicate-padded training
    step ran it eagerly."""
    return _pad_backward(grad, x, padding, _replicated)


def reflection_pad_backward(grad: torch.Tensor, x: torch.Tensor, padding: Any) -> torch.Tensor:
    """The adjoint of ``reflection_pad``: each padded position's gradient added to its source."""
    return _pad_backward(grad, x, padding, _reflected)


def _addresses(x: torch.Tensor, size: list[int], stride: list[int], offset: int | None) -> torch.Tensor:
    """Per element of ``as_strided(size, stride, offset)``, its position in ``x`` flattened: a
    value's storage is its contiguous layout (lazy_core/strided.py rebuilds every eager
    ``as_strided`` on a flat, contiguous view of its storage)."""
    index = torch.zeros([1] * len(size), dtype=torch.int64, device=x.device) + (offset or 0)
    for dim, (n, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[dim] = n
        index = index + (torch.arange(n, device=x.device) * step).reshape(shape)
    return index.expand(list(size)).reshape(-1)


def as_strided(x: torch.Tensor, size: list[int], stride: list[int],
               storage_offset: int | None = None) -> torch.Tensor:
    """``aten.as_strided`` of a value as a gather of its flattened elements. torch-mlir's importer
    has its own rewrite, which needs the graph owned by a module (a bare graph failed to import:
    every ``as_strided`` ran eagerly) and reads the layout from FX metadata."""
    return x.reshape(-1).index_select(0, _addresses(x, size, stride, storage_offset)).reshape(list(size))


def as_strided_scatter(x: torch.Tensor, src: torch.Tensor, size: list[int], stride: list[int],
                       storage_offset: int | None = None) -> torch.Tensor:
    """``aten.as_strided_scatter`` (a write through an ``as_strided`` view) as a scatter into the
    flattened value; torch-mlir has no lowering for it. Positions are distinct: the tracer
    refuses, as eager does, writes to a view that overlaps itself."""
    flat = x.reshape(-1).scatter(0, _addresses(x, size, stride, storage_offset), src.reshape(-1).to(x.dtype))
    return flat.reshape(x.shape)


def max_unpool(x: torch.Tensor, indices: torch.Tensor, output_size: Any, *_stride_padding: Any) -> torch.Tensor:
    """``max_unpool2d``/``max_unpool3d`` (``F.max_unpool1d`` too, through 2d): each plane of
    zeros gets the input's values written at the flat positions ``indices`` hold, as eager's
    kernel does (its stride and padding only check the sizes). torch-mlir 20261001 lowered the 2d
    form assuming the windows tile the output: an index in the output's last row was dropped
    (the OpInfo sweep's samples: 1 of 6 values and 2 of 36 lost), and the 3d form not at all.
    The guard in lazy_core/checks.py makes every index address its plane."""
    spatial = len(output_size)
    batch = list(x.shape[: x.dim() - spatial])
    plane = 1
    for s in output_size:
        plane *= int(s)
    flat = x.reshape(*batch, -1)
    out = torch.zeros(*batch, plane, dtype=x.dtype, device=x.device)
    # A non-negative dim: torch-mlir 20261001's scatter lowering crashes the process on dim -1.
    out = out.scatter(len(batch), indices.reshape(*batch, -1), flat)
    return out.reshape(*batch, *[int(s) for s in output_size])
