"""``F.grid_sample`` (``aten.grid_sampler_2d``) with the CPU kernel's answer at non-finite coordinates.

There is no torch-dialect op; PyTorch's decomposition (gathers of the corner pixels) lowers it.
For finite grids it agrees with the CPU kernel. For a NaN or infinite grid coordinate (a spatial
transformer whose predicted affine parameters diverged) it did not, and a diverging run looked
healthy on lazy:

* bilinear, ``padding_mode="zeros"`` (the default): the CPU kernel multiplies each corner's
  value, 0 out of bounds, by its weight; a non-finite coordinate makes the weights NaN, so the
  output is NaN. The decomposition keeps only in-bounds corners (``where(in_bounds, v * w, 0)``)
  and gave 0.
* ``"border"`` and ``"reflection"`` (bilinear and nearest): the CPU kernel clips coordinates
  with the operands of its clamp swapped "in order to clamp NaNs to zero", so a NaN coordinate
  (reflection: also an infinite one, whose reflection is NaN) reads pixel 0. The decomposition's
  clamp keeps the NaN and gave 0.

Bicubic already agrees (the CPU kernel's bicubic taps go through its scalar clip). The
reflection of a finite coordinate beyond ~2**24 pixels is left exact here, where the CPU
kernel's ``abs - trunc(abs / span) * span`` loses it to rounding.
"""

from __future__ import annotations

import torch

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _unnormalize(coords: torch.Tensor, size: int, align_corners: bool) -> torch.Tensor:
    """Pixel coordinates, as PyTorch's decomposition computes them."""
    mul = (size * 0.5 - 0.5) if align_corners else (size * 0.5)
    return coords * mul + (size * 0.5 - 0.5)


def grid_sampler_2d(a: torch.Tensor, grid: torch.Tensor, interpolation_mode: int = _BILINEAR,
                    padding_mode: int = _ZEROS, align_corners: bool = False) -> torch.Tensor:
    from torch._decomp.decompositions import grid_sampler_2d as decomposed

    if interpolation_mode == _BICUBIC:
        return decomposed(a, grid, interpolation_mode, padding_mode, align_corners)
    in_h, in_w = a.shape[2], a.shape[3]
    x = _unnormalize(grid[..., 0], in_w, align_corners)
    y = _unnormalize(grid[..., 1], in_h, align_corners)
    if padding_mode != _ZEROS:
        # -1 is pixel 0 after the clip (border) and after the reflection and clip (reflection),
        # for both align_corners.
        lost_x, lost_y = (torch.isnan(x), torch.isnan(y)) if padding_mode == _BORDER else (
            ~torch.isfinite(x), ~torch.isfinite(y))
        grid = torch.stack([torch.where(lost_x, -1.0, grid[..., 0]), torch.where(lost_y, -1.0, grid[..., 1])], -1)
        return decomposed(a, grid.to(a.dtype), interpolation_mode, padding_mode, align_corners)
    out = decomposed(a, grid, interpolation_mode, padding_mode, align_corners)
    if interpolation_mode == _BILINEAR:
        lost = ~(torch.isfinite(x) & torch.isfinite(y))  # [N, oH, oW]
        out = torch.where(lost[:, None], float("nan"), out).to(out.dtype)
    return out
