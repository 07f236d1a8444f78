"""Step closures: run Python after the next ``mark_step()``, without a sync inside the step.

Logging ``loss.item()`` every step forces the pending graph to run early
(a graph break). A closure added during the step runs after the step's graph
has executed, when its tensor arguments are already device data, so reading
them costs a transfer, not an extra graph (PyTorch/XLA's
``add_step_closure``)::

    lazy_core.add_step_closure(lambda loss: print(loss.item()), (loss,))
    lazy_core.mark_step()          # runs the step, then the closure

Closures run in the order they were added. An exception in a closure
propagates out of ``mark_step()`` after the closures after it have run (the
first exception is raised; the others are attached to it as notes). When
the step's own execution fails (``LAZY_ASYNC=0``: at that ``mark_step()``),
the step is rolled back and its closures are dropped with it.
``run_async=True`` closures run on one background thread, in order; since
tracing is not thread-safe, their lazy tensor arguments are copied to CPU
tensors on the calling thread first, and an exception is re-raised at the
next ``add_step_closure``, ``mark_step`` or ``wait()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torch.utils import _pytree as pytree

from .executor import executor

__all__ = ["add_step_closure", "running", "wait"]

_pending: list[tuple[Callable[..., Any], tuple, bool]] = []
_running = threading.local()
_pool: ThreadPoolExecutor | None = None
_futures: list[Future] = []


def add_step_closure(fn: Callable[..., Any], args: Sequence[Any] = (), run_async: bool = False) -> None:
    """Call ``fn(*args)`` after the next ``mark_step()`` has executed the step."""
    _raise_async_errors(block=False)
    _pending.append((fn, tuple(args), run_async))


def running() -> bool:
    """Whether step closures are running now (the step guard does not check them)."""
    return getattr(_running, "value", False)


def wait() -> None:
    """Block until the asynchronous closures finished; re-raise the first error."""
    _raise_async_errors(block=True)


def _raise_async_errors(block: bool) -> None:
    done = [f for f in _futures if block or f.done()]
    for f in done:
        _futures.remove(f)
    for f in done:
        error = f.exception()
        if error is not None:
            raise error


def _host_copies(args: tuple) -> tuple:
    from .tensor import LazyTensor

    lazies = [a for a in pytree.tree_leaves(args) if isinstance(a, LazyTensor)]
    if not lazies:
        return args
    hosts = executor().to_host_many(lazies, "closure")
    table = {id(t): h.detach().clone() for t, h in zip(lazies, hosts)}
    return pytree.tree_map_only(LazyTensor, lambda t: table[id(t)], args)


def _run_after_step() -> None:
    global _pool
    _raise_async_errors(block=False)
    if not _pending:
        return
    batch = list(_pending)
    _pending.clear()
    _running.value = True
    first: BaseException | None = None
    try:
        for fn, args, run_async in batch:
            # One closure's error must not drop the closures after it (a later one may
            # save the checkpoint); the first error is raised when all have run.
            try:
                if run_async:
                    if _pool is None:
                        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lazy_step_closure")
                    _futures.append(_pool.submit(fn, *_host_copies(args)))
                else:
                    fn(*args)
            except Exception as e:
                if first is None:
                    first = e
                else:
                    first.add_note(f"a later step closure raised too: {type(e).__name__}: {e}")
    finally:
        _running.value = False
    if first is not None:
        raise first


def _drop_after_failed_step() -> None:
    _pending.clear()


executor().step_hooks.append(_run_after_step)
executor().failed_step_hooks.append(_drop_after_failed_step)
