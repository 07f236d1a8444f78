"""Type annotations of FX nodes, as torch-mlir's importer reads them.

The importer types a value from ``node.meta["val"]``: a meta tensor for one
tensor, a tuple of FakeTensors for several. Shared by the graph build
(``context``) and the FX rewrites that retype values (``small_ints``).
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

import torch
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from lazy_core.ir import TensorMeta

__all__ = ["fake_tensor", "meta_tensor", "set_meta"]

_tls = threading.local()


@lru_cache(maxsize=8192)
def meta_tensor(m: TensorMeta) -> torch.Tensor:
    """One shared meta tensor per shape/dtype/stride: graphs repeat the same few
    types, and reusing the object lets the importer's type cache hit."""
    return torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta")


# id(tensor) -> (tensor, its TensorMetadata); holding the tensor keeps the id valid.
_tensor_metadata_cache: dict[int, tuple[torch.Tensor, Any]] = {}


def _tensor_metadata(val: torch.Tensor) -> Any:
    """``_extract_tensor_metadata`` (contiguity checks and all) once per shared meta tensor."""
    hit = _tensor_metadata_cache.get(id(val))
    if hit is not None and hit[0] is val:
        return hit[1]
    md = _extract_tensor_metadata(val)
    if len(_tensor_metadata_cache) < 8192:
        _tensor_metadata_cache[id(val)] = (val, md)
    return md


def fake_tensor(m: TensorMeta) -> torch.Tensor:
    """Multi-result ops: the importer types each tuple element only from a FakeTensor."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = getattr(_tls, "fake_mode", None)
    if mode is None:
        mode = _tls.fake_mode = FakeTensorMode()
    return mode.from_tensor(meta_tensor(m))


def set_meta(fx_node: Any, val: Any) -> None:
    """Annotate ``fx_node`` with ``val`` (and a tensor's metadata) for the importer."""
    fx_node.meta["val"] = val
    if isinstance(val, torch.Tensor):
        fx_node.meta["tensor_meta"] = _tensor_metadata(val)
