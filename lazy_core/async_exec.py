"""The execution worker: ``mark_step()`` hands the graph to it and returns.

This is LTC's placeholder design. At a step barrier the graph is built and
(on a cache miss) compiled on the calling thread; its execution is queued on
one worker thread, and every output tensor immediately gets a ``PendingData``
placeholder as its device data. Python traces step N+1 while step N runs.
Anything that needs the value (a host read, or the next execution using it
as an argument) waits on the placeholder.

One worker runs every execution, synchronous ones included
(``LAZY_ASYNC=0`` only makes the caller wait), so backends never see two
calls at once.

Note [The runtime cannot deadlock]
----------------------------------
* A batch's placeholders exist before its job is queued, so the worker can
  never finish a job whose results have nowhere to go.
* The worker loop catches every exception of a job and fails that job's
  batch; the thread itself never dies of a job.
* Every wait polls: if the worker thread is gone (killed at interpreter
  exit, or by a bug in this module) the job it was running fails with an
  error saying so and a new thread takes the rest of the queue; an optional
  ``LAZY_WAIT_TIMEOUT`` bounds every wait.

Note [Failed executions are transactions]
-----------------------------------------
A placeholder knows the *last good value* of the tensor it replaces (the
device data its storage held before the step's updates). When the
execution fails, the placeholder resolves to that value instead: the step
is skipped as if it never ran, and the next step (already traced on top of
the placeholders) computes from the old weights. A placeholder with no
good value (a tensor the failed step created, or whose old buffer was
donated to the failed execution) is *poisoned*: reading it raises.
The failure is reported once (:class:`LazyExecutionError`): at the first
read of one of its results, or at the next barrier (``mark_step``,
``wait_device_ops``), whichever comes first; an execution that fails
because it reads a poisoned result says so in one line, without nesting
the first error's text.
"""

from __future__ import annotations

import atexit
import collections
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from . import config
from .backend import BackendData

__all__ = [
    "LazyExecutionError", "PendingBatch", "PendingData", "Worker", "enabled_by_default", "resolve",
    "take_failures",
]

#: How often a waiting thread checks that the worker is still alive (seconds).
_POLL = 0.5


class LazyExecutionError(RuntimeError):
    """A queued lazy execution failed (or could not run).

    ``label`` names the execution (the barrier and the user's line that
    queued it, and the graph); ``__cause__`` is the backend's own error.
    """

    def __init__(self, message: str, label: str) -> None:
        super().__init__(message)
        self.label = label


_ERROR_CLASSES: dict[type, type[LazyExecutionError]] = {}


def _error_class(cause: type) -> type[LazyExecutionError]:
    """``LazyExecutionError`` that is also a ``cause``: PyTorch's error stays catchable.

    Eager PyTorch raises at the op; a lazy tensor raises at the read, and
    code written for eager catches the op's own type (``NotImplementedError``,
    ``IndexError``, ``ValueError``). Types whose instances carry extra C
    fields (``OSError``) cannot be combined and give the plain class.
    """
    if cause is type(None) or not issubclass(cause, Exception) or issubclass(cause, LazyExecutionError):
        return LazyExecutionError
    cls = _ERROR_CLASSES.get(cause)
    if cls is None:
        try:
            cls = type(f"Lazy{cause.__name__}", (LazyExecutionError, cause), {"__module__": __name__})
        except TypeError:  # instance lay-out conflict
            cls = LazyExecutionError
        _ERROR_CLASSES[cause] = cls
    return cls


class PendingBatch:
    """The results of one queued execution: one event for all of them.

    A training step has hundreds of outputs (parameters, optimizer state);
    one ``threading.Event`` per output cost more than the rest of a cached
    ``mark_step()``. When the execution ends each placeholder receives its
    own value and the batch forgets them all, so a tensor kept alive does not
    keep the other results of its step alive.

    ``fallbacks[i]`` is the last good value of result ``i`` (see Note
    [Failed executions are transactions]): a ``BackendData``, a
    ``PendingData`` of an earlier execution, ``None`` (no good value) or a
    string (why the old value is lost).
    """

    __slots__ = ("_done", "_waiting", "_error", "_cause", "_source", "label", "reported", "worker")

    def __init__(self, label: str, n: int, worker: Worker, fallbacks: list[Any] | None = None,
                 kind: type[PendingData] | None = None) -> None:
        self._done = threading.Event()
        self._error: LazyExecutionError | None = None
        self._cause: BaseException | None = None
        #: The failed batch whose result this one read (its failure was this one's cause).
        self._source: PendingBatch | None = None
        self.label = label
        #: Whether the failure was raised to the user (it is raised once).
        self.reported = False
        self.worker = worker
        fallbacks = fallbacks or [None] * n
        kind = kind or PendingData
        self._waiting: list[PendingData] = [kind(self, f) for f in fallbacks]

    def placeholders(self) -> list[PendingData]:
        """The results' placeholders. Take them before queueing the job: once it ends, the batch forgets them."""
        return list(self._waiting)

    def set(self, values: list[Any]) -> None:
        """The results, in order: ``BackendData`` (or what ``kind``'s ``wait`` turns into one)."""
        waiting = self._waiting
        if len(values) != len(waiting):
            self.fail(RuntimeError(f"the backend returned {len(values)} results for {len(waiting)} outputs"))
            return
        for p, v in zip(waiting, values):
            p._value = v
            p._fallback = None
        self._waiting = []
        self._done.set()

    def fail(self, error: BaseException) -> None:
        """Fail every result: each resolves to its last good value or raises."""
        if self._done.is_set():
            return
        if isinstance(error, LazyExecutionError):
            # It read a poisoned result: one line, not the other failure's text again. Telling
            # the user of this failure tells them of that one (no warning for it at exit).
            self._source = getattr(error, "failed_batch", None)
            self._error = LazyExecutionError(
                f"lazy execution ({self.label}) did not run: it reads a result of the failed "
                f"execution ({error.label})", self.label)
        else:
            self._cause = error
            self._error = LazyExecutionError(
                f"lazy execution ({self.label}) failed: {type(error).__name__}: {error}", self.label)
        self._waiting = []
        _failed.append(self)
        self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def failed(self) -> bool:
        return self._error is not None

    def error(self) -> LazyExecutionError:
        """A fresh exception for this batch's failure (raising one object twice grows its traceback).

        It is also an instance of the backend error's type (see
        ``_error_class``), so ``except NotImplementedError`` around a read
        catches what eager PyTorch would have raised at the op.
        """
        assert self._error is not None
        e = _error_class(type(self._cause))(str(self._error), self.label)
        e.__cause__ = self._cause
        return e

    def wait(self) -> None:
        """Wait until the execution has ended (successfully or not)."""
        self.worker.wait_for(self._done, self.label)

    def raise_if_failed(self) -> None:
        """Raise this batch's failure once (the caller reports it)."""
        if self._error is not None and not self.reported:
            self.mark_reported()
            raise self.error()

    def mark_reported(self) -> None:
        """The user was told of this failure, and so of the failures it names."""
        batch: PendingBatch | None = self
        while batch is not None and not batch.reported:
            batch.reported = True
            batch = batch._source


class PendingData:
    """A result of a queued execution: becomes a BackendData when it has run."""

    __slots__ = ("batch", "_value", "_fallback")

    def __init__(self, batch: PendingBatch, fallback: Any = None) -> None:
        self.batch = batch
        self._value: BackendData | None = None
        self._fallback = fallback

    @property
    def label(self) -> str:
        return self.batch.label

    def wait(self, report: bool = True, to_user: bool | None = None) -> BackendData:
        """The value; after a failure, the last good value or an error.

        ``report``: a read by the user raises the execution's failure the
        first time, even for a result that rolled back (the user learns of
        it); the worker resolving the next execution's arguments does not.
        ``to_user`` (default ``report``): an error raised here reaches the
        user, so its failure counts as reported (a rolled-back value that is
        itself the placeholder of a failed execution with no earlier value).
        """
        if to_user is None:
            to_user = report
        batch = self.batch
        if not batch._done.is_set():
            batch.wait()
        if self._value is not None:
            return self._value
        if report:
            batch.raise_if_failed()
        fallback = self._fallback
        if fallback is None or isinstance(fallback, str):
            error = batch.error()
            if isinstance(fallback, str):
                error.add_note(f"This tensor has no earlier value to return: {fallback}.")
            else:
                error.add_note("This tensor was computed by the failed execution and has no earlier value.")
            error.failed_batch = batch  # type: ignore[attr-defined]
            if to_user:
                batch.mark_reported()
            raise error
        return fallback.wait(False, to_user) if isinstance(fallback, PendingData) else fallback

    def done(self) -> bool:
        return self.batch._done.is_set()


def resolve(data: Any, report: bool = True) -> Any:
    """The BackendData behind ``data`` (waiting for it if it is a placeholder)."""
    return data.wait(report) if isinstance(data, PendingData) else data


def enabled_by_default() -> bool:
    return bool(config.get("LAZY_ASYNC"))


# Failed batches not yet seen by a barrier (appended by the worker thread;
# deque appends and pops are atomic).
_failed: collections.deque[PendingBatch] = collections.deque()


def take_failures() -> list[PendingBatch]:
    """Failed executions not yet raised to the user, oldest first (each is now reported)."""
    out = []
    while _failed:
        batch = _failed.popleft()
        if not batch.reported:
            batch.mark_reported()
            out.append(batch)
    return out


def raise_failures() -> None:
    """Raise the oldest unreported failure, naming how many others there were."""
    failures = take_failures()
    if not failures:
        return
    error = failures[0].error()
    if len(failures) > 1:
        rest = ", ".join(b.label for b in failures[1:4]) + (" ..." if len(failures) > 4 else "")
        error.add_note(f"{len(failures) - 1} later execution(s) failed too: {rest}")
    raise error


class _Job:
    __slots__ = ("run", "fail")

    def __init__(self, run: Callable[[], None], fail: Callable[[BaseException], None]) -> None:
        self.run = run
        self.fail = fail


class Worker:
    """One background thread running queued jobs in order (see Note [The runtime cannot deadlock])."""

    def __init__(self) -> None:
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._atexit = False
        self._current: _Job | None = None

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._current = job
            try:
                job.run()
            except BaseException as e:  # a job's error fails its results, never the thread
                try:
                    job.fail(e)
                except BaseException:  # noqa: S110 - the thread must survive a failing fail()
                    pass
            finally:
                self._current = None
            # Drop the finished job now, not at the next get(): a failed job's error (and its
            # traceback, which holds the caller's frames and tensors) must not outlive the raise.
            job = None

    def on_worker_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                dead = self._current
                self._current = None
                if dead is not None:
                    dead.fail(RuntimeError("the lazy execution worker thread died while running it"))
                self._thread = threading.Thread(target=self._loop, name="lazy-exec", daemon=True)
                self._thread.start()
                if not self._atexit:
                    self._atexit = True
                    atexit.register(self.shutdown)

    def submit(self, run: Callable[[], None], fail: Callable[[BaseException], None]) -> None:
        """Queue ``run()``; if it raises (or the worker dies in it), ``fail(error)`` is called."""
        self._ensure_thread()
        self._queue.put(_Job(run, fail))

    def wait_for(self, event: threading.Event, what: str) -> None:
        """Wait for ``event``, set by a job; raise if the worker died or ``LAZY_WAIT_TIMEOUT`` passed."""
        if self.on_worker_thread() and not event.is_set():
            raise RuntimeError(f"lazy_core internal error: the worker waits for its own queued job ({what})")
        timeout = config.get("LAZY_WAIT_TIMEOUT")
        start = time.monotonic()
        while not event.wait(_POLL):
            thread = self._thread
            if thread is None or not thread.is_alive():
                # The job may have died with the thread: fail it, restart for the rest.
                self._ensure_thread()
            if timeout and time.monotonic() - start > timeout:
                raise LazyExecutionError(
                    f"lazy execution ({what}) did not finish within LAZY_WAIT_TIMEOUT={timeout} s "
                    "(it is still queued or running)", what)

    def run_sync(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the worker after everything queued, and wait for it."""
        if self.on_worker_thread():
            return fn()
        box: dict[str, Any] = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = fn()
            except BaseException as e:  # re-raised on the caller's thread
                box["error"] = e
            done.set()

        def fail(e: BaseException) -> None:  # the worker died in run()
            box.setdefault("error", e)
            done.set()

        self.submit(run, fail)
        self.wait_for(done, getattr(fn, "__name__", "a call on the worker"))
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
        after ``mark_step()``. A failure nobody was told about is printed.
        """
        thread = self._thread
        if thread is not None and thread.is_alive():
            self._queue.put(None)
            thread.join(timeout)
        for batch in take_failures():
            print(f"lazy_core: warning: an execution failed and its error was never raised "
                  f"(no read or barrier after it): {batch.error()}", file=sys.stderr)
