"""GraphExecutor: the live-tensor registry, barriers, caching and execution.

At a barrier (``mark_step()``, or Python needing a value) the executor
collects the pending values of live tensors, builds one graph from them,
looks its key up in an LRU computation cache, asks the backend to lower and
compile it on a miss, executes it, and replaces each pending value by the
resulting device data, so nothing is ever computed twice.

A graph that fails to lower or compile still runs: it is interpreted op by
op on the CPU (``eager`` backend semantics), with a warning naming the
failing op and user line, unless ``LAZY_STRICT=1`` asks for the error.
"""

from __future__ import annotations

import functools
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import torch

from . import (
    collective_queue,
    config,
    gc_debt,
    host_constants,
    host_eval,
    metrics,
    source_location,
    tiering,
    view_reads,
)
from .async_exec import (
    LazyExecutionError,
    PendingBatch,
    PendingData,
    Worker,
    enabled_by_default,
    raise_failures,
    resolve,
)
from .backend import BackendData, BackendImpl, CompileError
from .donation import dead_inputs, plan_donations
from .dynamic_shapes import DynamicShapes
from .graph import ArgumentLayout, LazyGraph, build_graph
from .ir import DeviceData, Output, ScalarParam
from .registry import active_backend

if TYPE_CHECKING:
    from .tensor import LazyTensor
    from .views import Storage


# Note [Tracing from several threads]
# A barrier assumes no op is half-recorded: it executes every live storage's
# pending value and then releases input buffers no storage holds (dead
# inputs). An op being recorded on another thread may hold a pending value
# that is not in a storage yet; if a barrier ran in between, that value's
# inputs were released and its later execution read ``None`` buffers
# ("'NoneType' object has no attribute 'handle'", 3 runs in 5 with two
# threads training two models). So recording an op (``__torch_dispatch__``
# and the ``Lazy``-key factories) and every barrier hold one re-entrant lock:
# threads may trace at once, interleaved op by op. A barrier on one thread
# runs the other threads' pending work too (values stay right: it only
# materializes them early). The worker never takes the lock.
TRACE_LOCK = threading.RLock()

_F = TypeVar("_F", bound=Callable[..., Any])


def traced(fn: _F) -> _F:
    """``fn`` run under :data:`TRACE_LOCK` (a tracing entry point)."""

    @functools.wraps(fn)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with TRACE_LOCK:
            return fn(*args, **kwargs)

    return locked  # type: ignore[return-value]


class _CacheEntry:
    __slots__ = ("executable", "computation", "eager", "graph_name", "error", "layout", "loaded", "first_sight")

    def __init__(self, executable: Any, computation: Any, eager: bool, graph_name: str, error: str | None = None,
                 loaded: bool = False, first_sight: bool = False):
        self.executable = executable
        #: Loaded from the backend's persistent cache (nothing was lowered or compiled).
        self.loaded = loaded
        #: A graph seen for the first time, interpreted this once and not cached (lazy_core.tiering).
        self.first_sight = first_sight
        self.computation = computation
        self.eager = eager
        self.graph_name = graph_name
        self.error = error
        #: The graph's argument layout (the same for every graph with this key).
        self.layout: ArgumentLayout | None = None


def _donation_enabled() -> bool:
    return bool(config.get("LAZY_DONATE"))


#: Called as hook(graph, error) when a graph fails to lower or compile and is about to run
#: eagerly instead; a hook may raise to refuse that (``lazy_core.step(full_graph=True)`` does).
compile_failure_hooks: list = []


def _strict() -> bool:
    return bool(config.get("LAZY_STRICT"))


class GraphExecutor:
    """One per process. Threads may trace at once (Note [Tracing from several threads])."""

    def __init__(self, cache_size: int | None = None) -> None:
        # Weak references to every tracked storage, in creation (seq) order. A
        # plain list: appending a weakref is far cheaper per traced op than a
        # WeakValueDictionary insert; dead entries are dropped at each barrier
        # and whenever the list doubles.
        self._live: list[weakref.ref[Storage]] = []
        self._prune_at = 4096
        self._seq = 0
        self._cache: OrderedDict[tuple, _CacheEntry] = OrderedDict()
        self._dynamic = DynamicShapes(lambda exe, comp: _CacheEntry(exe, comp, False, comp.func_name),
                                      self._compile_plan)
        #: Graphs seen so far, so a graph seen once runs interpreted (lazy_core.tiering).
        self._sights = tiering.FirstSights()
        self._cache_backend: BackendImpl | None = None
        self.cache_size = cache_size or int(config.get("LAZY_CACHE_SIZE"))
        self._last: Any = None
        self._last_graph: LazyGraph | None = None
        #: mark_step() queues execution on a worker and returns (LAZY_ASYNC=0: wait).
        self.async_mode = enabled_by_default()
        self._worker = Worker()
        self._reason = threading.local()
        self._warned: set[str] = set()
        self.hooks: list[Any] = []
        # Diagnostics hook points (lazy_core.diagnostics, step_guard, closures, graph_limits):
        # pre_hooks(graph, reason, is_cache_miss) run before compiling/executing and may raise
        # to stop the execution; step_hooks() run at the end of mark_step(); track_hooks()
        # run every ``track_hook_every`` value changes (the graph-size safety net).
        self.pre_hooks: list[Any] = []
        self.step_hooks: list[Any] = []
        #: Run instead of step_hooks when mark_step()'s own execution failed (LAZY_ASYNC=0).
        self.failed_step_hooks: list[Any] = []
        self.track_hooks: list[Any] = []
        self.track_hook_every = 256
        self._tracks = 0
        #: Reads answered by ``host_eval.cone_on_host`` since pending work last ran. The count
        #: depends only on what was recorded since then, never on earlier calls or steps, so a
        #: program cuts its graphs at the same reads every time it runs (generate()'s prefill
        #: graph stays one family from its first call on).
        self._cone_reads = 0
        #: read_hook(executor, tensors, reason) replaces to_host_many (lazy_core.checks
        #: reads its device-side check flags with the values); it calls _to_host_many.
        self.read_hook: Any = None
        #: backend_change_hooks() run before live values move to a new backend
        #: (lazy_core.checks settles its accumulator there).
        self.backend_change_hooks: list[Any] = []

    # -- registry ----------------------------------------------------------------
    def track(self, storage: Storage) -> None:
        if storage.seq < 0:
            self._seq += 1
            storage.seq = self._seq
            live = self._live
            live.append(weakref.ref(storage))
            if len(live) > self._prune_at:
                self.live_storages()
        if self.track_hooks:
            self._tracks += 1
            if self._tracks >= self.track_hook_every:
                self._tracks = 0
                for hook in self.track_hooks:
                    hook()

    def live_storages(self) -> list[Storage]:
        """Every live storage in creation order (and drop the dead references)."""
        source_location.forget_frames()  # its frame's locals would count as live
        alive: list[Storage] = []
        refs: list[weakref.ref[Storage]] = []
        for ref in self._live:
            s = ref()
            if s is not None:
                alive.append(s)
                refs.append(ref)
        self._live = refs
        self._prune_at = max(4096, 2 * len(refs))
        return alive

    def pending_storages(self) -> list[Storage]:
        return [s for s in self.live_storages() if not s.value.node.is_leaf()]

    # -- reasons (for metrics and diagnostics) -------------------------------------
    @contextmanager
    def reason(self, why: str) -> Iterator[None]:
        old = getattr(self._reason, "value", None)
        self._reason.value = why
        try:
            yield
        finally:
            self._reason.value = old

    def _current_reason(self, default: str) -> str:
        return getattr(self._reason, "value", None) or default

    # -- barriers ----------------------------------------------------------------
    @traced
    def mark_step(self) -> None:
        """Execute every live pending tensor in one graph.

        Then raise the failure of an earlier queued execution that nobody was
        told about yet (Note [Failed executions are transactions]); this
        step is queued by then, and the failed one was rolled back.
        """
        gc_debt.tune_young_generation()  # once: a step's IR objects die young (lazy_core.gc_debt)
        live = self.live_storages()
        pending = [s for s in live if not s.value.node.is_leaf()]
        self._cone_reads = 0
        if pending:
            try:
                self._execute(pending, [], "mark_step", live)
            except LazyExecutionError:
                # LAZY_ASYNC=0: the step failed and was rolled back; it did not happen.
                for hook in self.failed_step_hooks:
                    hook()
                raise
        metrics.counter_add("mark_step")
        for hook in self.step_hooks:
            hook()
        raise_failures()

    def to_host(self, tensor: LazyTensor, reason: str) -> torch.Tensor:
        return self.to_host_many([tensor], reason)[0]

    @traced
    def to_host_many(self, tensors: list[LazyTensor], reason: str) -> list[torch.Tensor]:
        """CPU copies of ``tensors``, running one graph for all pending ones."""
        if self.read_hook is not None:
            return self.read_hook(self, tensors, reason)
        return self._to_host_many(tensors, reason)

    def _to_host_many(self, tensors: list[LazyTensor], reason: str) -> list[torch.Tensor]:
        only_sharing = reason == "sync" or reason.startswith("collective")
        reason = self._current_reason(reason)
        values = [t._lz_value() for t in tensors]
        pending = [v for v in values if not v.node.is_leaf()]
        views = self._host_views(pending, only_sharing)
        if views is not None:
            # Views of device data (a gradient after a step): download and view on the host.
            metrics.counter_add("host_view_read")
            hosts = []
            for v in values:
                leaf, steps = views.get((id(v.node), v.index), (v.node, []))
                hosts.append(view_reads.apply(steps, self._download(leaf)) if steps else self._download(leaf))
            return hosts
        if pending:
            # A value read runs every live pending tensor, as mark_step() does,
            # so a loop that reads a value each iteration (generate()'s stopping
            # check) makes the same graph every iteration. With only the tensors
            # sharing work with the read, a value computed for the next
            # iteration (the attention mask grown by one) was pending in every
            # other graph and two programs alternated, each compiled apart.
            # sync() and collectives keep to the tensors sharing work: sync()
            # promises just its tensors, and a collective's segment must not
            # pull in the backward still being recorded after it.
            storages = self._sharing_storages(pending) if only_sharing else self.pending_storages()
            if (not only_sharing and self._cone_reads < host_eval.MAX_CONE_READS
                    and host_eval.cone_on_host(pending, reason)
                    and not host_eval.cone_on_host([s.value for s in storages], reason)):
                # The read's own small cone, on the host; the rest, which the host cannot
                # compute, stays pending (host_eval). Pending work the host can compute whole
                # runs whole, as before: it leaves nothing behind to reorder the next graph.
                self._cone_reads += 1
                metrics.counter_add("host_eval_cone")
                storages = []
            else:
                self._cone_reads = 0
            results = self._execute(storages, pending, reason)
            for t, v in zip(tensors, values):
                if not v.node.is_leaf():
                    t._lz_set_materialized(results[id(v.node), v.index])
            values = [t._lz_value() for t in tensors]
        return [self._download(v.node) for v in values]

    def _host_views(self, pending: list[Output], only_sharing: bool) -> dict | None:
        """Per pending value, its device-data leaf and view chain (``view_reads``), when every
        one is such a view and answering on the host leaves no pending work it would have run."""
        if not pending or not host_eval.enabled():
            return None  # LAZY_HOST_EVAL=0: the backend answers every read (the test suite's default)
        views = {}
        for v in pending:
            found = view_reads.chain(v)
            if found is None or not view_reads.worth_downloading(found[0], v):
                return None
            views[id(v.node), v.index] = found
        if not only_sharing and self.pending_storages():
            return None  # a read runs every pending tensor (see below); keep that so
        return views

    def _download(self, node: Any) -> torch.Tensor:
        """The CPU value of a leaf, a copy the caller owns."""
        if isinstance(node, ScalarParam):
            return torch.tensor(node.value, dtype=node.metas[0].dtype)
        assert isinstance(node, DeviceData)
        if node.host is not None:
            return node.host.clone()  # the caller owns what it reads
        if node.data is None:
            raise RuntimeError(
                "lazy_core internal error: a tensor reads device data released after a step "
                "(lazy_core.donation.dead_inputs found nothing holding it); please report this"
            )
        data = resolve(node.data)  # raises a failed execution's error (once per failure)
        backend = active_backend()
        with metrics.timed("transfer_to_host"):
            host = self._worker.run_sync(lambda d=data: backend.to_host(d))
        metrics.counter_add("transfer_to_host_bytes", host.numel() * host.element_size())
        if host_eval.small(host):
            host_eval.remember(node, host.clone())
        return host

    def _sharing_storages(self, roots: list[Output]) -> list[Storage]:
        """Live pending storages whose graphs share work (a non-leaf node) with ``roots``."""
        target: set[int] = set()
        stack = [o.node for o in roots]
        while stack:
            n = stack.pop()
            if id(n) in target or n.is_leaf():
                continue
            target.add(id(n))
            stack.extend(o.node for o in n.operands)
        reaches: dict[int, bool] = {}

        def touches(node: Any) -> bool:
            # Iterative DFS with memo: does any non-leaf node under ``node`` lie in target?
            todo = [node]
            order = []
            while todo:
                n = todo.pop()
                if id(n) in reaches or n.is_leaf():
                    continue
                if id(n) in target:
                    reaches[id(n)] = True
                    continue
                reaches[id(n)] = False
                order.append(n)
                todo.extend(o.node for o in n.operands)
            for n in reversed(order):
                if any(reaches.get(id(o.node), False) for o in n.operands):
                    reaches[id(n)] = True
            return reaches.get(id(node), False)

        return [s for s in self.pending_storages() if touches(s.value.node)]

    # -- execution -------------------------------------------------------------------
    def _execute(
        self, storages: list[Storage], extra: list[Output], reason: str, live: list[Storage] | None = None
    ) -> dict[tuple[int, int], Output]:
        """Run the graph of ``storages``' pending values (plus ``extra`` outputs).

        ``live`` (every live storage) is passed by ``mark_step()`` alone: there
        every live pending tensor is in the graph (the paper's full barrier),
        so inputs no live tensor holds are dead after it runs and may be
        donated and released.
        """
        backend = active_backend()
        if self._cache_backend is not backend:
            self._cache.clear()
            self._dynamic.clear()
            self._sights.clear()
            self._cache_backend = backend
        roots: list[Output] = []
        # Per root, the storage's last good value (Storage.previous) to roll back to.
        previous: list[Any] = []
        seen: set[tuple[int, int]] = set()
        for s in sorted(storages, key=lambda s: s.seq):
            out = s.value
            k = (id(out.node), out.index)
            if k not in seen and not out.node.is_leaf():
                seen.add(k)
                roots.append(out)
                previous.append(s.previous)
        for out in extra:
            k = (id(out.node), out.index)
            if k not in seen and not out.node.is_leaf():
                seen.add(k)
                roots.append(out)
                previous.append(None)
        if not roots:
            return {}
        # Constant fills are made on the host (host_constants: IREE miscompiles a graph returning one).
        produced: dict[tuple[int, int], Output] = {}
        computed, constant = host_constants.split(roots)
        if constant:
            device = backend.default_device()
            for i in constant:
                out = roots[i]
                value = host_constants.make(out)
                leaf = DeviceData(backend.make_backend_data(value, device), out.meta, out.node.location)
                host_eval.remember(leaf, value)
                produced[id(out.node), out.index] = Output(leaf)
            roots, previous = [roots[i] for i in computed], [previous[i] for i in computed]
            if not roots:
                self._assign(storages, produced)
                return produced
        with metrics.timed("build_graph"):
            graph = build_graph(roots)
        metrics.counter_add(f"execute_reason::{reason.split(' ')[0]}")
        values = host_eval.evaluate(graph) if host_eval.eligible(graph, reason) else None
        if values is not None:
            # Small values the host holds, read by Python: no compile (lazy_core.host_eval).
            for hook in self.pre_hooks:
                hook(graph, reason, False)  # may raise (a full_graph step): nothing assigned yet
            metrics.counter_add("host_eval")
            from . import diagnostics

            if diagnostics.explaining():  # graph.name hashes every node's text
                diagnostics.note(f"ran {graph.name} ({len(graph.nodes)} ops) on the host for {reason}: a small "
                                 "graph of values the host holds (lazy_core.host_eval; LAZY_HOST_EVAL=0: off); "
                                 "not printed again for this graph", once=("host_eval", graph.key))
            self._last_graph = graph
            device = backend.default_device()
            for out, value in zip(roots, values):
                leaf = DeviceData(backend.make_backend_data(value, device), out.meta, out.node.location)
                host_eval.remember(leaf, value)
                produced[id(out.node), out.index] = Output(leaf)
            self._assign(storages, produced)
            return produced
        dead = dead_inputs(graph, live) if live is not None else []
        donated = self._donations(backend, graph, live, dead)
        key = (graph.key, tuple(donated.items())) if donated else graph.key
        entry = self._cache.get(key)
        sample = None
        if entry is None:
            # Another size of a graph compiled with dynamic dims: no compile (lazy_core.dynamic_shapes).
            entry, sample = self._dynamic.reuse(backend, graph, donated)
            if entry is not None:
                self._remember(key, entry)
        first_sight = entry is None and self._first_sight(backend, graph, key, donated)
        for hook in self.pre_hooks:
            # A first sight is not compiled (diagnostics count compiles from the cache misses).
            hook(graph, reason, entry is None and not first_sight)
        if entry is None:
            metrics.counter_add("cache_miss")
            entry = self._dynamic.compile(
                backend, graph, donated, sample,
                lambda: self._compile(backend, graph, donated, interpret_if_new=first_sight),
                lambda plan: self._compile_plan(backend, graph, donated, plan))
            if entry.first_sight:
                self._note_first_sight(graph, reason)
            else:
                self._remember(key, entry)
                if not entry.loaded:  # a disk-cache load imports next to nothing (lazy_core.gc_debt)
                    gc_debt.after_compile()
        elif sample is None:
            metrics.counter_add("cache_hit")
            self._cache.move_to_end(key)
        device = backend.default_device()
        # Device data in order, then the scalar parameters packed into one
        # float64 and one int64 tensor (graph.ArgumentLayout): two small
        # uploads per step instead of one per scalar.
        if entry.layout is None:
            entry.layout = graph.argument_layout
        data_args, packs = entry.layout.arguments(graph.inputs)
        metrics.counter_add("execute")
        metrics.counter_add("graph_nodes", len(graph.nodes))
        self._last = entry.computation
        self._last_graph = graph
        n_roots = len(roots)

        def run() -> list[Any]:
            # On the worker thread: wait for inputs still being computed, run.
            real = [resolve(a, report=False) for a in data_args]
            real += [backend.make_backend_data(torch.tensor(values, dtype=dtype), device) for values, dtype in packs]
            with metrics.timed("execute"):
                if entry.eager:
                    results = self._run_eager(backend, graph, real, device)
                else:
                    results = backend.execute_computation(entry.executable, real, device)
            if len(results) != n_roots:
                raise RuntimeError(
                    f"backend {backend.name!r} returned {len(results)} results for a graph with {n_roots} outputs"
                )
            return results

        # entry.graph_name: graph.name would re-hash every node's text on each cache hit.
        # The user's line: a queued execution's error surfaces later, at a read or barrier.
        site = source_location.user_stack(1)
        where = f" at {site[0]}" if site else ""
        fallbacks = self._fallbacks(roots, previous, data_args, donated)
        # The placeholders exist before the job is queued (Note [The runtime cannot deadlock]).
        batch = PendingBatch(f"{reason}{where}, graph {entry.graph_name}", n_roots, self._worker, fallbacks)
        # Taken before queueing: a job that finishes first hands them out and forgets them.
        results: list[Any] = batch.placeholders()
        self._worker.submit(lambda: batch.set(run()), batch.fail)
        wait = not (self.async_mode and reason.startswith("mark_step"))
        # The execution holds its arguments (data_args); release dead inputs'
        # buffers from the graph's nodes, which stay reachable from
        # last_graph() until the next execution.
        for leaf in dead:
            leaf.data = None
        if wait:
            batch.wait()
            # The values themselves (or the rolled-back ones), not placeholders to resolve at each use.
            results = [p._value or (p._fallback if isinstance(p._fallback, BackendData) else p) for p in results]
        for out, data in zip(roots, results):
            produced[id(out.node), out.index] = Output(DeviceData(data, out.meta, out.node.location))
        self._assign(storages, produced)
        if wait:
            batch.raise_if_failed()
        for hook in self.hooks:
            hook(graph, entry, reason)
        return produced

    @staticmethod
    def _assign(storages: list[Storage], produced: dict[tuple[int, int], Output]) -> None:
        for s in storages:
            new = produced.get((id(s.value.node), s.value.index))
            if new is not None:
                s.value = new
                s.previous = None  # the placeholder holds it now (a fallback) until the run ends

    @staticmethod
    def _fallbacks(roots: list[Output], previous: list[Any], data_args: list[Any], donated: dict[int, int]) -> list[Any]:
        """Each root's last good value, for a failed execution to roll back to.

        The device data its storage held before this step's updates
        (``previous[i]``, a ``Storage.previous``); None for results with no
        earlier value, a reason when that buffer is donated to this very
        execution (after a failure it may hold anything).
        """
        given = {id(data_args[k]) for k in donated} if donated else ()
        out: list[Any] = []
        for root, get in zip(roots, previous):
            prev = get() if get is not None else None
            data = prev.data if isinstance(prev, DeviceData) else None
            if data is not None:
                if id(data) in given:
                    data = "its buffer was donated to the failed execution (LAZY_DONATE=0 keeps it)"
                elif prev.metas[0][:2] != root.meta[:2]:  # shape, dtype
                    data = None  # not the same tensor type: not a value this tensor can take back
            out.append(data)
        return out

    def _donations(
        self, backend: BackendImpl, graph: LazyGraph, live: list[Storage] | None, dead: list[DeviceData]
    ) -> dict[int, int]:
        """The buffer-donation plan for this execution, or {} (lazy_core.donation).

        ``live`` is given only at ``mark_step()``, where every live pending
        tensor is in the graph; only backends that take ``donated=`` get a
        plan. ``LAZY_DONATE=0`` turns it off.
        """
        if live is None or not backend.supports_donation or not _donation_enabled():
            return {}
        plan = plan_donations(graph, live, dead)
        if plan:
            data = [leaf.data for leaf in graph.inputs if isinstance(leaf, DeviceData)]
            # A queued result (PendingData) is a fresh buffer of the backend's own.
            plan = {k: r for k, r in plan.items() if isinstance(data[k], PendingData) or backend.can_donate(data[k])}
        return plan

    def _remember(self, key: Any, entry: _CacheEntry) -> None:
        self._cache[key] = entry
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    @staticmethod
    def _compile_plan(backend: BackendImpl, graph: LazyGraph, donated: dict[int, int] | None, plan: Any) -> _CacheEntry:
        """A dynamic-shape plan (lazy_core.dynamic_shapes) lowered and compiled.
        Raises on failure: the caller compiles the graph statically instead."""
        extra = {"donated": [donated]} if donated else {}
        with metrics.timed("lower"):
            computation = backend.lower_dynamic(plan, graph)
        with metrics.timed("compile"):
            [executable] = backend.compile([computation], **extra)
        metrics.counter_add("compile")
        return _CacheEntry(executable, computation, False, computation.func_name)

    def _first_sight(self, backend: BackendImpl, graph: LazyGraph, key: Any, donated: dict[int, int]) -> bool:
        """Whether ``graph``, an in-memory cache miss, runs interpreted as a graph never seen
        (lazy_core.tiering); remembers it as seen either way."""
        if not tiering.enabled(backend):
            return False
        if self._dynamic.enabled(backend):
            # The same program at other sizes counts as seen: it compiles and goes dynamic.
            key = ("family", graph.family_key, tuple(sorted(donated.items())))
        return self._sights.first(key)

    @staticmethod
    def _note_first_sight(graph: LazyGraph, reason: str) -> None:
        metrics.counter_add("interpreted_first_sight")
        from . import diagnostics

        if diagnostics.explaining():
            diagnostics.note(f"ran {graph.name} ({len(graph.nodes)} ops) op by op on the CPU for {reason}: "
                             "seen for the first time, it compiles if it runs again (lazy_core.tiering; "
                             "LAZY_TIERED=0: compile at once)")

    def _compile(self, backend: BackendImpl, graph: LazyGraph, donated: dict[int, int] | None = None,
                 interpret_if_new: bool = False) -> _CacheEntry:
        """The graph loaded from the persistent cache, or lowered and compiled; or, when that fails,
        interpreted (graph fallback). ``interpret_if_new``: not in the persistent cache, it is
        interpreted this once instead of compiled (a first sight, lazy_core.tiering)."""
        # ``donated`` is only passed on to backends when non-empty, so backends
        # without donation keep their one-argument signatures.
        extra = {"donated": donated} if donated else {}
        try:
            # A persistent cache keyed on the graph's stable hash answers before
            # any lowering: a second process gets its executables for the cost
            # of hashing the graph and reading a file.
            with metrics.timed("load_executable"):
                hit = backend.load_executable(graph, **extra)
            if hit is not None:
                executable, computation = hit
                metrics.counter_add("persistent_cache_hit")  # loaded, not compiled
                return _CacheEntry(executable, computation, False, graph.name, loaded=True)
            if interpret_if_new:
                return _CacheEntry(None, graph, True, graph.name, first_sight=True)
            with metrics.timed("lower"):
                computation = backend.lower(graph)
            with metrics.timed("compile"):
                if donated:
                    [executable] = backend.compile([computation], donated=[donated])
                else:
                    [executable] = backend.compile([computation])
            metrics.counter_add("compile")
            with metrics.timed("store_executable"):
                backend.store_executable(graph, computation, executable, **extra)
            return _CacheEntry(executable, computation, False, graph.name)
        except Exception as e:
            if _strict():
                raise
            for hook in compile_failure_hooks:
                hook(graph, e)
            where = getattr(e, "location", None)
            repro = getattr(e, "repro_path", None)
            msg = str(e).strip().splitlines()
            first = msg[0] if msg else type(e).__name__
            key = f"{type(e).__name__}:{first}"
            metrics.counter_add("fallback::compile_error")
            if key not in self._warned:
                self._warned.add(key)
                warnings.warn(
                    f"lazy backend {backend.name!r} could not compile graph {graph.name}"
                    f"{' at ' + where if where else ''}: {first}"
                    f"{' (repro: ' + repro + ')' if repro else ''}. Running it eagerly on the CPU "
                    "instead; set LAZY_STRICT=1 to raise.",
                    RuntimeWarning,
                    stacklevel=4,
                )
            if not isinstance(e, CompileError | NotImplementedError | RuntimeError | ValueError):
                warnings.warn(f"unexpected {type(e).__name__} while compiling: {e}", RuntimeWarning, stacklevel=4)
            return _CacheEntry(None, graph, True, graph.name, error=first)

    def _run_eager(self, backend: BackendImpl, graph: LazyGraph, args: list, device: Any) -> list:
        # Tensors cross host<->device here too: counted like upload()/to_host_many().
        from .eager_backend import interpret

        hosts = []
        for a in args:
            with metrics.timed("transfer_to_host"):
                hosts.append(backend.to_host(a))
            metrics.counter_add("transfer_to_host_bytes", hosts[-1].numel() * hosts[-1].element_size())
        results = interpret(graph, hosts)
        out = []
        for r in results:
            with metrics.timed("transfer_to_device"):
                out.append(backend.make_backend_data(r.contiguous(), device))
            metrics.counter_add("transfer_to_device_bytes", r.numel() * r.element_size())
        return out

    # -- misc --------------------------------------------------------------------------
    def wait(self) -> None:
        """Block until every collective in flight and every queued execution has finished;
        raise a failure not yet raised."""
        collective_queue.drain()
        self._worker.drain()
        raise_failures()

    def last_computation(self) -> Any:
        return self._last

    def last_graph(self) -> LazyGraph | None:
        return self._last_graph

    def cache_len(self) -> int:
        return len(self._cache)

    def clear_cache(self) -> None:
        self._cache.clear()
        self._dynamic.clear()
        self._sights.clear()

    @traced
    def on_backend_change(self, old: BackendImpl, new: BackendImpl) -> None:
        """Move live tensors to the new backend (through the host), all or nothing.

        Every tensor is copied before any is replaced, so an error (a failed
        pending execution, a backend that cannot take a dtype) leaves every
        tensor on the old backend, still readable, and the old backend
        active. A tensor poisoned by an earlier failed execution stays
        poisoned (it has no value to move).
        """
        self._worker.drain()
        raise_failures()
        pending = self.pending_storages()
        if pending:
            self._execute(pending, [], "backend_change")
        for hook in self.backend_change_hooks:
            hook()
        moves: list[tuple[Storage, Output]] = []
        device = new.default_device()
        for s in self.live_storages():
            node = s.value.node
            if not isinstance(node, DeviceData) or node.data is None:
                continue
            try:
                data = resolve(node.data, report=False)
            except LazyExecutionError:
                continue  # poisoned: reading it keeps raising its execution's error
            host = self._worker.run_sync(lambda d=data: old.to_host(d))
            moved = new.make_backend_data(host, device)
            moves.append((s, Output(DeviceData(moved, node.metas[0], node.location))))
        for s, value in moves:
            s.value = value
            s.previous = None
        self._cache.clear()
        self._dynamic.clear()
        self._sights.clear()


_executor: GraphExecutor | None = None


def executor() -> GraphExecutor:
    global _executor
    if _executor is None:
        _executor = GraphExecutor()
    return _executor
