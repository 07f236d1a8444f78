"""``F.grid_sample`` (``aten.grid_sampler_2d``) computed as the CPU kernel computes it.

There is no torch-dialect op. PyTorch's decomposition (``torch._decomp``) differs from the CPU
kernel (``GridSamplerKernel.cpp``) in ways a training loop sees:

* its pixel coordinate is ``g * m + o`` where the kernel computes ``(g + 1) * m`` (``- 0.5``
  without ``align_corners``). The two round differently, and where the coordinate lands on an
  integer, ``floor`` picks another cell: the value is continuous there, the gradient with
  respect to the grid is not. A spatial transformer with ``align_corners=True`` near the
  identity (the usual initialisation) got theta gradients off by 0.3 on the reference backend
  (two of 60 grid points on the wrong side of a pixel);
* at a NaN or infinite coordinate (a diverged transformer), bilinear with zeros padding (the
  default) multiplies the out-of-bounds zeros by NaN weights in the kernel, giving NaN; the
  decomposition kept only in-bounds corners and gave 0. Border and reflection padding clip a
  NaN coordinate to 0 in the kernel (its clamp's operands are swapped for that; an infinite
  one reflects to NaN); the decomposition's clamp kept the NaN and gave 0.

Bilinear and nearest are written here with the kernel's arithmetic: its unnormalization,
clip (NaN to 0, the borders outside for the gradient), reflection (``abs - trunc(abs / span) *
span``), corner weights and masks, and sum of ``value * weight`` in its order. Bicubic keeps
PyTorch's decomposition. The backward is the vjp of this forward (lowering/vjp.py).
"""

from __future__ import annotations

import torch

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _unnormalize(g: torch.Tensor, size: int, align_corners: bool) -> torch.Tensor:
    if align_corners:
        return (g + 1) * ((size - 1) / 2)
    return (g + 1) * (size / 2) - 0.5


def _clip(x: torch.Tensor, size: int) -> torch.Tensor:
    """Into ``[0, size - 1]``, a NaN to 0; strict comparisons, so a coordinate on a border gets
    no gradient (the kernel counts the borders as outside for it)."""
    x = torch.where(x > 0, x, 0.0)
    return torch.where(x < size - 1, x, float(size - 1))


def _reflect(x: torch.Tensor, size: int, align_corners: bool) -> torch.Tensor:
    if align_corners:
        if size <= 1:
            return torch.zeros_like(x)
        twice_span, low = 2.0 * (size - 1), 0.0
    else:
        twice_span, low = 2.0 * size, -0.5
    magnitude = (x - low).abs()
    extra = magnitude - torch.trunc(magnitude / twice_span) * twice_span
    flipped = twice_span - extra
    return torch.where(extra > flipped, flipped, extra) + low


def _coordinate(g: torch.Tensor, size: int, padding_mode: int, align_corners: bool) -> torch.Tensor:
    x = _unnormalize(g, size, align_corners)
    if padding_mode == _BORDER:
        return _clip(x, size)
    if padding_mode == _REFLECTION:
        return _clip(_reflect(x, size, align_corners), size)
    return x


def _gather(a: torch.Tensor, y: torch.Tensor, x: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """``a[n, c, y, x]`` for integral float positions ``[N, oH, oW]``, 0 where not ``ok``."""
    n, c, h, w = a.shape
    yi = torch.where(ok, y, 0.0).clamp(0, h - 1).to(torch.int64)
    xi = torch.where(ok, x, 0.0).clamp(0, w - 1).to(torch.int64)
    flat = (yi * w + xi).view(n, 1, -1).expand(n, c, -1)
    values = a.reshape(n, c, h * w).gather(2, flat).view(n, c, *y.shape[1:])
    return torch.where(ok[:, None], values, 0.0).to(a.dtype)


def _inside(v: torch.Tensor, size: int) -> torch.Tensor:
    return (v > -1) & (v < size)


def grid_sampler_2d(a: torch.Tensor, grid: torch.Tensor, interpolation_mode: int = _BILINEAR,
                    padding_mode: int = _ZEROS, align_corners: bool = False) -> torch.Tensor:
    if interpolation_mode == _BICUBIC:
        from torch._decomp.decompositions import grid_sampler_2d as decomposed

        return decomposed(a, grid, interpolation_mode, padding_mode, align_corners)
    dtype = a.dtype
    if dtype in (torch.float16, torch.bfloat16):
        a, grid = a.float(), grid.float()
    in_h, in_w = a.shape[2], a.shape[3]
    x = _coordinate(grid[..., 0], in_w, padding_mode, align_corners)  # [N, oH, oW]
    y = _coordinate(grid[..., 1], in_h, padding_mode, align_corners)
    bounded = padding_mode != _ZEROS
    if interpolation_mode == _NEAREST:
        xn, yn = torch.round(x), torch.round(y)
        ok = torch.ones_like(xn, dtype=torch.bool) if bounded else _inside(xn, in_w) & _inside(yn, in_h)
        return _gather(a, yn, xn, ok).to(dtype)
    x_w, y_n = torch.floor(x), torch.floor(y)
    w = x - x_w
    e = 1 - w
    n = y - y_n
    s = 1 - n
    x_e, y_s = x_w + 1, y_n + 1
    if bounded:
        w_ok = n_ok = torch.ones_like(x_w, dtype=torch.bool)
        e_ok, s_ok = x_e < in_w, y_s < in_h
    else:
        w_ok, n_ok, e_ok, s_ok = _inside(x_w, in_w), _inside(y_n, in_h), _inside(x_e, in_w), _inside(y_s, in_h)
    out = (_gather(a, y_n, x_w, w_ok & n_ok) * (s * e)[:, None]
           + _gather(a, y_n, x_e, e_ok & n_ok) * (s * w)[:, None]
           + _gather(a, y_s, x_w, w_ok & s_ok) * (n * e)[:, None]
           + _gather(a, y_s, x_e, e_ok & s_ok) * (n * w)[:, None])
    return out.to(dtype)
