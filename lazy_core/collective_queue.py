"""Collectives in flight: their results arrive while tracing and the next segment go on.

A collective on lazy tensors is a cut (``lazy_core.distributed``): the segment
that feeds it runs, and the process group's own CPU backend communicates on
host copies. Waiting there for the communication idles everything else: with
DDP's buckets, the rest of the backward could be traced and computed while a
bucket is all-reduced, which is how eager DDP hides its communication.

So the cut only *issues* the collective, on the calling thread (every rank
then issues its collectives in program order, which is what pairs them up
across ranks, CPU-tensor collectives on the same group included), and the
tensors it writes get placeholders at once. One communication thread waits
for each ``Work`` in issue order and hands the host results to the
placeholders; the device upload happens on the thread that first needs the
value (the execution worker, for the next graph that reads it, or a host
read), so only those two threads ever call the backend, as before.

This is LTC's placeholder scheme (``async_exec``) with a second kind of
producer. The same guarantees hold (Note [The runtime cannot deadlock]): the
communication thread waits only for the process group, never for the
execution worker, and every wait polls that thread's liveness. A collective
that fails (a peer gone, a timeout) fails its placeholders: a read raises the
process group's error, and so does the next barrier.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from . import metrics
from .async_exec import PendingBatch, PendingData, Worker
from .backend import BackendData

__all__ = ["ReceivedData", "issue"]

_comm: Worker | None = None
_comm_lock = threading.Lock()
#: One upload per result, whichever thread asks first.
_upload_lock = threading.Lock()


def _worker() -> Worker:
    global _comm
    with _comm_lock:
        if _comm is None:
            _comm = Worker(name="lazy-comm")
        return _comm


class ReceivedData(PendingData):
    """A placeholder a collective fills with a host tensor, uploaded on first use.

    ``upload`` (set before the batch is handed to the communication thread)
    turns the host tensor into the backend's ``BackendData``.
    """

    __slots__ = ("upload",)

    def __init__(self, batch: PendingBatch, fallback: Any = None) -> None:
        super().__init__(batch, fallback)
        self.upload: Callable[[torch.Tensor], BackendData] | None = None

    def wait(self, report: bool = True) -> BackendData:
        value = super().wait(report)
        if isinstance(value, torch.Tensor):
            with _upload_lock:
                if isinstance(self._value, torch.Tensor):
                    assert self.upload is not None
                    with metrics.timed("transfer_to_device"):
                        self._value = self.upload(self._value)
                    self.upload = None
                value = self._value
        return value


def issue(label: str, works: list[Any], results: list[torch.Tensor],
          upload: Callable[[torch.Tensor], BackendData]) -> list[ReceivedData]:
    """Placeholders for ``results`` (host tensors the process group writes until ``works`` end).

    ``works``: the ``Work`` objects the collective returned (already issued).
    The host tensors are held until the communication ends; none may be
    touched by the caller after this call.
    """
    comm = _worker()
    batch = PendingBatch(label, len(results), comm, kind=ReceivedData)
    placeholders = batch.placeholders()
    for p in placeholders:
        p.upload = upload  # type: ignore[attr-defined]

    def run() -> None:
        with metrics.timed("collective_in_flight"):
            for w in works:
                w.wait()
        batch.set(list(results))

    comm.submit(run, batch.fail)
    metrics.counter_add("collective_async")
    return placeholders  # type: ignore[return-value]


def drain() -> None:
    """Wait until every issued collective has delivered its results (or failed)."""
    if _comm is not None:
        _comm.drain()
