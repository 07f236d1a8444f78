"""Torch dtypes <-> IREE HAL element types and the numpy dtypes used to move bytes.

IREE buffers are untyped bytes plus an element type on the buffer view. We
move bytes through numpy, which lacks ``bfloat16``: such tensors travel as
``int16`` with the same bits and are reinterpreted on arrival.
"""

from __future__ import annotations

import numpy as np
import torch
from iree.runtime import HalBufferView, HalElementType

# torch dtype -> (HAL element type of the buffer view, numpy dtype carrying its bytes)
_TABLE: dict[torch.dtype, tuple[HalElementType, type]] = {
    torch.float32: (HalElementType.FLOAT_32, np.float32),
    torch.float64: (HalElementType.FLOAT_64, np.float64),
    torch.float16: (HalElementType.FLOAT_16, np.float16),
    torch.bfloat16: (HalElementType.BFLOAT_16, np.int16),
    torch.int64: (HalElementType.INT_64, np.int64),
    torch.int32: (HalElementType.INT_32, np.int32),
    torch.int16: (HalElementType.INT_16, np.int16),
    torch.int8: (HalElementType.INT_8, np.int8),
    torch.uint8: (HalElementType.UINT_8, np.uint8),
    torch.bool: (HalElementType.BOOL_8, np.bool_),
    torch.complex64: (HalElementType.COMPLEX_64, np.complex64),
    torch.complex128: (HalElementType.COMPLEX_128, np.complex128),
}

# The integer bit patterns IREE uses for the same width (signless/signed/unsigned).
_BY_HAL: dict[int, torch.dtype] = {int(hal): dt for dt, (hal, _) in _TABLE.items()}
_BY_HAL.update({
    int(HalElementType.SINT_64): torch.int64,
    int(HalElementType.SINT_32): torch.int32,
    int(HalElementType.SINT_16): torch.int16,
    int(HalElementType.SINT_8): torch.int8,
})


def supported(dtype: torch.dtype) -> bool:
    return dtype in _TABLE


def hal_element_type(dtype: torch.dtype) -> HalElementType:
    """The element type to tag a buffer view holding ``dtype`` with."""
    try:
        return _TABLE[dtype][0]
    except KeyError:
        raise TypeError(f"IREE backend: tensors of dtype {dtype} are not supported") from None


def carrier(dtype: torch.dtype) -> type:
    """The numpy dtype whose bytes equal ``dtype``'s (int16 for bfloat16)."""
    return _TABLE[dtype][1]


def torch_dtype_of(element_type: HalElementType | int) -> torch.dtype | None:
    """The torch dtype of a buffer view's element type, None if it has none."""
    return _BY_HAL.get(int(element_type))


def to_carrier_numpy(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy array with ``t``'s bytes (shares memory when it can)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy()


def from_carrier_numpy(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The torch tensor for carrier array ``a`` (no copy)."""
    t = torch.from_numpy(a)
    if dtype == torch.bfloat16:
        t = t.view(torch.bfloat16)
    return t


def retag(view: HalBufferView, dtype: torch.dtype) -> HalBufferView:
    """Buffer view ``view`` over the same buffer, its element type ``dtype``'s.

    A bf16 tensor is passed to and returned from emulated computations as
    int16 bits (``lowering.bf16``): only the view's tag changes, no byte moves.
    """
    element_type = hal_element_type(dtype)
    if view.element_type == element_type:
        return view
    return HalBufferView(view.get_buffer(), list(view.shape), element_type)
