"""``x.view(dtype)`` to a dtype of another width equals eager's reinterpretation, bit for bit.

The reference backend ran every such view eagerly (torch-mlir has no linalg lowering of
``aten.view.dtype``; ``lowering/tensor_bitcasts.py`` now writes it as integer arithmetic on
the bits). The pairs cover narrowing and widening by 2, 4 and 8, floats and integers both
ways, signed values, NaN payloads and infinities.
"""

from __future__ import annotations

import pytest
import torch

import lazy_core

_PAIRS = [
    (torch.float32, torch.int16), (torch.float32, torch.uint8), (torch.float32, torch.float16),
    (torch.float32, torch.float64), (torch.float32, torch.int64), (torch.int16, torch.float32),
    (torch.uint8, torch.float32), (torch.int8, torch.int64), (torch.float64, torch.float16),
    (torch.float16, torch.int8), (torch.int64, torch.int8), (torch.int32, torch.float64),
]


def _source(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        x = torch.randn(3, 2, 8, generator=g, dtype=torch.float64).to(dtype)
        x[0, 0, :4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0], dtype=dtype)
        return x
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, (3, 2, 8), generator=g, dtype=torch.int64).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` as integers of its width, so NaN payloads and zeros' signs compare."""
    widths = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.view(widths[t.element_size()]) if t.dtype.is_floating_point else t


@pytest.mark.parametrize("pair", _PAIRS, ids=lambda p: f"{str(p[0])[6:]}-to-{str(p[1])[6:]}")
def test_a_view_across_widths_equals_eagers_bits(backend: lazy_core.BackendImpl,
                                                 pair: tuple[torch.dtype, torch.dtype]) -> None:
    src, dst = pair
    if "vulkan" in backend.name and torch.float64 in pair:
        pytest.skip("iree-vulkan has no float64 (SPIR-V's GLSL set takes 16/32-bit floats)")
    x = _source(src)
    expected = (x + 0 if src == torch.uint8 else x * 1).view(dst)
    got = ((x.to("lazy") + 0) if src == torch.uint8 else (x.to("lazy") * 1)).view(dst).cpu()
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(_bits(got), _bits(expected))
