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


class MlirBackend(BackendImpl):
    """Lowering done; data are CPU tensors unless a subclass overrides transfers."""

    name = "mlir"
    lowering_target = "torch"

    def lower(self, graph: LazyGraph) -> lowering.Computation:
        return lowering.lower_graph(graph)

    def lower_to_target(self, computation: lowering.Computation) -> lowering.Computation:
        """The computation in this backend's ``lowering_target`` form."""
        return lowering.lower(computation, self.lowering_target)

    def supports_op(self, op: Any) -> bool:
        return lowering.can_lower(op)

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
        if type(self).executable_to_bytes is MlirBackend.executable_to_bytes:
            return None
        cache = self.__dict__.get("_graph_cache")
        if cache is None:
            own = getattr(self, "disk_cache", None)
            if isinstance(own, DiskCache):
                cache = DiskCache("graphs", directory=own.root, enabled=own.enabled, counters="graph_cache")
            else:
                cache = DiskCache("graphs", counters="graph_cache")
            self.__dict__["_graph_cache"] = cache
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
            computation = lowering.Computation.from_record(blob[8:8 + n])
            if computation.graph_hash != graph.stable_hash:
                raise ValueError("entry holds another graph")
            return self.executable_from_bytes(blob[8 + n:], computation), computation
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
        cache = self.graph_cache()
        if cache is None:
            return
        try:
            payload = self.executable_to_bytes(computation, executable)
            if payload is None:
                return
            record = computation.to_record()
            cache.put(self.graph_key(graph, donated), struct.pack("<Q", len(record)) + record + payload)
        except Exception:  # caching is an optimization: never fail the step over it
            metrics.counter_add("graph_cache_write_error")


def text_digest(text: str) -> str:
    """A short hex digest of ``text`` (for ``persistent_key``s that embed pipelines)."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
