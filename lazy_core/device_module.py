"""``torch.lazy``: the device module PyTorch looks up by device type.

Libraries ask ``torch.<device type>`` for a device's runtime (what CUDA has in
``torch.cuda``): ``torch.utils.checkpoint`` and ``torch.random.fork_rng`` take
RNG states from it, so checkpointing a function of lazy tensors raised
"module 'torch' has no attribute 'lazy'" (found by the adversarial sweep; HF
models call it with ``gradient_checkpointing_enable()``). PyTorch/XLA registers
``torch.xla`` for the same reason.

Random numbers on lazy tensors are drawn from the CPU generator, bit-identical
to eager CPU (lazy_core.fallback.run_random), so the device has no RNG state of
its own: checkpoint's recompute replays the CPU state it saves anyway, and the
states here are empty. ``_initialized`` stays False so that checkpoint does not
save or restore them at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

_initialized = False


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


@contextlib.contextmanager
def device(index: Any) -> Iterator[None]:
    """Selecting a lazy device changes nothing: there is one."""
    yield


def get_rng_state(device: Any = "lazy") -> torch.Tensor:
    """Empty: lazy random ops draw from the CPU generator (``torch.get_rng_state()``)."""
    return torch.empty(0, dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: Any = "lazy") -> None:
    """Nothing to restore (see :func:`get_rng_state`)."""


def manual_seed(seed: int) -> None:
    """Seeds the generator lazy random ops draw from: the CPU one."""
    torch.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def synchronize(device: Any = None) -> None:
    """Wait for the pending device work, as ``torch.cuda.synchronize`` does."""
    from . import wait_device_ops

    wait_device_ops()


def register() -> None:
    """Make this module ``torch.lazy`` (once per process)."""
    import sys

    if getattr(torch, "lazy", None) is None:
        torch._register_device_module("lazy", sys.modules[__name__])
