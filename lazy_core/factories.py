"""Kernels for the ``Lazy`` dispatch key: tensor factories with ``device="lazy"``.

``torch.zeros(3, device="lazy")`` has no lazy tensor argument, so it never
reaches ``LazyTensor.__torch_dispatch__``; it reaches the ``Lazy`` dispatch
key. Registering the two allocation primitives there is enough: every other
factory (zeros, ones, full, randn, arange, tensor(...)) is composite and
continues on the LazyTensor these return (``zero_``, ``fill_``, ``normal_``,
``copy_``, ``arange.out`` ...).
"""

from __future__ import annotations

from typing import Any

import torch

from .ir import Output

_lib: torch.library.Library | None = None


def _empty(size: Any, dtype: Any = None, layout: Any = None, device: Any = None,
           pin_memory: Any = None, memory_format: Any = None) -> torch.Tensor:
    from .tensor import LazyTensor, _wrap, record

    kwargs = {"dtype": dtype or torch.get_default_dtype()}
    node, template = record(torch.ops.aten.empty.memory_format, (list(size),), kwargs)
    t = _wrap(node, template, torch.device(device).index or 0 if device is not None else 0)
    assert isinstance(t, LazyTensor)
    return t


def _empty_strided(size: Any, stride: Any, dtype: Any = None, layout: Any = None, device: Any = None,
                   pin_memory: Any = None) -> torch.Tensor:
    from .tensor import LazyTensor, _wrap, record

    kwargs = {"dtype": dtype or torch.get_default_dtype()}
    node, template = record(torch.ops.aten.empty_strided.default, (list(size), list(stride)), kwargs)
    t = _wrap(node, template, torch.device(device).index or 0 if device is not None else 0)
    assert isinstance(t, LazyTensor)
    return t


def register() -> None:
    """Install the Lazy-key kernels (idempotent)."""
    global _lib
    if _lib is not None:
        return
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "Lazy")
    lib.impl("empty_strided", _empty_strided, "Lazy")
    _lib = lib


__all__ = ["register", "Output"]
