"""``memrefCopy``, the C runtime function MLIR's JIT calls for a strided copy.

``finalize-memref-to-llvm`` lowers a ``memref.copy`` between contiguous
buffers to a ``memcpy``, and every other copy (a strided layout: a graph
returning ``x[::2]`` compiled with a dynamic dimension) to a call to
``memrefCopy(elem_size, src, dst)``, which MLIR ships in its
``mlir_c_runner_utils`` library. torch-mlir's wheel does not ship that
library, so such a graph failed to link ("Symbols not found: [ memrefCopy ]",
then "Unknown function lazy_graph_..._dyn" at the call: fuzz seed 1202
program 520 on the reference backend). This module defines the function for
the JIT (``ExecutionEngine.raw_register_runtime``), copying through numpy
views of the two descriptors; the copy semantics follow the C version:
element by element in row-major order of the common shape.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

__all__ = ["MEMREF_COPY_SYMBOL", "memref_copy_address", "raise_copy_error"]

MEMREF_COPY_SYMBOL = "memrefCopy"


class _Unranked(ctypes.Structure):
    """MLIR's ``UnrankedMemRefType``: the rank and a pointer to a ranked descriptor."""

    _fields_ = [("rank", ctypes.c_int64), ("descriptor", ctypes.c_void_p)]


class _Header(ctypes.Structure):
    """The rank-independent start of a ranked descriptor; sizes and strides follow."""

    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]


def _view(unranked: _Unranked, elem_size: int) -> np.ndarray | None:
    """A uint8 view (element bytes last) of the memref; None when it is empty."""
    rank = unranked.rank
    header = _Header.from_address(unranked.descriptor)
    dims = (ctypes.c_int64 * (2 * rank)).from_address(unranked.descriptor + ctypes.sizeof(_Header))
    sizes, strides = list(dims[:rank]), list(dims[rank:])
    if any(s <= 0 for s in sizes):
        return None
    lo = hi = header.offset
    for size, stride in zip(sizes, strides):
        if stride >= 0:
            hi += (size - 1) * stride
        else:
            lo += (size - 1) * stride
    extent = (hi - lo + 1) * elem_size
    buffer = np.ctypeslib.as_array((ctypes.c_uint8 * extent).from_address(header.aligned + lo * elem_size))
    return np.lib.stride_tricks.as_strided(
        buffer[(header.offset - lo) * elem_size:], shape=(*sizes, elem_size),
        strides=(*(s * elem_size for s in strides), 1))


#: Per calling thread, the first error a copy raised since the last ``raise_copy_error``:
#: an exception cannot cross the JIT's C frames, and a skipped copy is a wrong value.
_errors = threading.local()


def _memref_copy(elem_size: int, src: ctypes.c_void_p, dst: ctypes.c_void_p) -> None:
    try:
        source = _view(_Unranked.from_address(src), elem_size)
        target = _view(_Unranked.from_address(dst), elem_size)
        if source is not None and target is not None:
            np.copyto(target, source)
    except BaseException as e:  # noqa: BLE001 - kept for the caller, raised after the call
        if getattr(_errors, "error", None) is None:
            _errors.error = e


def raise_copy_error() -> None:
    """Raise (once) what a copy on this thread failed with during the last compiled call."""
    error, _errors.error = getattr(_errors, "error", None), None
    if error is not None:
        raise RuntimeError(f"reference backend: memrefCopy failed: {error!r}") from error


_PROTO = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
#: Kept alive for the process: the JIT holds its raw address.
_CALLBACK = _PROTO(_memref_copy)


def memref_copy_address() -> ctypes.c_void_p:
    """The address to register under ``MEMREF_COPY_SYMBOL`` (``raw_register_runtime`` takes a ``c_void_p``)."""
    return ctypes.cast(_CALLBACK, ctypes.c_void_p)
