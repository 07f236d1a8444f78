"""The ``"lazy"`` process-group name and per-rank thread limits.

``dist.init_process_group("lazy")`` works like PyTorch/XLA's ``"xla"``: the
name is registered with ``dist.Backend.register_backend`` for the ``lazy``
device (and ``cpu``, so the same group also serves CPU tensors, e.g. a
checkpoint broadcast). Collectives on lazy tensors run on host buffers
(``lazy_core.distributed``), so underneath it is gloo. ``init_process_group("gloo")``
works just as well; the name exists so that code written for an accelerator
("pick my device's backend") finds one for ``lazy``.

N ranks on one machine each start a PyTorch intra-op pool and an IREE task
pool sized for the whole machine: N times oversubscribed, and every
collective waits for the slowest rank. ``limit_threads()`` gives each rank
its share.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch

__all__ = ["BACKEND_NAME", "limit_threads", "register_process_group_backend"]

BACKEND_NAME = "lazy"


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> Any:
    from torch.distributed import ProcessGroupGloo

    return ProcessGroupGloo(store, rank, size, timeout)


def register_process_group_backend() -> None:
    """Make ``"lazy"`` a ``torch.distributed`` backend name (idempotent; done on import)."""
    if not torch.distributed.is_available():
        return
    from torch.distributed import Backend

    if BACKEND_NAME.upper() in getattr(Backend, "_plugins", {}):
        return
    Backend.register_backend(BACKEND_NAME, _create, devices=["cpu", "lazy"])


def limit_threads(threads: int | None = None) -> int:
    """Limit this rank's compute threads; returns the count used.

    ``threads`` defaults to the usable cores divided by ``LOCAL_WORLD_SIZE``
    (set by torchrun; 1 rank otherwise), at least 1. Sets torch's intra-op
    threads and IREE's CPU task pool (``--task_topology_group_count``, read
    when the first IREE CPU device opens: call this before the first lazy op
    on iree-cpu). A task-pool size the user already gave in
    ``LAZY_IREE_RUNTIME_FLAGS`` wins.
    """
    if threads is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
        local = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
        threads = max(1, cores // max(1, local))
    torch.set_num_threads(threads)
    flags = os.environ.get("LAZY_IREE_RUNTIME_FLAGS", "")
    if "--task_topology_group_count" not in flags:
        os.environ["LAZY_IREE_RUNTIME_FLAGS"] = f"--task_topology_group_count={threads} {flags}".strip()
    return threads
