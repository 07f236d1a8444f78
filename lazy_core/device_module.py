"""``torch.lazy``: the device module PyTorch looks up by device type.

Libraries ask ``torch.<device type>`` for a device's runtime (what CUDA has in
``torch.cuda``): ``torch.utils.checkpoint`` and ``torch.random.fork_rng`` take
RNG states from it, so checkpointing a function of lazy tensors raised
"module 'torch' has no attribute 'lazy'" (found by the adversarial sweep; HF
models call it with ``gradient_checkpointing_enable()``). PyTorch/XLA registers
``torch.xla`` for the same reason.

Random numbers on lazy tensors are drawn from the CPU generator, bit-identical
to eager CPU (lazy_core.fallback.run_random), so the device has no RNG state of
its own: checkpoint's recompute replays the CPU state it saves anyway.

What the device state carries instead is ``lazy_core.autocast``'s settings.
Checkpoint re-enters CUDA's autocast for the recompute with ``torch.autocast``,
which refuses device ``lazy`` (no autocast dispatch key), so a region
checkpointed under ``lazy_core.autocast`` recomputed in float32 during the
backward: non-reentrant checkpoint raised "Recomputed values ... have different
metadata", reentrant returned float32 gradients. Checkpoint does save and
restore the device's state around the recompute (with ``preserve_rng_state``,
its default), so ``get_rng_state`` returns the autocast settings and
``set_rng_state`` restores them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from . import autocast

#: True: checkpoint saves and restores this device's state (see the module doc).
_initialized = True


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


def get_rng_state(device: Any = "lazy") -> autocast.Settings:
    """This thread's ``lazy_core.autocast`` settings: lazy random ops draw from the CPU
    generator (``torch.get_rng_state()``), and the device has no other state."""
    return autocast.current_settings()


def set_rng_state(new_state: autocast.Settings, device: Any = "lazy") -> None:
    """Restore what :func:`get_rng_state` returned (see the module doc)."""
    if not isinstance(new_state, autocast.Settings):
        raise TypeError(f"torch.lazy.set_rng_state takes what torch.lazy.get_rng_state returned, "
                        f"got {type(new_state).__name__}")
    autocast.restore_settings(new_state)


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
