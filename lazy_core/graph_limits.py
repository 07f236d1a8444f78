"""The graph-size safety net: cut a pending graph that grows without a barrier.

A loop that never calls ``mark_step()`` records ops forever: memory grows,
and the eventual graph is too big to hash, lower or compile in reasonable
time. LTC guards against it by executing a tensor's graph once it passes a
size (``TrimIrGraph``). Here, once more than ``LAZY_MAX_PENDING_NODES``
(default 100,000; ``0`` turns the net off) ops are pending, all pending work
runs early as one graph, the cut is counted (``graph_limit_cut``) and a
warning points at the user's loop that lacks ``mark_step()``. Results stay
correct: a cut is an ordinary execution, only earlier.

Counting the pending graph exactly costs a walk over it, so the check is
amortized: the executor calls us every few hundred value changes, the
number of ops recorded since the last execution bounds the pending size
from above, and only when that bound passes the limit is the graph walked.
"""

from __future__ import annotations

import ast
import functools
import warnings

from . import config, diagnostics, metrics, source_location
from .executor import executor
from .source_location import SourceLocation

__all__ = ["max_pending_nodes", "pending_nodes", "set_max_pending_nodes"]

_DEFAULT_LIMIT = 100_000


class _State:
    def __init__(self) -> None:
        self.limit = 0
        self.every = 256
        self.checks = 0  # track-hook calls since the last execution
        self.trace_base = 0  # trace_op counter at the last execution
        self.cutting = False
        self.warned: set[str] = set()


_st = _State()


def max_pending_nodes() -> int:
    """The current limit (0: the safety net is off)."""
    return _st.limit


def set_max_pending_nodes(limit: int | None) -> None:
    """Set the limit; ``None`` reads ``LAZY_MAX_PENDING_NODES`` again, ``0`` turns it off."""
    if limit is None:
        limit = int(config.get("LAZY_MAX_PENDING_NODES"))
    ex = executor()
    _st.limit = max(0, int(limit))
    # Check often enough that a cut happens within ~1/4 of the limit past it.
    _st.every = max(8, min(256, _st.limit // 4))
    ex.track_hook_every = _st.every
    if _st.limit and _on_track not in ex.track_hooks:
        ex.track_hooks.append(_on_track)
    elif not _st.limit and _on_track in ex.track_hooks:
        ex.track_hooks.remove(_on_track)
    _rebase()


def pending_nodes(stop: int | None = None) -> int:
    """How many ops the live pending tensors need (counting stops at ``stop``)."""
    seen: set[int] = set()
    stack = [s.value.node for s in executor().pending_storages()]
    while stack:
        n = stack.pop()
        if id(n) in seen or n.is_leaf():
            continue
        seen.add(id(n))
        if stop is not None and len(seen) >= stop:
            break
        stack.extend(o.node for o in n.operands)
    return len(seen)


def _rebase(pending: int = 0) -> None:
    _st.checks = pending // _st.every
    _st.trace_base = metrics.counter("trace_op") - pending


def _on_track() -> None:
    _st.checks += 1
    recorded = metrics.counter("trace_op") - _st.trace_base
    if max(_st.checks * _st.every, recorded) <= _st.limit or _st.cutting:
        return
    n = pending_nodes(stop=_st.limit + 1)
    if n <= _st.limit:
        # Most recorded ops are dead already: wait until enough new ones are recorded.
        _rebase(n)
        return
    _cut(n)


@functools.lru_cache(maxsize=64)
def _loops(filename: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, header text) of each for/while loop in a source file."""
    try:
        with open(filename) as f:
            source = f.read()
        tree = ast.parse(source, filename)
    except (OSError, SyntaxError, ValueError):
        return ()
    lines = source.splitlines()
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.For | ast.While | ast.AsyncFor):
            header = lines[node.lineno - 1].strip() if node.lineno <= len(lines) else ""
            out.append((node.lineno, node.end_lineno or node.lineno, header))
    return tuple(out)


def _enclosing_loop(stack: list[SourceLocation]) -> tuple[SourceLocation, str] | None:
    """The innermost loop around the innermost user frame that is inside a loop."""
    for loc in stack:
        inside = [lp for lp in _loops(loc.filename) if lp[0] <= loc.line <= lp[1]]
        if inside:
            start, _, header = max(inside, key=lambda lp: lp[0])
            return SourceLocation(loc.filename, start, loc.function), header
    return None


def _cut(pending: int) -> None:
    _st.cutting = True
    try:
        metrics.counter_add("graph_limit_cut")
        stack = source_location.user_stack(limit=32)
        op_site = diagnostics.format_location(stack[0]) if stack else None
        loop = _enclosing_loop(stack)
        if loop is not None:
            where = f"the loop at {diagnostics.format_location(loop[0])} (`{loop[1]}`)"
            key, (filename, lineno) = str(loop[0]), (loop[0].filename, loop[0].line)
        else:
            where = f"the code around {op_site}" if op_site else "your loop"
            key = op_site or "?"
            filename, lineno = (stack[0].filename, stack[0].line) if stack else ("<unknown>", 0)
        message = (
            f"lazy_core: {pending:,d}+ ops are pending without a mark_step(), over the limit of "
            f"{_st.limit:,d} (LAZY_MAX_PENDING_NODES); running them now as one graph "
            f"(cut #{metrics.counter('graph_limit_cut')}, counted as graph_limit_cut). "
            f"Call lazy_core.mark_step() once per iteration of {where}"
            f"{f'; the op that crossed the limit is at {op_site}' if op_site else ''}."
        )
        if key not in _st.warned:
            _st.warned.add(key)
            warnings.warn_explicit(message, RuntimeWarning, filename, lineno)
        ex = executor()
        pending_storages = ex.pending_storages()
        if pending_storages:
            ex._execute(pending_storages, [], "graph_limit")
    finally:
        _st.cutting = False
        _rebase()


def _after_execution(graph: object, entry: object, reason: str) -> None:
    # Only a full barrier empties the pending set; after a partial one (``.item()``)
    # the count since the last rebase is still an upper bound, so keep it.
    if reason in ("mark_step", "backend_change") and not _st.cutting:
        _rebase()


executor().hooks.append(_after_execution)
set_max_pending_nodes(None)
