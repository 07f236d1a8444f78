"""Tiered execution: a graph seen for the first time runs op by op; it compiles when it recurs.

A compile costs far more than one run (iree-compile: ~0.4 s for the smallest
graph, ~15 s for a tiny BERT training step on 2 cores), and many graphs run
once: a training loop's first step (it makes the optimizer's state, so it is
not the steady step's graph), a ``.item()`` in setup code, an evaluation run
once, a batch whose shape never comes back. Compiling each of them on first
sight doubled the time before a training loop reached its steady step. JIT
compilers for dynamic languages solve the same problem with tiers (an
interpreter first, the optimizing compiler for code that recurs); here the
interpreter is ``eager_backend.interpret``, PyTorch's own CPU kernels, which is
also what the executor falls back on when a compile fails.

Policy (``GraphExecutor._execute``): on an in-memory cache miss that no dynamic
plan admits, a graph whose *tier key* was never seen is looked up in the
backend's persistent cache (a warm process loads what an earlier one
compiled); if it is not there it runs interpreted (counter
``interpreted_first_sight``) and its key is remembered. The second sight
compiles it as before. The tier key is the graph's family key on backends with
dynamic shapes (the same program at other sizes counts as seen, so a loop over
ever-new batch sizes still compiles and goes dynamic) and its cache key
elsewhere.

Only backends whose memory is the host's (``BackendImpl.host_memory``:
reference, iree-cpu) do this by default: on a GPU, the interpreter would move
every argument through the host. ``LAZY_STRICT`` (compile failures must be
seen) and ``LAZY_DUMP_DIR`` (every graph's MLIR is wanted) turn the default off;
``LAZY_TIERED=1``/``0`` overrides all of it. The test suite sets 0: its tests
check compiled code from the first run on.

Values: the first run computes with eager's kernels, later runs with the
compiled code, so they may differ in the last bits (as any two backends do);
which runs are interpreted depends only on the program, never on timing.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from . import config

#: Tier keys remembered (LRU): more than the computation cache holds, so a graph evicted
#: from it compiles again at once instead of running interpreted again.
_MAX_SEEN = 16384


def enabled(backend: Any) -> bool:
    """Whether a graph seen for the first time on ``backend`` runs interpreted."""
    chosen = config.get("LAZY_TIERED")
    if chosen is not None:
        return bool(chosen)
    if config.get("LAZY_STRICT") or config.get("LAZY_DUMP_DIR"):
        return False
    return bool(getattr(backend, "host_memory", False))


class FirstSights:
    """The tier keys of graphs seen so far (bounded, least recently seen dropped first)."""

    def __init__(self, limit: int = _MAX_SEEN) -> None:
        self._seen: OrderedDict[Any, None] = OrderedDict()
        self._limit = limit

    def first(self, key: Any) -> bool:
        """Whether ``key`` is seen for the first time; remembers it either way."""
        if key in self._seen:
            self._seen.move_to_end(key)
            return False
        self._seen[key] = None
        if len(self._seen) > self._limit:
            self._seen.popitem(last=False)
        return True

    def clear(self) -> None:
        self._seen.clear()
