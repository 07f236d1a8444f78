"""Moving tensors between the host and an IREE device.

Upload copies a CPU tensor into a device-local buffer once; from then on the
buffer view is the tensor (``BackendData.handle``) and feeds computations
directly. Download has two paths:

* the buffer is host-visible and mappable (CPU, unified memory): map it and
  copy the bytes out;
* otherwise (Vulkan, CUDA): copy it on the device queue into a host-local
  staging buffer and map that. The runtime's own ``DeviceArray.to_host``
  imports a numpy allocation instead, which Mesa's lavapipe rejects
  (``minImportedHostPointerAlignment`` is 4096); a staging buffer the driver
  allocates itself is always suitably aligned.

Both paths copy into memory torch owns, so the result outlives the mapping.
"""

from __future__ import annotations

import iree.runtime as rt
import numpy as np
import torch

from . import dtypes
from .runtime import IreeDevice

_MAPPABLE = int(rt.BufferUsage.MAPPING_SCOPED)
_HOST_VISIBLE = int(rt.MemoryType.HOST_VISIBLE)
_STAGING_MEMORY = int(rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE)
_STAGING_USAGE = int(rt.BufferUsage.TRANSFER_TARGET | rt.BufferUsage.MAPPING_SCOPED)
_UPLOAD_USAGE = int(rt.BufferUsage.DEFAULT)


def upload(device: IreeDevice, tensor: torch.Tensor) -> rt.HalBufferView:
    """A new device buffer view holding a copy of ``tensor``."""
    array = dtypes.to_carrier_numpy(tensor.detach().cpu())
    return device.allocator.allocate_buffer_copy(
        memory_type=rt.MemoryType.DEVICE_LOCAL,
        allowed_usage=_UPLOAD_USAGE,
        device=device.hal_device,
        buffer=array,
        element_type=dtypes.hal_element_type(tensor.dtype),
    )


def _mappable(buffer: rt.HalBuffer) -> bool:
    return bool(buffer.memory_type() & _HOST_VISIBLE) and (buffer.allowed_usage() & _MAPPABLE) == _MAPPABLE


def _staged(device: IreeDevice, source: rt.HalBuffer) -> rt.HalBuffer:
    """``source`` copied on the device queue into a fresh host-mappable buffer."""
    staging = device.allocator.allocate_buffer(
        memory_type=_STAGING_MEMORY,
        allowed_usage=_STAGING_USAGE,
        allocation_size=source.byte_length(),
    )
    sem = device.hal_device.create_semaphore(0)
    device.hal_device.queue_copy(
        source,
        staging,
        wait_semaphores=rt.HalFence.create_at(sem, 0),
        signal_semaphores=rt.HalFence.create_at(sem, 1),
    )
    rt.HalFence.create_at(sem, 1).wait()
    return staging


def device_copies(device: IreeDevice, views: list[rt.HalBufferView]) -> list[rt.HalBufferView]:
    """Private device-side copies of ``views`` (queued back to back, one wait).

    Given to compiled functions that may write into their arguments (see
    ``aliasing``), so the caller's buffers stay untouched.
    """
    if not views:
        return []
    hal = device.hal_device
    sem = hal.create_semaphore(0)
    out = []
    queued = 0
    for view in views:
        source = view.get_buffer()
        target = device.allocator.allocate_buffer(
            memory_type=rt.MemoryType.DEVICE_LOCAL,
            allowed_usage=_UPLOAD_USAGE,
            allocation_size=max(1, source.byte_length()),
        )
        # An empty buffer (a [0]-shaped tensor, as GPT-2 has) needs no copy and
        # takes no step in the chain: signalling its step from the host ran
        # ahead of the queued copies ("semaphore already signaled past").
        if source.byte_length():
            hal.queue_copy(
                source, target,
                wait_semaphores=rt.HalFence.create_at(sem, queued),
                signal_semaphores=rt.HalFence.create_at(sem, queued + 1),
            )
            queued += 1
        out.append(rt.HalBufferView(target, list(view.shape), view.element_type))
    if queued:
        rt.HalFence.create_at(sem, queued).wait()
    return out


def download(device: IreeDevice, view: rt.HalBufferView, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A CPU tensor (owned by torch) of ``dtype`` with the contents of ``view``.

    The view's own element type says how its bytes are laid out (f32 where
    IREE demoted an f64, i8 for an i1); the result is converted to ``dtype``.
    """
    stored = dtypes.torch_dtype_of(view.element_type) or dtype
    out = torch.empty(shape, dtype=stored)
    nbytes = out.numel() * out.element_size()
    if nbytes:
        buffer = view.get_buffer()
        if _mappable(buffer):
            mapped = view.map()
        else:
            # The staging buffer holds exactly the view's bytes, from offset 0.
            mapped = _staged(device, buffer).map()
        src = mapped.asarray([nbytes], np.dtype(np.uint8))
        np.copyto(dtypes.to_carrier_numpy(out).reshape(-1).view(np.uint8), src)
    return out if stored == dtype else out.to(dtype)
