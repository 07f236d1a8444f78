"""``_upsample_bilinear2d_aa`` (``F.interpolate(..., mode="bilinear", antialias=True)``) as two
products with interpolation matrices.

No torch-dialect op, so every call ran eagerly (the OpInfo ``_upsample_bilinear2d_aa``). Eager's
kernel (``UpSampleKernel.cpp``, Pillow's resampling) is separable: along each dim, output ``i``
averages the inputs ``xmin <= j < xmax`` with weights ``filter((j - center + 0.5) * invscale)``
normalized to sum 1, where ``center = scale * (i + 0.5)``, ``support = scale`` when downsampling
(``invscale = 1 / scale``) and 1 otherwise, ``xmin = max(trunc(center - support + 0.5), 0)``,
``xmax = min(trunc(center + support + 0.5), size)`` and ``filter(x) = max(0, 1 - |x|)``;
``scale`` is ``1 / scales_*`` if given, ``(in - 1) / (out - 1)`` with ``align_corners``, else
``in / out``. Here each dim's weights are an ``[out, in]`` matrix computed in float64 from the
index grids (ops, no constants), and each pass a windowed sum in the image's dtype.
"""

from __future__ import annotations

import torch

__all__ = ["applies_call", "upsample_bilinear2d_aa"]


def applies_call(args: tuple, kwargs: dict) -> bool:
    x = args[0] if args else kwargs.get("self")
    return (isinstance(x, torch.Tensor) and x.dtype in (torch.float32, torch.float64) and x.dim() == 4
            and x.numel() > 0 and x.numel() * max(x.shape[-1], x.shape[-2]) <= 1 << 24)


def _scale(size_in: int, size_out: int, align_corners: bool, scale: float | None) -> float:
    """ATen's ``area_pixel_compute_scale``."""
    if align_corners:
        return (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
    return 1.0 / scale if scale is not None and scale > 0 else size_in / size_out


def _weights(size_in: int, size_out: int, scale: float, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(W, window)``: the ``[out, in]`` weights and which inputs each output's window holds."""
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    i = torch.arange(size_out, dtype=torch.float64, device=like.device).unsqueeze(1)
    j = torch.arange(size_in, dtype=torch.float64, device=like.device)
    center = scale * (i + 0.5)
    xmin = torch.clamp(torch.trunc(center - support + 0.5), min=0)
    xmax = torch.clamp(torch.trunc(center + support + 0.5), max=size_in)
    window = (j >= xmin) & (j < xmax)
    w = torch.where(window, torch.clamp(1 - ((j - center + 0.5) * invscale).abs(), min=0), 0.0)
    total = w.sum(1, keepdim=True)
    w = torch.where(total != 0, w / torch.where(total != 0, total, 1.0), w)
    return w.to(like.dtype), window


def upsample_bilinear2d_aa(x: torch.Tensor, output_size: list[int], align_corners: bool,
                           scales_h: float | None = None, scales_w: float | None = None) -> torch.Tensor:
    """The width pass, then the height pass, each skipped where the size does not change (as
    eager's). A pass sums ``weight * x`` over each window only, selected: a NaN or an infinity
    outside a window does not reach that output (a product with a zero weight would)."""
    h_in, w_in = x.shape[-2], x.shape[-1]
    h_out, w_out = output_size
    if w_out != w_in:
        ww, win = _weights(w_in, w_out, _scale(w_in, w_out, align_corners, scales_w), x)  # [w_out, w_in]
        x = torch.where(win, ww * x.unsqueeze(-2), 0.0).sum(-1)  # [..., h, w_out, w_in] -> [..., h, w_out]
    if h_out != h_in:
        wh, win = _weights(h_in, h_out, _scale(h_in, h_out, align_corners, scales_h), x)  # [h_out, h_in]
        terms = wh.unsqueeze(-1) * x.unsqueeze(-3)  # [..., h_out, h_in, w]
        x = torch.where(win.unsqueeze(-1), terms, 0.0).sum(-2)
    return x.clone() if (h_out, w_out) == (h_in, w_in) else x
