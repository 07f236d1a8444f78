"""MlirBackend: the base class for backends that compile torch-dialect MLIR.

It implements ``BackendImpl.lower`` with ``lowering.LoweringContext`` (as
Torch-MLIR's ``TorchMlirBackendImpl`` did), reports which ops the torch
dialect can express, and keeps host data handling in one place. A vendor
subclass implements ``compile`` and ``execute_computation`` only.

It also keeps executables across processes, keyed on the graph rather than
on its MLIR: ``load_executable`` looks the graph's stable hash up in a
``DiskCache`` (namespace ``graphs``, counters ``graph_cache_*``) before
anything is lowered, so a second run of a program neither lowers nor
compiles. A subclass opts in by turning its executable into bytes and back
(``executable_to_bytes`` / ``executable_from_bytes``); the entry also holds
the computation's record (signature and MLIR text), which is all the
executor needs on a hit.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import torch

from lazy_core import metrics
from lazy_core.backend import BackendData, BackendDevice, BackendImpl
from lazy_core.graph import LazyGraph
from lazy_mlir import lowering

from .disk_cache import DiskCache

#: Bump when the layout of a graph-cache entry changes (old entries then never match).
_GRAPH_ENTRY_FORMAT = "lazy-graph-entry-1"
_PLAN_ENTRY_FORMAT = "lazy-dynamic-plan-1"


class MlirBackend(BackendImpl):
    """Lowering done; data are CPU tensors unless a subclass overrides transfers."""

    name = "mlir"
    lowering_target = "torch"

    def lowering_options(self) -> dict[str, Any]:
        """Keyword arguments of ``lowering.lower_graph`` for this backend (bf16
        emulation, boundary casts). Subclasses set options here rather than
        overriding ``lower``, so dynamic-shape samples are lowered the same way."""
        return {}

    def lower(self, graph: LazyGraph) -> lowering.Computation:
        return lowering.lower_graph(graph, **self.lowering_options())

    # -- dynamic dimensions (lowering.dynamic) ---------------------------------------------
    @property
    def supports_dynamic_shapes(self) -> bool:  # type: ignore[override]
        # A subclass with its own ``lower`` may lower differently from the samples.
        return type(self).lower is MlirBackend.lower

    def shape_sample(self, graph: LazyGraph) -> lowering.dynamic.Observation:
        return lowering.dynamic.sample(graph, **self.lowering_options())

    def generalize(self, a: lowering.dynamic.Observation,
                   b: lowering.dynamic.Observation) -> lowering.dynamic.Plan | None:
        return lowering.dynamic.unify(a, b)

    def admits(self, plan: lowering.dynamic.Plan, sample: lowering.dynamic.Observation) -> bool:
        return plan.admits(sample)

    def speculate(self, sample: lowering.dynamic.Observation,
                  sizes: frozenset[int]) -> lowering.dynamic.Plan | None:
        return lowering.dynamic.speculate(sample, sizes)

    def lower_dynamic(self, plan: lowering.dynamic.Plan, graph: LazyGraph) -> lowering.Computation:
        return lowering.dynamic.dynamic_computation(plan, f"{graph.name}_dyn")

    def _plan_key(self, graph: LazyGraph, donated: dict[int, int] | None) -> str:
        parts = [_PLAN_ENTRY_FORMAT, graph.family_key, self.name, self.persistent_key(), lowering.version_key()]
        if donated:
            parts.append("donate:" + ",".join(f"{a}>{r}" for a, r in sorted(donated.items())))
        return DiskCache.key(*parts)

    def load_plans(self, graph: LazyGraph,
                   donated: dict[int, int] | None = None) -> list[tuple[Any, Any, lowering.Computation]]:
        """The dynamic plan an earlier process compiled for ``graph``'s family, as
        ``[(plan, executable, computation)]`` (empty if none): a later process
        then runs new sizes of it without compiling (docs/dynamic-shapes.md)."""
        cache = self.plan_cache()
        if cache is None:
            return []
        key = self._plan_key(graph, donated)
        blob = cache.get(key)
        if blob is None:
            return []
        try:
            (n,) = struct.unpack_from("<Q", blob)
            plan = lowering.dynamic.Plan.from_record(blob[8:8 + n])
            executable, computation = self._unpack_entry(blob[8 + n:])
            return [(plan, executable, computation)]
        except Exception:
            metrics.counter_add("plan_cache_load_error")
            cache.discard(key)
            return []

    def store_plan(self, graph: LazyGraph, donated: dict[int, int] | None, plan: Any,
                   computation: lowering.Computation, executable: Any) -> None:
        """Keep a compiled dynamic plan for ``load_plans`` in later processes; never raises."""
        self._store_entry(self.plan_cache(), lambda: self._plan_key(graph, donated), computation, executable,
                          lambda: _sized(plan.to_record()))

    def lower_to_target(self, computation: lowering.Computation) -> lowering.Computation:
        """The computation in this backend's ``lowering_target`` form."""
        return lowering.lower(computation, self.lowering_target)

    def supports_op(self, op: Any) -> bool:
        return lowering.can_lower(op)

    def support_depends_on_arguments(self, op: Any) -> bool:
        return lowering.depends_on_arguments(op)

    def supports_call(self, op: Any, args: tuple, kwargs: dict) -> bool:
        return lowering.can_lower_call(op, args, kwargs)

    # Host-memory data: subclasses with device memory override both.
    def make_backend_data(self, tensor: torch.Tensor, device: BackendDevice) -> BackendData:
        return BackendData(tensor.detach().contiguous().clone(), tensor.shape, tensor.dtype, device)

    def to_host(self, data: BackendData) -> torch.Tensor:
        return data.handle

    # -- executables across processes ----------------------------------------------------
    def executable_to_bytes(self, computation: lowering.Computation, executable: Any) -> bytes | None:
        """``executable`` as bytes that ``executable_from_bytes`` can load in another
        process, or None if it cannot be kept (the default: nothing is cached)."""
        return None

    def executable_from_bytes(self, payload: bytes, computation: lowering.Computation) -> Any:
        """The executable ``executable_to_bytes`` saved; ``computation`` is its record."""
        raise NotImplementedError

    def persistent_key(self) -> str:
        """Everything of this backend that decides its executables (name, flags,
        compiler versions); part of every graph-cache key. Default: ``cache_key()``."""
        return self.cache_key()

    def graph_cache(self) -> DiskCache | None:
        """Where graph-keyed executables live: next to the backend's own
        ``disk_cache`` if it has one (same folder, same on/off switch), else
        the default cache folder; None if this backend keeps no executables."""
        return self._cache_beside_own("graphs", "graph_cache")

    def plan_cache(self) -> DiskCache | None:
        """Where dynamic-shape plans live (namespace ``plans``, counters
        ``plan_cache_*``), beside ``graph_cache``: a family's lookup is not a
        graph-cache miss."""
        return self._cache_beside_own("plans", "plan_cache")

    def _cache_beside_own(self, namespace: str, counters: str) -> DiskCache | None:
        if type(self).executable_to_bytes is MlirBackend.executable_to_bytes:
            return None
        cache = self.__dict__.get("_cache_" + namespace)
        if cache is None:
            own = getattr(self, "disk_cache", None)
            if isinstance(own, DiskCache):
                cache = DiskCache(namespace, directory=own.root, enabled=own.enabled, counters=counters)
            else:
                cache = DiskCache(namespace, counters=counters)
            self.__dict__["_cache_" + namespace] = cache
        return cache if cache.enabled else None

    def graph_key(self, graph: LazyGraph, donated: dict[int, int] | None = None) -> str:
        """The graph-cache key: the graph's stable hash, this backend's
        ``persistent_key``, the lowering's version (``lowering.version_key``)
        and the graph's source locations: the entry's MLIR text carries them
        for dumps and diagnostics. (A script whose lines moved lowers again
        but still finds its compiled code in a backend's MLIR-keyed cache,
        as IREE's is, which leaves locations out.) A donation plan compiles
        different code, so it is part of the key."""
        parts = [_GRAPH_ENTRY_FORMAT, graph.stable_hash, graph.locations_hash, self.name,
                 self.persistent_key(), lowering.version_key()]
        if donated:
            parts.append("donate:" + ",".join(f"{a}>{r}" for a, r in sorted(donated.items())))
        return DiskCache.key(*parts)

    def load_executable(
        self, graph: LazyGraph, donated: dict[int, int] | None = None
    ) -> tuple[Any, lowering.Computation] | None:
        cache = self.graph_cache()
        if cache is None:
            return None
        key = self.graph_key(graph, donated)
        blob = cache.get(key)
        if blob is None:
            return None
        try:
            (n,) = struct.unpack_from("<Q", blob)
            if lowering.Computation.from_record(blob[8:8 + n]).graph_hash != graph.stable_hash:
                raise ValueError("entry holds another graph")
            return self._unpack_entry(blob)
        except Exception:
            # An entry that does not load is a miss: lower and compile again.
            # Deleted, so the store after that compile replaces it and the next
            # run loads, instead of failing on the same entry every run.
            metrics.counter_add("graph_cache_load_error")
            cache.discard(key)
            return None

    def store_executable(
        self, graph: LazyGraph, computation: lowering.Computation, executable: Any,
        donated: dict[int, int] | None = None,
    ) -> None:
        self._store_entry(self.graph_cache(), lambda: self.graph_key(graph, donated), computation, executable)

    def _store_entry(self, cache: DiskCache | None, key: Any, computation: lowering.Computation, executable: Any,
                     head: Any = lambda: b"") -> None:
        """Put ``head()`` + the computation's record + the executable's bytes under
        ``key()`` in ``cache`` (nothing if it is None)."""
        if cache is None:
            return
        try:
            payload = self.executable_to_bytes(computation, executable)
            if payload is None:
                return
            cache.put(key(), head() + _sized(computation.to_record()) + payload)
        except Exception:  # caching is an optimization: never fail the step over it
            metrics.counter_add("graph_cache_write_error")

    def _unpack_entry(self, blob: bytes) -> tuple[Any, lowering.Computation]:
        """``(executable, computation)`` from what ``_store_entry`` wrote after its head."""
        (n,) = struct.unpack_from("<Q", blob)
        computation = lowering.Computation.from_record(blob[8:8 + n])
        return self.executable_from_bytes(blob[8 + n:], computation), computation


def _sized(data: bytes) -> bytes:
    """``data`` with its length in front (8 bytes, little-endian)."""
    return struct.pack("<Q", len(data)) + data


def text_digest(text: str) -> str:
    """A short hex digest of ``text`` (for ``persistent_key``s that embed pipelines)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
