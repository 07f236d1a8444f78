"""Asynchronous execution: ``mark_step()`` hands the graph to a worker and returns.

This is LTC's placeholder design. At a step barrier the graph is built and
(on a cache miss) compiled on the calling thread; its execution is queued on
one worker thread, and every output tensor immediately gets a ``PendingData``
placeholder as its device data. Python traces step N+1 while step N runs.
Anything that needs the value (a host read, or the next execution using it
as an argument) waits on the placeholder. An error in the worker is stored
in the placeholders and raised at the next read or barrier, with the label
of the execution that failed.

One worker runs every execution, synchronous ones included, so backends
never see two calls at once.
"""

from __future__ import annotations

import atexit
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

from .backend import BackendData


class PendingBatch:
    """The results of one queued execution: one event for all of them.

    A training step has hundreds of outputs (parameters, optimizer state);
    one ``threading.Event`` per output cost more than the rest of a cached
    ``mark_step()``. When the execution ends each placeholder receives its
    own value and the batch forgets them all, so a tensor kept alive does not
    keep the other results of its step alive.
    """

    __slots__ = ("_done", "_waiting", "_error", "label")

    def __init__(self, label: str) -> None:
        self._done = threading.Event()
        self._waiting: list[PendingData] = []
        self._error: BaseException | None = None
        self.label = label

    def placeholders(self, n: int) -> list[PendingData]:
        self._waiting = [PendingData(self) for _ in range(n)]
        return list(self._waiting)

    def set(self, values: list[BackendData]) -> None:
        for p, v in zip(self._waiting, values, strict=True):
            p._value = v
        self._waiting = []
        self._done.set()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self._waiting = []
        self._done.set()


class PendingData:
    """A result of a queued execution: becomes a BackendData when it has run."""

    __slots__ = ("batch", "_value")

    def __init__(self, batch: PendingBatch) -> None:
        self.batch = batch
        self._value: BackendData | None = None

    @property
    def label(self) -> str:
        return self.batch.label

    def wait(self) -> BackendData:
        batch = self.batch
        batch._done.wait()
        if batch._error is not None:
            raise RuntimeError(f"lazy execution ({batch.label}) failed: {batch._error}") from batch._error
        assert self._value is not None
        return self._value

    def done(self) -> bool:
        return self.batch._done.is_set()


def resolve(data: Any) -> Any:
    """The BackendData behind ``data`` (waiting for it if it is a placeholder)."""
    return data.wait() if isinstance(data, PendingData) else data


def enabled_by_default() -> bool:
    return os.environ.get("LAZY_ASYNC", "1") not in ("0", "false", "False", "")


class Worker:
    """One background thread running queued jobs in order."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._atexit = False

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            job()
            # Drop the finished job now, not at the next get(): a failed job's error (and its
            # traceback, which holds the caller's frames and tensors) must not outlive the raise.
            job = None

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="lazy-exec", daemon=True)
                self._thread.start()
                if not self._atexit:
                    self._atexit = True
                    atexit.register(self.shutdown)
        self._queue.put(job)

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the worker after everything queued, and wait for it."""
        box: dict[str, Any] = {}
        done = threading.Event()

        def job() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:  # re-raised on the caller's thread
                box["error"] = e
            finally:
                done.set()

        self.submit(job)
        done.wait()
        if "error" in box:
            raise box.pop("error")
        return box.get("value")

    def drain(self) -> None:
        """Wait until every queued job has run."""
        if self._thread is not None:
            self.run_sync(lambda: None)

    def shutdown(self, timeout: float = 300.0) -> None:
        """Let queued work finish and stop the thread (at interpreter exit).

        A daemon thread killed in the middle of a backend call (a JIT-compiled
        function, IREE's task pool) aborts the process with a C++ terminate
        instead of the user's exit status, e.g. when a script raises right
        after ``mark_step()``.
        """
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._queue.put(None)
        thread.join(timeout)
