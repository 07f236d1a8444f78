"""IreeBackend: torch-dialect computations compiled by IREE and run by its runtime.

The lazy tracer hands over a ``lowering.Computation``; this backend feeds its
torch-dialect text to ``iree-compile`` (``input_type="torch"``), loads the VM
flatbuffer on a shared runtime device and calls the graph's function with
device buffer views. Tensors stay on the device between steps: a
``BackendData.handle`` is an ``iree.runtime.HalBufferView``, uploaded once by
``make_backend_data`` and read back only when Python asks (``to_host``).

Compiled modules are memoized per process (backend objects come and go with
``lazy_core.init``) and persisted in ``backends.disk_cache`` so a second run
of the same program compiles nothing.

iree-compile is offered the computation in the forms ``config.input_forms``
names, in order (default: torch-mlir's backend contract, then the raw
import); the first that compiles wins.

Host<->device byte counts (``transfer_to_device_bytes`` /
``transfer_to_host_bytes``) are counted by lazy_core at its transfer sites
(``upload``, ``to_host_many``, graph-level eager fallback), the one place
that sees every transfer of every backend, so this backend counts none
itself; it times the raw copies as ``iree_upload`` and ``iree_download``.
Scalar parameters (0-d tensors of a few bytes, made every step) are
kernel arguments rather than tensor transfers: the executor does not count
them, and this backend keeps one device buffer per distinct value.

Buffer donation (``compile(..., donated=...)``, see ``donation``): a caller
that knows an argument's buffer is read by nothing else after a call may ask
for a result to be written into it. Pairs for which IREE could read the old
value after writing the new one are refused (``donation`` says which). The
compiled function writes the others in place, and ``execute_computation``
hands the argument's buffer view out as the result. An argument buffer that
is shared (a memoized scalar, or the same view passed twice) gets a private
copy first, so donation never changes what another tensor reads.

dtypes: f32, f16, i64, i32, i16, i8, u8, bool and 0-d tensors run as
is. bf16 is computed in f32 and rounded to bf16 after each op, as PyTorch
does (``lowering.bf16``; why in ``config``): bf16 buffers stay bf16 on the
device and are passed to the compiled function retagged as int16, its
int16 results retagged as bf16. f64 is computed in f64: IREE's default
f64->f32 demotion is switched off because it breaks the function boundary
(see ``config``). Results are read back by their buffer view's element type
and converted to the graph's dtype if the two differ.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from lazy_core import metrics
from lazy_core.backend import BackendData, BackendDevice, CompileError
from lazy_mlir import lowering
from lazy_mlir.lowering import short_loops

from ..disk_cache import DiskCache
from ..mlir_backend import MlirBackend
from . import (
    aliasing,
    barriers,
    donation,
    dtypes,
    fused_reductions,
    miscompiles,
    region_results,
    rewrites,
    sign_extensions,
    transfer,
)
from .aliasing import written_arguments
from .chained_fills import separate_chained_fills
from .compiler import IreeCompileError, compile_vmfb, compiler_version
from .config import TARGETS, IreeConfig, TargetSpec, make_config
from .donation import donate_arguments, key_suffix, normalize, results_in_order
from .host_target import target_key
from .memo import (
    clear_memory_caches,
    exe_memo,
    memo_get,
    memo_pop,
    memo_put,
    scalar_memo,
    vmfb_memo,
)
from .reshaped_slices import separate_reshaped_slices
from .rewrites import (
    hide_zero_literals,
    materialize_self_updates,
    merge_duplicates,
    rewrite_for_iree,
    separate_sorts,
)
from .runtime import IreeDevice, IreeExecutable, get_device, probe
from .unit_slices import separate_unit_slice_expansions

#: The runtime's words when a module needs more than the device allows
#: (Vulkan: "... exceeds device limit 128", "... exceeding device limit 32").
_DEVICE_LIMIT = re.compile(r"exceed(s|ing) device limit")

__all__ = ["IreeBackend", "clear_memory_caches", "make_iree_cpu", "make_iree_cuda", "make_iree_vulkan"]


class SharedScalarData(BackendData):
    """A 0-d upload whose buffer equal scalars share (``scalar_memo``): never written.

    The mark travels with the data, so it holds after the memo evicts the
    buffer: a donation that reaches it writes into a private copy.
    """

    __slots__ = ()


class IreeExecutableHandle:
    """What ``compile`` returns: the loaded module plus the graph's result types."""

    __slots__ = ("exe", "result_types", "key", "written_args", "donated", "shared_results", "arg_tags",
                 "result_tags")

    def __init__(self, exe: IreeExecutable, result_types: list[tuple[tuple[int, ...], torch.dtype]], key: str,
                 written_args: frozenset[int] = frozenset(), donated: dict[int, int] | None = None,
                 arg_tags: dict[int, torch.dtype] | None = None, result_tags: dict[int, torch.dtype] | None = None):
        self.exe = exe
        self.result_types = result_types
        self.key = key
        #: Argument index -> the element type the function takes it as, where that is
        #: not the tensor's own (bf16 passed as int16 bits); results: the tensor's own.
        self.arg_tags: dict[int, torch.dtype] = arg_tags or {}
        self.result_tags: dict[int, torch.dtype] = result_tags or {}
        #: Arguments the compiled code may write into: passed as private copies.
        self.written_args = written_args
        #: argument index -> result index written into that argument's buffer.
        self.donated: dict[int, int] = donated or {}
        #: Results IREE hands back in an argument's (or an earlier result's)
        #: buffer, found on the first run; None until then. See execute_computation.
        self.shared_results: list[int] | None = None


class IreeBackend(MlirBackend):
    """``iree-cpu``, ``iree-vulkan`` or ``iree-cuda``, chosen by ``target``."""

    lowering_target = "torch"
    #: compile(..., donated=) writes results into dead argument buffers (donation.py).
    supports_donation = True

    def __init__(
        self,
        target: str | TargetSpec = "iree-cpu",
        flags: Sequence[str] | None = None,
        device: str | None = None,
        input_forms: str | Sequence[str] | None = None,
        disk_cache: DiskCache | None = None,
    ) -> None:
        spec = TARGETS[target] if isinstance(target, str) else target
        self.config: IreeConfig = make_config(spec, list(flags or []), device, input_forms)
        self.name = spec.backend_name
        self.disk_cache = disk_cache if disk_cache is not None else DiskCache("iree")
        self._device: IreeDevice | None = None
        self._compiler_version = compiler_version()
        self._target_identity: str | None = None

    # -- devices ----------------------------------------------------------------
    @property
    def runtime_device(self) -> IreeDevice:
        """The shared IREE device, opened on first use."""
        if self._device is None:
            self._device = get_device(self.config.device_uri)
        return self._device

    def devices(self) -> list[BackendDevice]:
        return [BackendDevice(self.name, 0, self.config.device_uri)]

    def lowering_options(self) -> dict[str, Any]:
        """bf16 emulated, integer extrema widened, float extrema NaN-checked, zero sums made +0.0, logs of
        subnormals scaled, float64 erf expanded, long reductions staged, convolution gradients as matmuls, as the
        target asks (see ``config``)."""
        target = self.config.target
        return {"emulate_bf16": target.emulate_bf16, "int64_extrema": target.int64_extrema,
                "nan_checked_extrema": target.nan_checked_extrema, "positive_zero_sums": target.positive_zero_sums,
                "subnormal_logs": target.subnormal_logs, "float64_erf": target.float64_erf,
                "short_loops": target.short_loops, "wide_sums": target.wide_sums,
                "conv_gradients_as_matmuls": target.conv_gradients_as_matmuls}

    @property
    def flushes_subnormals(self) -> bool:  # type: ignore[override]
        """iree-cpu's runtime flushes them (``TargetSpec.flushes_subnormals``)."""
        return self.config.target.flushes_subnormals

    @property
    def host_memory(self) -> bool:  # type: ignore[override]
        """iree-cpu's buffers are host memory (``TargetSpec.host_memory``)."""
        return self.config.target.host_memory

    def supports_op(self, op: Any) -> bool:
        """What the lowering can lower, less what this target cannot compile (``TargetSpec.eager_ops``)."""
        eager = self.config.target.eager_ops
        if eager and _op_name(op) in eager:
            return False
        return super().supports_op(op)

    def support_depends_on_arguments(self, op: Any) -> bool:
        return (self.config.target.short_loops and short_loops.may_loop_long(op)
                or super().support_depends_on_arguments(op))

    def supports_call(self, op: Any, args: tuple, kwargs: dict) -> bool:
        """Also refuses, on a target with ``short_loops``, a call whose code would loop past
        lavapipe's limit (``lowering.short_loops.long_loop``): it runs eagerly, right."""
        if self.config.target.short_loops and short_loops.long_loop(op, args, kwargs) is not None:
            return False
        return super().supports_call(op, args, kwargs)

    def unavailable_reason(self) -> str | None:
        """None if this backend can execute here, else what is missing."""
        return probe(self.config.target.driver, self.config.device_uri)

    def describe(self) -> str:
        return (f"{self.name} (target {self.config.target.target_backend}, device {self.config.device_uri}, "
                f"input {','.join(self.config.input_forms)}, flags {' '.join(self.config.compile_flags) or '-'})")

    def cache_key(self) -> str:
        return f"{self.name}|{self.target_identity()}|iree-{self._compiler_version}"

    def target_identity(self) -> str:
        """What decides the compiled code besides the MLIR: the config's key
        (target backend, input forms, flags), the runtime driver, how bf16 is
        lowered (the graph cache skips lowering), and the CPU
        that ``--iree-llvmcpu-target-cpu=host`` resolves to here (see
        ``host_target``), so no cache hands code built for one CPU to another."""
        if self._target_identity is None:
            resolved = target_key(self.config.compile_flags, self._compiler_version, self.disk_cache)
            self._target_identity = "|".join(
                [self.config.cache_key(), f"driver={self.config.target.driver}", resolved,
                 *(f"{k}={v}" for k, v in sorted(self.lowering_options().items()))])
        return self._target_identity

    def persistent_key(self) -> str:
        """Also the artifact format and the rules computing what is stored with
        each vmfb (written arguments, applied donations), so a graph-cache entry
        made by older rules is never loaded."""
        return f"{self.cache_key()}|{_ARTIFACT_FORMAT}|{_RULES_DIGEST}"

    # -- data ---------------------------------------------------------------------
    def make_backend_data(self, tensor: torch.Tensor, device: BackendDevice) -> BackendData:
        if tensor.dim() == 0:
            # Scalar parameters (learning rates, step counts) arrive every step;
            # buffers are immutable, so equal scalars share one device buffer.
            # The data say so themselves (SharedScalarData), so the buffer is
            # never donated even after the memo forgot it (any other BackendData
            # made from it earlier still shares it).
            key = (self.config.device_uri, tensor.dtype, dtypes.to_carrier_numpy(tensor).tobytes())
            view = memo_get(scalar_memo, key)
            if view is None:
                view = transfer.upload(self.runtime_device, tensor)
                memo_put(scalar_memo, key, view)
            return SharedScalarData(view, (), tensor.dtype, device)
        with metrics.timed("iree_upload"):
            view = transfer.upload(self.runtime_device, tensor)
        return BackendData(view, tensor.shape, tensor.dtype, device)

    def to_host(self, data: BackendData) -> torch.Tensor:
        with metrics.timed("iree_download"):
            return transfer.download(self.runtime_device, data.handle, data.shape, data.dtype)

    # -- compile ----------------------------------------------------------------------
    def source_text(self, computation: lowering.Computation, form: str) -> str:
        """The MLIR handed to iree-compile in input ``form`` (raw, torch or linalg).

        Torch-dialect forms go through ``rewrites`` first: constant fills become
        splat literals, which IREE does not miscompile (see that module).
        """
        if form == "linalg":
            return lowering.lower(computation, "linalg-on-tensors").mlir
        text = merge_duplicates(rewrite_for_iree(computation.mlir if form == "raw"
                                                 else lowering.lower(computation, "torch").mlir))
        # SPIR-V: IREE 3.13 fails to compile stacked sorts there ("vector.transfer_read op with
        # rank > 1"); the copies go along another dim instead (test_bool_sorts_false_first).
        text = separate_sorts(text, keep_rank=self.config.target.target_backend == "vulkan-spirv")
        text = materialize_self_updates(text)
        text = separate_reshaped_slices(text)  # IREE 3.13 loops forever on some (reshaped_slices.py)
        text = separate_chained_fills(text)  # IREE 3.13 misplaces merged slice fills (chained_fills.py)
        text = separate_unit_slice_expansions(text)  # IREE 3.13 refuses some (unit_slices.py)
        if self.config.hides_zero_literals:
            text = hide_zero_literals(text)
        return text

    def compile_key(self, computation: lowering.Computation, donated: Mapping[int, int] | None = None) -> str:
        """The disk-cache key: location-free MLIR, target (resolved CPU, driver, flags, forms), donations,
        compiler version.

        Locations only feed diagnostics, so keying on the text without them
        lets an edited script (lines moved) keep its cached executables.
        Donation changes the compiled function's signature, so it is keyed.
        """
        parts = [_ARTIFACT_FORMAT, _RULES_DIGEST, computation.to_string(), self.target_identity(),
                 self._compiler_version]
        if donated:
            parts.append("donate:" + key_suffix(donated))
        return DiskCache.key(*parts)

    def compile(
        self,
        computations: Sequence[lowering.Computation],
        donated: Sequence[Mapping[int, int] | None] | None = None,
    ) -> list[IreeExecutableHandle]:
        """One executable per computation; ``donated[i]`` maps argument -> result indices to alias.

        A donated argument's buffer receives the result's new value; the caller
        promises that nothing reads the argument's old value after the call.
        Pairs IREE cannot alias (the result is the argument unchanged, has
        another shape or dtype, or IREE could still read the old value after
        writing the new one) are quietly computed functionally instead;
        ``handle.donated`` holds the pairs applied.
        """
        donated = list(donated or [])
        donated += [None] * (len(computations) - len(donated))
        return [self._compile_one(c, d) for c, d in zip(computations, donated)]

    def can_donate(self, data: BackendData) -> bool:
        """Every buffer: a donated shared scalar is copied first (``execute_computation``).

        Refusing a shared scalar made the donation plan depend on where a value came from:
        a 0-d accumulator that starts as an upload (shared) and then becomes a result gave
        the same graph two plans, and so two compiles. Copying a few bytes is cheaper.
        """
        return True

    def _compile_vmfb(
        self, computation: lowering.Computation, donated: Mapping[int, int] | None = None
    ) -> tuple[bytes, frozenset[int], dict[int, int]]:
        """Try each input form in turn; raise the first form's error if none compiles.

        Returns the flatbuffer, the arguments its code may write into, and the
        donations applied.
        """
        stored_only = _STORED_ONLY.search(computation.mlir)
        if stored_only:
            metrics.counter_add("iree_refused_stored_only_dtype")
            raise IreeCompileError.refused(
                f"the IREE backends store {stored_only.group(1)} tensors but compile no op on them (their "
                "semantics are unchecked against PyTorch's); they run eagerly (backends/iree/dtypes.py)", stored_only.group(0), computation.mlir, self.config,
                computation.func_name, "raw")
        errors: list[CompileError] = []
        for form in self.config.input_forms:
            try:
                text = self.source_text(computation, form)
                applied: dict[int, int] = {}
                vmfb = None
                if donated:
                    donating, applied = donate_arguments(text, computation.func_name, donated)
                    if applied:
                        try:
                            vmfb = compile_vmfb(donating, self.config, computation.func_name, form)
                            text = donating
                        except CompileError:
                            # Donation is an optimization: the functional form of the same graph
                            # is always correct. (Integer arguments, which IREE's torch input
                            # rejects as mutable, are never donated: donation._INTEGER_ELEMENT.)
                            metrics.counter_add("iree_donation_compile_error")
                            applied = {}
                if vmfb is None:
                    vmfb = compile_vmfb(text, self.config, computation.func_name, form)
            except CompileError as e:
                errors.append(e)
                continue
            if errors:
                metrics.counter_add(f"iree_input_fallback::{form}")
            # The imported text names the same arguments as the compiled form,
            # and holds every op that could write into one before decomposition.
            return vmfb, written_arguments(text) | written_arguments(computation.mlir), applied
        first = _name_culprit(errors[0], computation)
        error = first
        if len(errors) > 1:
            others = "; ".join(str(e).splitlines()[0] for e in errors[1:])
            error = CompileError(f"{first}\n(other input forms failed too: {others})",
                                 repro_path=first.repro_path, location=first.location)
            error.__cause__ = first
        try:
            raise error
        finally:
            # The raised error's traceback holds this frame: with the errors still in its
            # locals, that is a reference cycle, and the caller's pending tensors (in the
            # frames above) stayed alive until the next GC, so the failed value joined the
            # next graph and failed it too (LAZY_STRICT=1).
            del error, first, errors

    def compile_to_vmfb(self, computation: lowering.Computation) -> bytes:
        """The VM flatbuffer for ``computation``: from memory, from disk, or compiled.

        Needs no device, so any target compiles anywhere (CUDA in CI).
        """
        return self._artifact(computation)[0]

    def _artifact(
        self, computation: lowering.Computation, donated: Mapping[int, int] | None = None, *, from_disk: bool = True
    ) -> tuple[bytes, frozenset[int], dict[int, int]]:
        key = self.compile_key(computation, donated)
        hit = memo_get(vmfb_memo, key)
        if hit is not None:
            metrics.counter_add("iree_memo_hit")
            return hit
        blob = self.disk_cache.get(key) if from_disk else None
        artifact = None
        if blob is not None:
            try:
                artifact = _unpack_artifact(blob)
            except ValueError:  # intact bytes of another layout: drop, compile again
                self.disk_cache.discard(key)
        if artifact is None:
            artifact = self._compile_vmfb(computation, donated)
            self.disk_cache.put(key, _pack_artifact(*artifact))
        memo_put(vmfb_memo, key, artifact)
        return artifact

    def _compile_one(
        self, computation: lowering.Computation, donated: Mapping[int, int] | None = None
    ) -> IreeExecutableHandle:
        donated = normalize(donated, len(computation.args), len(computation.results))
        key = self.compile_key(computation, donated)
        artifact = self._artifact(computation, donated)
        try:
            return self._load(key, artifact, computation)
        except ValueError as e:
            if _DEVICE_LIMIT.search(str(e)):
                # Not a damaged module: this device cannot run a dispatch IREE
                # made (more bindings or push constants than it allows);
                # compiling again would make the same one.
                metrics.counter_add("iree_device_limit_refused")
                raise IreeCompileError(
                    f"the {self.config.device_uri or self.config.target.driver} device refused the compiled module: "
                    f"{str(e).splitlines()[0]}") from None
            return self._reload(key, computation, donated)
        except Exception:
            return self._reload(key, computation, donated)

    def _reload(self, key: str, computation: lowering.Computation,
                donated: Mapping[int, int]) -> IreeExecutableHandle:
        # An intact cached vmfb the runtime refuses (another runtime's
        # format, a damaged module with a matching checksum): delete it and
        # compile once more, so the next run does not fail on it again.
        memo_pop(vmfb_memo, key)
        self.disk_cache.discard(key)
        metrics.counter_add("iree_cached_module_load_error")
        artifact = self._artifact(computation, donated, from_disk=False)
        return self._load(key, artifact, computation)

    def _load(self, key: str, artifact: tuple[bytes, frozenset[int], dict[int, int]],
              computation: lowering.Computation) -> IreeExecutableHandle:
        vmfb, written, applied = artifact
        uri = self.config.device_uri
        exe = memo_get(exe_memo, (uri, key))
        if exe is None or exe.func_name != computation.func_name:
            exe = self.runtime_device.load(vmfb, computation.func_name)
            memo_put(exe_memo, (uri, key), exe)
        results = [(tuple(r.shape), r.logical_dtype or r.dtype) for r in computation.results]
        arg_tags = {i: a.dtype for i, a in enumerate(computation.args)
                    if a.logical_dtype is not None and a.logical_dtype != a.dtype}
        result_tags = {i: r.logical_dtype for i, r in enumerate(computation.results)
                       if r.logical_dtype is not None and r.logical_dtype != r.dtype}
        if written:
            metrics.counter_add("iree_protected_graphs")
        if applied:
            metrics.counter_add("iree_donating_graphs")
        return IreeExecutableHandle(exe, results, key, written, applied, arg_tags, result_tags)

    # -- the graph cache (MlirBackend): a second process skips lowering too -------------
    def executable_to_bytes(self, computation: lowering.Computation,
                            executable: IreeExecutableHandle) -> bytes | None:
        """The compile key and the artifact (vmfb, written arguments, applied
        donations) ``compile`` made. The executor's donation plan is part of
        the graph-cache key (``graph_key``), so a donating executable is found
        again for the same plan."""
        artifact = memo_get(vmfb_memo, executable.key)
        if artifact is None:
            return None
        return executable.key.encode() + b"\n" + _pack_artifact(*artifact)

    def executable_from_bytes(self, payload: bytes, computation: lowering.Computation) -> IreeExecutableHandle:
        key, _, packed = payload.partition(b"\n")
        artifact = _unpack_artifact(packed)
        memo_put(vmfb_memo, key.decode(), artifact)
        return self._load(key.decode(), artifact, computation)

    # -- execute ------------------------------------------------------------------------
    def execute_computation(
        self, executable: IreeExecutableHandle, arguments: Sequence[BackendData], device: BackendDevice
    ) -> list[BackendData]:
        views = [a.handle for a in arguments]
        for i, dtype in executable.arg_tags.items():
            views[i] = dtypes.retag(views[i], dtype)
        donated = executable.donated
        private = set(executable.written_args) - donated.keys()
        if donated:
            private |= _shared_donations(arguments, donated)
        if private:
            order = sorted(private)
            with metrics.timed("iree_argument_copies"):
                copies = transfer.device_copies(self.runtime_device, [views[i] for i in order])
            for i, view in zip(order, copies):
                views[i] = view
        n = len(executable.result_types)
        outs = executable.exe.run(views, n - len(donated))
        if donated:
            outs = results_in_order(outs, views, donated, n)
        # IREE returns a pass-through result (a clone it folded away, x * 1)
        # in the argument's own buffer, and equal results in one buffer.
        # Harmless while buffers are immutable, but the executor may donate
        # any result's buffer later (supports_donation): then each result
        # must own its buffer. Which results share is fixed by the compiled
        # code, so it is found once per executable.
        if executable.shared_results is None:
            executable.shared_results = _shared_results(views, outs, set(donated.values()))
        if executable.shared_results:
            order = executable.shared_results
            with metrics.timed("iree_result_copies"):
                copies = transfer.device_copies(self.runtime_device, [outs[i] for i in order])
            outs = list(outs)
            for i, view in zip(order, copies):
                outs[i] = view
        if executable.result_tags:
            outs = list(outs)
            for i, dtype in executable.result_tags.items():
                outs[i] = dtypes.retag(outs[i], dtype)
        # A dynamic dimension (-1) is known once the call returns: the view's shape.
        return [BackendData(v, tuple(v.shape) if -1 in shape else shape, dtype, device)
                for v, (shape, dtype) in zip(outs, executable.result_types)]


def _op_name(op: Any) -> str:
    """``aten::median.dim`` (``aten::median`` for a default overload)."""
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _buffer_id(view: object) -> str:
    # The runtime's HalBuffer wrappers are new Python objects per call; the
    # reference's text names the underlying buffer's address.
    return repr(view.get_buffer().ref)  # type: ignore[attr-defined]


def _shared_results(args: list, outs: list, donated_results: set[int]) -> list[int]:
    """Indices of results whose buffer is an argument's or an earlier result's.

    Donated results live in their argument's buffer by design (that argument
    is dead) and are not reported.
    """
    seen = {_buffer_id(v) for v in args}
    shared = []
    for i, v in enumerate(outs):
        if i in donated_results:
            continue
        bid = _buffer_id(v)
        if bid in seen:
            shared.append(i)
        else:
            seen.add(bid)
    return shared


#: A tensor type of a dtype IREE only stores (``dtypes.STORED_ONLY``), in the torch dialect.
_STORED_ONLY = re.compile(r"vtensor<\[[^\]]*\],(" + "|".join(re.escape(t) for t in dtypes.STORED_ONLY.values()) + r")>")


def _shared_donations(arguments: Sequence[BackendData], donated: Mapping[int, int]) -> set[int]:
    """Arguments to copy so that no donated buffer is read elsewhere.

    A donated shared scalar is copied itself (equal scalars share it); a
    donated view also passed at another index has that other argument copied.
    """
    out: set[int] = set()
    views = [a.handle for a in arguments]
    donated_ids = {id(views[a]): a for a in donated}
    for i, v in enumerate(views):
        a = donated_ids.get(id(v))
        if a is not None and a != i:
            out.add(i)
    for a in donated:
        if isinstance(arguments[a], SharedScalarData):
            out.add(a)
    return out


#: Bump when the cached payload's layout changes: old entries then never match.
_ARTIFACT_FORMAT = "iree-artifact-5"
#: The sources of the rules whose answers are cached with each vmfb (which
#: arguments compiled code may write; which donations are safe; how the
#: text is rewritten for IREE): editing one invalidates old entries by itself.
_RULES = (aliasing, donation, rewrites, miscompiles, fused_reductions, barriers, sign_extensions, region_results)
_RULES_DIGEST = hashlib.sha256("".join(inspect.getsource(m) for m in _RULES).encode()).hexdigest()[:16]


def _pack_artifact(vmfb: bytes, written: frozenset[int], donated: Mapping[int, int]) -> bytes:
    """A disk-cache payload: one text line (written arguments; applied donations), then the vmfb."""
    head = ",".join(map(str, sorted(written))) + ";" + key_suffix(donated)
    return (head + "\n").encode() + vmfb


def _unpack_artifact(blob: bytes) -> tuple[bytes, frozenset[int], dict[int, int]]:
    """The parts ``_pack_artifact`` stored; ValueError if ``blob`` is not one."""
    head, sep, vmfb = blob.partition(b"\n")
    if not sep or not vmfb:
        raise ValueError("not an IREE artifact")
    written, _, donated = head.decode().partition(";")
    pairs = (p.split(">") for p in donated.split(",") if p)
    return vmfb, frozenset(int(i) for i in written.split(",") if i), {int(a): int(r) for a, r in pairs}


def make_iree_cpu() -> IreeBackend:
    return IreeBackend("iree-cpu")


def make_iree_vulkan() -> IreeBackend:
    return IreeBackend("iree-vulkan")


def make_iree_cuda() -> IreeBackend:
    return IreeBackend("iree-cuda")


def _name_culprit(error: CompileError, computation: lowering.Computation) -> CompileError:
    """``error`` naming the op and user line that failed, when iree-compile's own
    diagnostic named neither (it blames a shared constant at ``loc(unknown)``):
    ``lowering.explain`` finds the op that torch-mlir's conversion leaves."""
    if error.location is not None:
        return error
    try:
        culprit = lowering.explain(computation)
    except Exception:  # a diagnosis must never hide the original error
        culprit = None
    if culprit is None:
        return error
    op, location = culprit
    head, _, rest = str(error).partition("\n")
    where = f" at {op}" + (f" ({location})" if location else "")
    named = CompileError(f"{head.replace(' failed', ' failed' + where, 1)}\n{rest}".rstrip(),
                         repro_path=error.repro_path, location=location)
    named.__cause__ = error
    return named
