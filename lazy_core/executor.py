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

import os
import threading
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch

from . import metrics, source_location
from .async_exec import PendingBatch, PendingData, Worker, enabled_by_default, resolve
from .backend import BackendImpl, CompileError
from .donation import dead_inputs, plan_donations
from .graph import ArgumentLayout, LazyGraph, build_graph
from .ir import DeviceData, Output, ScalarParam
from .registry import active_backend

if TYPE_CHECKING:
    from .tensor import LazyTensor
    from .views import Storage


class _CacheEntry:
    __slots__ = ("executable", "computation", "eager", "graph_name", "error", "layout")

    def __init__(self, executable: Any, computation: Any, eager: bool, graph_name: str, error: str | None = None):
        self.executable = executable
        self.computation = computation
        self.eager = eager
        self.graph_name = graph_name
        self.error = error
        #: The graph's argument layout (the same for every graph with this key).
        self.layout: ArgumentLayout | None = None


def _donation_enabled() -> bool:
    return os.environ.get("LAZY_DONATE", "1").strip().lower() not in ("0", "false", "no", "off", "")


def _strict() -> bool:
    return os.environ.get("LAZY_STRICT", "0") not in ("", "0", "false", "False")


class GraphExecutor:
    """One per process. Not thread-safe for concurrent tracing (like LTC)."""

    def __init__(self, cache_size: int | None = None) -> None:
        # Weak references to every tracked storage, in creation (seq) order. A
        # plain list: appending a weakref is far cheaper per traced op than a
        # WeakValueDictionary insert; dead entries are dropped at each barrier
        # and whenever the list doubles.
        self._live: list[weakref.ref[Storage]] = []
        self._prune_at = 4096
        self._seq = 0
        self._cache: OrderedDict[tuple, _CacheEntry] = OrderedDict()
        self._cache_backend: BackendImpl | None = None
        self.cache_size = cache_size or int(os.environ.get("LAZY_CACHE_SIZE", "1024"))
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
        self.track_hooks: list[Any] = []
        self.track_hook_every = 256
        self._tracks = 0

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
    def mark_step(self) -> None:
        """Execute every live pending tensor in one graph."""
        live = self.live_storages()
        pending = [s for s in live if not s.value.node.is_leaf()]
        if pending:
            self._execute(pending, [], "mark_step", live)
        metrics.counter_add("mark_step")
        for hook in self.step_hooks:
            hook()

    def to_host(self, tensor: LazyTensor, reason: str) -> torch.Tensor:
        return self.to_host_many([tensor], reason)[0]

    def to_host_many(self, tensors: list[LazyTensor], reason: str) -> list[torch.Tensor]:
        """CPU copies of ``tensors``, running one graph for all pending ones."""
        reason = self._current_reason(reason)
        values = [t._lz_value() for t in tensors]
        pending = [v for v in values if not v.node.is_leaf()]
        if pending:
            storages = self._sharing_storages(pending)
            results = self._execute(storages, pending, reason)
            for t, v in zip(tensors, values):
                if not v.node.is_leaf():
                    t._lz_set_materialized(results[id(v.node), v.index])
            values = [t._lz_value() for t in tensors]
        backend = active_backend()
        hosts = []
        for v in values:
            node = v.node
            if isinstance(node, ScalarParam):
                hosts.append(torch.tensor(node.value, dtype=node.metas[0].dtype))
                continue
            assert isinstance(node, DeviceData)
            if node.data is None:
                raise RuntimeError(
                    "lazy_core internal error: a tensor reads device data released after a step "
                    "(lazy_core.donation.dead_inputs found nothing holding it); please report this"
                )
            data = resolve(node.data)
            with metrics.timed("transfer_to_host"):
                host = self._worker.run_sync(lambda d=data: backend.to_host(d))
            metrics.counter_add("transfer_to_host_bytes", host.numel() * host.element_size())
            hosts.append(host)
        return hosts

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
            self._cache_backend = backend
        roots: list[Output] = []
        seen: set[tuple[int, int]] = set()
        for out in [s.value for s in sorted(storages, key=lambda s: s.seq)] + extra:
            k = (id(out.node), out.index)
            if k not in seen and not out.node.is_leaf():
                seen.add(k)
                roots.append(out)
        if not roots:
            return {}
        with metrics.timed("build_graph"):
            graph = build_graph(roots)
        metrics.counter_add(f"execute_reason::{reason.split(' ')[0]}")
        dead = dead_inputs(graph, live) if live is not None else []
        donated = self._donations(backend, graph, live, dead)
        key = (graph.key, tuple(donated.items())) if donated else graph.key
        entry = self._cache.get(key)
        for hook in self.pre_hooks:
            hook(graph, reason, entry is None)
        if entry is None:
            metrics.counter_add("cache_miss")
            entry = self._compile(backend, graph, donated)
            self._cache[key] = entry
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        else:
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
            real = [resolve(a) for a in data_args]
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

        if self.async_mode and reason.startswith("mark_step"):
            # entry.graph_name: graph.name would re-hash every node's text on each cache hit.
            # The user's mark_step() line: the error surfaces later, at a read.
            site = source_location.user_stack(1)
            where = f" at {site[0]}" if site else ""
            batch = PendingBatch(f"{reason}{where}, graph {entry.graph_name}")

            def job() -> None:
                try:
                    values = run()
                except BaseException as e:
                    batch.fail(e)
                    return
                batch.set(values)

            # Placeholders before submit: the worker may finish the job first.
            results = batch.placeholders(n_roots)
            self._worker.submit(job)
        else:
            results = self._worker.run_sync(run)
        # The execution holds its arguments (data_args); release dead inputs'
        # buffers from the graph's nodes, which stay reachable from
        # last_graph() until the next execution.
        for leaf in dead:
            leaf.data = None
        produced: dict[tuple[int, int], Output] = {}
        for out, data in zip(roots, results):
            produced[id(out.node), out.index] = Output(DeviceData(data, out.meta, out.node.location))
        for s in storages:
            new = produced.get((id(s.value.node), s.value.index))
            if new is not None:
                s.value = new
        for hook in self.hooks:
            hook(graph, entry, reason)
        return produced

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

    def _compile(self, backend: BackendImpl, graph: LazyGraph, donated: dict[int, int] | None = None) -> _CacheEntry:
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
                return _CacheEntry(executable, computation, False, graph.name)
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
        """Block until every queued execution has finished."""
        self._worker.drain()

    def last_computation(self) -> Any:
        return self._last

    def last_graph(self) -> LazyGraph | None:
        return self._last_graph

    def cache_len(self) -> int:
        return len(self._cache)

    def clear_cache(self) -> None:
        self._cache.clear()

    def on_backend_change(self, old: BackendImpl, new: BackendImpl) -> None:
        """Move live tensors to the new backend (through the host)."""
        pending = self.pending_storages()
        if pending:
            self._execute(pending, [], "backend_change")
        for s in self.live_storages():
            node = s.value.node
            if isinstance(node, DeviceData) and node.data is not None:
                host = old.to_host(resolve(node.data))
                s.value = Output(DeviceData(new.make_backend_data(host, new.default_device()), node.metas[0]))
        self._cache.clear()


_executor: GraphExecutor | None = None


def executor() -> GraphExecutor:
    global _executor
    if _executor is None:
        _executor = GraphExecutor()
    return _executor
