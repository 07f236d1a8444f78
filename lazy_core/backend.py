"""The vendor plugin interface: what a backend implements.

This mirrors LTC's ``BackendImplInterface`` in Python. The executor owns
tracing, graph building and caching; a backend owns only its device: moving
data on and off it, turning a graph into a computation, compiling
computations and running them. Everything here is documented for vendors;
``docs/writing-a-backend.md`` has the long form.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .graph import LazyGraph


@dataclass(frozen=True)
class BackendDevice:
    """A device of a backend; ``lazy:N`` maps to ``devices()[N]``."""

    backend: str
    ordinal: int = 0
    description: str = ""

    def __str__(self) -> str:
        return f"{self.backend}:{self.ordinal}"


class BackendData:
    """A backend's handle to one buffer on its device.

    Owned by the runtime once returned: the executor never mutates a buffer it
    was given, so backends may share storage between BackendData objects.
    ``shape``/``dtype`` describe the logical tensor.
    """

    __slots__ = ("handle", "shape", "dtype", "device")

    def __init__(self, handle: Any, shape: Sequence[int], dtype: torch.dtype, device: BackendDevice):
        self.handle = handle
        self.shape = tuple(shape)
        self.dtype = dtype
        self.device = device

    def __repr__(self) -> str:
        return f"BackendData({list(self.shape)}, {self.dtype}, {self.device})"


class CompileError(RuntimeError):
    """Lowering or compiling a computation failed.

    ``repro_path`` names a file that reproduces the failure (MLIR plus the
    pipeline), ``location`` the user's source line of the failing op if known.
    """

    def __init__(self, message: str, repro_path: str | None = None, location: str | None = None):
        super().__init__(message)
        self.repro_path = repro_path
        self.location = location


class BackendImpl(ABC):
    """Subclass this to run lazy tensors on your compiler and device.

    Required: ``make_backend_data``, ``to_host``, ``lower``, ``compile``,
    ``execute_computation``. MLIR backends usually subclass
    ``backends.mlir_backend.MlirBackend`` instead, which implements ``lower``
    with the torch-dialect ``LoweringContext`` and leaves compile/execute.
    """

    #: Registered name, e.g. "reference" or "iree-cpu".
    name: str = "backend"
    #: The form ``compile`` receives: "torch", "linalg-on-tensors", "tosa" or "stablehlo".
    lowering_target: str = "torch"

    # -- devices -------------------------------------------------------------
    def devices(self) -> list[BackendDevice]:
        """Devices this backend drives. Default: one device."""
        return [BackendDevice(self.name, 0)]

    def default_device(self) -> BackendDevice:
        return self.devices()[0]

    # -- data ----------------------------------------------------------------
    @abstractmethod
    def make_backend_data(self, tensor: torch.Tensor, device: BackendDevice) -> BackendData:
        """Copy a host (CPU) tensor to ``device``. The caller may reuse ``tensor``
        afterwards, so copy or keep a private reference."""

    @abstractmethod
    def to_host(self, data: BackendData) -> torch.Tensor:
        """A CPU tensor with the contents of ``data``. The caller must not
        mutate the result in place (it may alias the device buffer)."""

    # -- computations ----------------------------------------------------------
    @abstractmethod
    def lower(self, graph: LazyGraph) -> Any:
        """Turn a post-ordered graph into a computation (LTC's lowering context).

        ``graph.argument_layout`` says which arguments ``execute_computation``
        will get: the device-data leaves in ``graph.inputs`` order, then the
        scalar parameters packed into one 1-D float64 and one 1-D int64 tensor
        (each only if present). ``graph.outputs`` are the results in order.
        Raise ``CompileError`` if something cannot be lowered.
        """

    @abstractmethod
    def compile(self, computations: Sequence[Any]) -> list[Any]:
        """Compile computations into executables (one per computation).

        A backend with ``supports_donation = True`` also accepts
        ``donated=[{argument index: result index}, ...]`` (one mapping per
        computation; indices count device-data arguments and results): the
        caller promises nothing reads those arguments' buffers after the
        call, so the executable may write the results into them. Applying
        only some pairs, or none, is always correct.
        """

    @abstractmethod
    def execute_computation(
        self, executable: Any, arguments: Sequence[BackendData], device: BackendDevice
    ) -> list[BackendData]:
        """Run an executable on ``arguments``; one BackendData per graph output."""

    # -- persistent executables (optional) ----------------------------------------
    def load_executable(self, graph: LazyGraph, donated: dict[int, int] | None = None) -> tuple[Any, Any] | None:
        """``(executable, computation)`` for ``graph`` from a cache that outlives the
        process, found by ``graph.stable_hash`` alone, or None. ``donated`` (only
        passed to backends with ``supports_donation``) is part of what was compiled.

        The executor asks this before ``lower``: a hit skips lowering and
        compiling, which is what makes a second run's first step cheap. The
        computation must answer what the executor, dumps and diagnostics read
        (``func_name``, ``args``, ``results``, ``mlir``). Never raise for a bad
        entry: report a miss. Default: no such cache.
        """
        return None

    def store_executable(
        self, graph: LazyGraph, computation: Any, executable: Any, donated: dict[int, int] | None = None
    ) -> None:
        """Keep what ``compile`` made of ``graph`` for ``load_executable`` in a later
        process. Called after each successful compile; must not raise. Default: nothing."""

    # -- capabilities ------------------------------------------------------------
    def supports_op(self, op: Any) -> bool:
        """Whether ops of this kind can appear in a computation. An op that
        returns False runs eagerly on the CPU (counted as a fallback)."""
        return True

    def support_depends_on_arguments(self, op: Any) -> bool:
        """Whether ``supports_call`` must be asked at each call of ``op`` (asked once per op:
        the tracer's fast path skips ops whose support never depends on their arguments)."""
        return False

    def supports_call(self, op: Any, args: tuple, kwargs: dict) -> bool:
        """Whether this call of ``op``, a supported op, can appear in a computation (e.g.
        ``polygamma`` of non-negative orders only). Read only the Python scalars among ``args`` and
        ``kwargs``; a call that returns False runs eagerly on the CPU, as an unsupported op."""
        return True

    #: Whether float subnormals (float32 magnitudes below 2**-126) become zero in
    #: arithmetic and comparisons, as eager does only under
    #: ``torch.set_flush_denormal(True)``. PyTorch keeps them by default; a backend
    #: whose hardware or runtime flushes them must say so here, so tests and the fuzzer
    #: compare it with the flushing semantics instead of reporting every subnormal as a
    #: wrong value (test_subnormals.py checks each backend does what it declares).
    flushes_subnormals: bool = False

    # -- dynamic dimensions (optional, lazy_core.dynamic_shapes) -----------------
    #: Whether the four methods below are implemented. The executor then
    #: compiles a graph family (one program at several sizes) once with
    #: dynamic dimensions instead of once per size (``speculate``, optional,
    #: compiles a plan before a family's second size is seen).
    supports_dynamic_shapes: bool = False

    def shape_sample(self, graph: LazyGraph) -> Any:
        """What ``generalize`` and ``admits`` compare: ``graph`` as this backend
        lowers it, with its sizes (opaque to the executor)."""
        raise NotImplementedError

    def generalize(self, a: Any, b: Any) -> Any | None:
        """A plan whose instances include samples ``a`` and ``b`` (the sizes where
        they differ dynamic), or None if they are not one function of their sizes."""
        raise NotImplementedError

    def admits(self, plan: Any, sample: Any) -> bool:
        """Whether running ``plan``'s computation computes exactly ``sample``'s graph.
        Must never say yes wrongly: the executor reuses the executable on it."""
        raise NotImplementedError

    def lower_dynamic(self, plan: Any, graph: LazyGraph) -> Any:
        """``plan`` as a computation for ``compile`` (``graph`` is one instance, for names)."""
        raise NotImplementedError

    def speculate(self, sample: Any, sizes: frozenset[int]) -> Any | None:
        """A plan for ``sample``'s family guessed before a second member is seen:
        ``sample`` generalized with itself as it would be with the input
        dimensions whose size is in ``sizes`` changed (another family just went
        dynamic over those sizes), or None. ``admits`` still decides every reuse,
        so a wrong guess costs a compile, never a value. Default: None (no
        speculation)."""
        return None

    def load_plans(self, graph: LazyGraph, donated: dict[int, int] | None = None) -> list[tuple[Any, Any, Any]]:
        """``[(plan, executable, computation)]`` an earlier process compiled for
        ``graph``'s family (``graph.family_key``), from a cache that outlives the
        process; must not raise. Default: none."""
        return []

    def store_plan(self, graph: LazyGraph, donated: dict[int, int] | None, plan: Any, computation: Any,
                   executable: Any) -> None:
        """Keep a compiled plan for ``load_plans``; must not raise. Default: nothing."""

    #: Whether this backend's buffers are host memory (``to_host`` and ``make_backend_data``
    #: are copies within RAM). Then running a graph op by op with PyTorch's CPU kernels costs
    #: about what eager costs, and a graph seen once runs that way instead of paying for a
    #: compile (``lazy_core.tiering``). A GPU backend leaves it False: there it would move
    #: every argument through the host.
    host_memory: bool = False

    #: Whether ``compile`` takes ``donated=`` (buffer donation, lazy_core.donation).
    #: A backend that sets this must return result buffers that share storage
    #: with no argument and no other result, because the executor may donate
    #: any result's buffer in a later step.
    supports_donation: bool = False

    def can_donate(self, data: BackendData) -> bool:
        """Whether ``data``'s buffer may be offered for donation (e.g. not one
        the backend shares between equal constants). Default: yes."""
        return True

    def cache_key(self) -> str:
        """Anything besides the graph that changes compiled code (flags, target)."""
        return self.name

    def synchronize(self, device: BackendDevice | None = None) -> None:
        """Wait until all work queued on ``device`` is done."""

    def describe(self) -> str:
        return self.name
