"""Torch dtypes <-> IREE HAL element types and the numpy dtypes used to move bytes.

IREE buffers are untyped bytes plus an element type on the buffer view. We
move bytes through numpy, which lacks ``bfloat16``, the float8 types and
``complex32``: such tensors travel as integers of the same width with the same
bits and are reinterpreted on arrival.

The unsigned types wider than a byte, float8 and ``complex32`` are stored only
(``STORED_ONLY``): a tensor of them lives on the device and its ops run eagerly,
because IREE's arithmetic on them is unchecked against PyTorch's
(``backend.IreeBackend`` refuses a computation that holds one). Before, uploading one raised TypeError
where eager works (``torch.hash_tensor``'s uint64, a float8 cast).
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
    torch.uint16: (HalElementType.UINT_16, np.uint16),
    torch.uint32: (HalElementType.UINT_32, np.uint32),
    torch.uint64: (HalElementType.UINT_64, np.uint64),
    torch.float8_e4m3fn: (HalElementType.FLOAT_8_E4M3_FN, np.uint8),
    torch.float8_e5m2: (HalElementType.FLOAT_8_E5M2, np.uint8),
    torch.float8_e4m3fnuz: (HalElementType.FLOAT_8_E4M3_FNUZ, np.uint8),
    torch.float8_e5m2fnuz: (HalElementType.FLOAT_8_E5M2_FNUZ, np.uint8),
    torch.complex32: (HalElementType.OPAQUE_32, np.int32),
}

#: dtypes a buffer holds but no computation computes (the module docstring), with the
#: element type their ops are refused by in the torch dialect.
STORED_ONLY: dict[torch.dtype, str] = {
    torch.uint16: "ui16", torch.uint32: "ui32", torch.uint64: "ui64",
    torch.float8_e4m3fn: "f8E4M3FN", torch.float8_e5m2: "f8E5M2", torch.float8_e4m3fnuz: "f8E4M3FNUZ",
    torch.float8_e5m2fnuz: "f8E5M2FNUZ", torch.complex32: "complex<f16>",
}

#: dtypes numpy lacks -> the torch integer dtype of the same width carrying their bits.
_AS_BITS = {torch.bfloat16: torch.int16, torch.complex32: torch.int32,
            **dict.fromkeys((torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz),
                            torch.uint8)}

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
    """The numpy dtype whose bytes equal ``dtype``'s (int16 for bfloat16, uint8 for float8)."""
    return _TABLE[dtype][1]


def torch_dtype_of(element_type: HalElementType | int) -> torch.dtype | None:
    """The torch dtype of a buffer view's element type, None if it has none."""
    return _BY_HAL.get(int(element_type))


def to_carrier_numpy(t: torch.Tensor) -> np.ndarray:
    """A C-contiguous numpy array with ``t``'s bytes (shares memory when it can)."""
    t = t.detach().contiguous()
    bits = _AS_BITS.get(t.dtype)
    if bits is not None:
        t = t.view(bits)
    return t.numpy()


def from_carrier_numpy(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """The torch tensor for carrier array ``a`` (no copy)."""
    t = torch.from_numpy(a)
    if dtype in _AS_BITS:
        t = t.view(dtype)
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
