"""What libraries ask of a tensor's memory, answered for lazy tensors.

Lazy tensors have no host memory, so three things users hit at once failed:

* ``Module.to("lazy")`` swaps each parameter with its lazy copy
  (``torch.utils.swap_tensors``, the path PyTorch takes for tensor
  subclasses). The swap refuses when anything else holds the parameter, such
  as the autograd graph of a CPU output of the module that is still alive:
  "Couldn't swap Conv2d.weight". ``.to("cuda")`` instead rewrites the
  parameter in place and keeps that graph's saved tensors, which is what
  happens here too: the Python object takes the lazy value (ties between
  modules stay tied, as on CUDA), the old graph keeps the CPU tensor, and a
  backward through that stale graph raises instead of losing its gradients.
* ``safetensors`` and ``save_pretrained`` find shared tensors by storage
  address (``untyped_storage().data_ptr()``, ``data_ptr()``): "invalid python
  storage". Lazy tensors answer with addresses that stand for their storage:
  unique per storage, with views at their byte offsets, so tied weights are
  found exactly as on the CPU. Nothing may read memory at these addresses.
* ``torch.load(..., map_location="lazy")``: no deserializer knew ``lazy``.
  One is registered (``torch.serialization.register_package``): each loaded
  storage gets a ``lazy``-device storage over the same host bytes, which the
  rebuilt tensor's ``set_`` uploads (``lazy_core.fallback``).
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .tensor import LazyTensor
    from .views import Storage

# -- storage addresses ------------------------------------------------------------------

_addresses: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# Fake addresses far above real ones, a 4 KiB gap between storages: never
# dereferenced, only compared and subtracted by libraries looking for sharing.
_ALIGN = 4096
_next_address = 1 << 48


def _storage_nbytes(storage: Storage) -> int:
    meta = storage.meta
    if meta.numel() == 0:
        return 0
    extent = 1 + sum((n - 1) * s for n, s in zip(meta.shape, meta.stride) if n > 0)
    return extent * meta.dtype.itemsize


def _address(storage: Storage) -> int:
    global _next_address
    base = _addresses.get(storage)
    if base is None:
        base = _addresses[storage] = _next_address
        _next_address += (_storage_nbytes(storage) // _ALIGN + 2) * _ALIGN
    return base


class LazyUntypedStorage:
    """``tensor.untyped_storage()`` of a lazy tensor: identity and size, no bytes."""

    __slots__ = ("_storage",)

    def __init__(self, storage: Storage) -> None:
        self._storage = storage

    @property
    def device(self) -> torch.device:
        return torch.device("lazy", self._storage.device)

    def data_ptr(self) -> int:
        return _address(self._storage)

    def nbytes(self) -> int:
        return _storage_nbytes(self._storage)

    def size(self) -> int:
        return self.nbytes()

    def __len__(self) -> int:
        return self.nbytes()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LazyUntypedStorage) and other._storage is self._storage

    def __hash__(self) -> int:
        return id(self._storage)

    def __repr__(self) -> str:
        return f"LazyUntypedStorage(nbytes={self.nbytes()}, device={self.device})"


def storage_offset(t: LazyTensor) -> int:
    """``t``'s offset in elements into its storage: its view chain replayed on a meta tensor."""
    if not t._lz_view:
        return 0
    meta = t._lz_storage.meta
    x = torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype, device="meta")
    for step in t._lz_view:
        x = step.op(x, *step.rest, **step.kwargs)
    return x.storage_offset()


def data_ptr(t: LazyTensor) -> int:
    return _address(t._lz_storage) + storage_offset(t) * t.element_size()


# -- Module.to: swapping a parameter that something else holds ----------------------------

_torch_swap_tensors = torch.utils.swap_tensors


def _stale_graph_hook(grad_outputs: Any) -> None:
    raise RuntimeError(
        "backward through a graph made before its module moved to the lazy device: its "
        "parameters now live on 'lazy' (as after .to('cuda')); run the forward again"
    )


def swap_tensors(t1: torch.Tensor, t2: torch.Tensor) -> None:
    """``torch.utils.swap_tensors`` that, for lazy tensors, also swaps a tensor others hold.

    PyTorch refuses when ``t1`` is referenced elsewhere (an autograd graph saved
    it). The swap exchanges the C++ tensors under the two Python objects, so
    whoever held ``t1``'s tensor keeps exactly that (the CPU value); only
    gradients flowing through such a stale graph would go astray, so that
    graph's gradient node raises instead.
    """
    from .tensor import LazyTensor

    if not (isinstance(t1, LazyTensor) or isinstance(t2, LazyTensor)):
        return _torch_swap_tensors(t1, t2)
    try:
        return _torch_swap_tensors(t1, t2)
    except RuntimeError as e:
        if "use_count" not in str(e):
            raise
    if t1.requires_grad and t1.is_leaf:
        torch.autograd.graph.get_gradient_edge(t1).node.register_prehook(_stale_graph_hook)
    _force_swap(t1, t2)


def _force_swap(t1: torch.Tensor, t2: torch.Tensor) -> None:
    # torch.utils.swap_tensors after its use-count check (weakrefs and slots were checked).
    import copyreg

    slots = set(copyreg._slotnames(t1.__class__)) | set(copyreg._slotnames(t2.__class__))  # type: ignore[attr-defined]
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__
    for slot in slots:
        a, b = hasattr(t1, slot), hasattr(t2, slot)
        va, vb = getattr(t1, slot, None), getattr(t2, slot, None)
        if b:
            setattr(t1, slot, vb)
        elif a:
            delattr(t1, slot)
        if a:
            setattr(t2, slot, va)
        elif b:
            delattr(t2, slot)
    torch._C._swap_tensor_impl(t1, t2)


# -- torch.load(map_location="lazy") --------------------------------------------------------

# Address of a lazy-device storage made by the deserializer -> the host storage with its bytes.
_host_storages: dict[int, torch.UntypedStorage] = {}


def _tag(storage: Any) -> str | None:
    device = getattr(storage, "device", None)
    return "lazy" if getattr(device, "type", None) == "lazy" else None


def _deserialize(storage: Any, location: str) -> Any:
    if not location.startswith("lazy"):
        return None
    host = storage if storage.device.type == "cpu" else storage.cpu()
    index = torch.device(location).index or 0
    lazy = torch._C._construct_storage_from_data_pointer(host.data_ptr(), torch.device("lazy", index), host.nbytes())
    ptr = lazy.data_ptr()
    _host_storages[ptr] = host
    weakref.finalize(lazy, _host_storages.pop, ptr, None)
    return lazy


def host_storage(storage: Any) -> torch.UntypedStorage | None:
    """The host bytes behind a lazy-device storage that ``torch.load`` made, or None."""
    if getattr(getattr(storage, "device", None), "type", None) != "lazy":
        return None
    try:
        return _host_storages.get(storage.data_ptr())
    except RuntimeError:
        return None


_installed = False


def install() -> None:
    """Register the ``lazy`` deserializer and the swap (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    torch.serialization.register_package(30, _tag, _deserialize)
    torch.utils.swap_tensors = swap_tensors
