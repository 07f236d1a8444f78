"""Collectives in flight: their results arrive while tracing and the next segment go on.

A collective on lazy tensors is a cut (``lazy_core.distributed``): the segment
that feeds it runs, and the process group's own CPU backend communicates on
host copies. Waiting there for the communication idles everything else: with
DDP's buckets, the rest of the backward could be traced and computed while a
bucket is all-reduced, which is how eager DDP hides its communication.

So the cut only *issues* the collective, on the calling thread (every rank
then issues its collectives in program order, which is what pairs them up
across ranks, CPU-tensor collectives on the same group included), and the
tensors it writes get placeholders at once. When the process group completes
the collective's ``Work`` (its future's callback, on the group's own thread),
the host results go to the placeholders; each collective completes on its
own, so reading one never waits for another issued earlier on another group.
The device upload happens on the thread that first needs the value (the
execution worker, for the next graph that reads it, or a host read), so only
those two threads ever call the backend, as before.

This is LTC's placeholder scheme (``async_exec``) with a second kind of
producer. A wait for a placeholder polls, and ``LAZY_WAIT_TIMEOUT`` bounds it
as any other. A collective that fails (a peer gone, the group's timeout)
fails its placeholders: a read raises the process group's error, and so does
the next barrier. ``wait_device_ops()`` waits for every collective in flight.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from . import config, metrics
from .async_exec import _POLL, LazyExecutionError, PendingBatch, PendingData
from .backend import BackendData

__all__ = ["ReceivedData", "drain", "issue"]

#: One upload per result, whichever thread asks first.
_upload_lock = threading.Lock()
#: Batches issued and not yet complete (``drain``); guarded by ``_lock``.
_in_flight: set[PendingBatch] = set()
_lock = threading.Lock()


class _GroupThreads:
    """The "worker" of a collective's batch: the process group's threads fill it, so a wait
    only polls (PendingBatch's interface; ``LAZY_WAIT_TIMEOUT`` bounds it as any wait)."""

    @staticmethod
    def on_worker_thread() -> bool:
        return False

    @staticmethod
    def wait_for(event: threading.Event, what: str) -> None:
        timeout = config.get("LAZY_WAIT_TIMEOUT")
        start = time.monotonic()
        while not event.wait(_POLL):
            if timeout and time.monotonic() - start > timeout:
                raise LazyExecutionError(
                    f"{what} did not finish within LAZY_WAIT_TIMEOUT={timeout} s (the process group "
                    "has not completed it)", what)


_GROUP_THREADS = _GroupThreads()


class ReceivedData(PendingData):
    """A placeholder a collective fills with a host tensor, uploaded on first use.

    ``upload`` (set before the collective can complete) turns the host
    tensor into the backend's ``BackendData``.
    """

    __slots__ = ("upload",)

    def __init__(self, batch: PendingBatch, fallback: Any = None) -> None:
        super().__init__(batch, fallback)
        self.upload: Callable[[torch.Tensor], BackendData] | None = None

    def wait(self, report: bool = True, to_user: bool | None = None) -> BackendData:
        value = super().wait(report, to_user)
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
    batch = PendingBatch(label, len(results), _GROUP_THREADS, kind=ReceivedData)  # type: ignore[arg-type]
    placeholders = batch.placeholders()
    for p in placeholders:
        p.upload = upload  # type: ignore[attr-defined]
    issued = time.perf_counter()

    def finish(check: Callable[[], None]) -> None:
        # On the process group's thread, a waiter thread, or this one if already complete.
        try:
            check()  # raises the collective's error
            batch.set(list(results))
        except BaseException as e:  # the group's error fails the results, never its thread
            batch.fail(e)
        finally:
            with _lock:
                _in_flight.discard(batch)
            metrics.record_time("collective_in_flight", time.perf_counter() - issued)

    with _lock:
        _in_flight.add(batch)
    metrics.counter_add("collective_async")
    try:
        futures = [w.get_future() for w in works]
    except RuntimeError:  # a Work without a future ("Work::getFuture not implemented")
        futures = None
    if futures is None:
        def wait_all() -> None:
            for w in works:
                w.wait()

        threading.Thread(target=finish, args=(wait_all,), name="lazy-collective", daemon=True).start()
    elif futures:
        def values() -> None:
            # Not ``Work.wait()``: on the group's thread it waits for this very callback.
            for f in futures:
                f.value()  # complete: returns at once, or raises

        torch.futures.collect_all(futures).add_done_callback(lambda _: finish(values))
    else:
        finish(lambda: None)
    return placeholders  # type: ignore[return-value]


def drain() -> None:
    """Wait until every collective in flight has delivered its results (or failed)."""
    with _lock:
        batches = list(_in_flight)
    for batch in batches:
        batch.wait()
