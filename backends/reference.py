"""The reference CPU backend: torch -> linalg -> LLVM, run on MLIR's ExecutionEngine.

A real compile-and-run path with nothing but torch-mlir's own passes: the
torch-dialect computation is lowered to linalg-on-tensors, bufferized and
lowered to LLVM with torch-mlir's ``refback-*`` passes and upstream MLIR
passes, and JIT-compiled by ``torch_mlir.execution_engine``. Device data are
CPU tensors passed to the compiled function as memref descriptors (no copy
for contiguous tensors). Results come back through a per-signature callback
(the RefBackend calling convention), are copied into torch tensors, and the
compiled code's result buffers are freed.

The generated loops are naive: this backend is for correctness and as the
example of a complete MLIR backend, not for speed (use ``iree-cpu``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from lazy_core import config, metrics
from lazy_core.backend import BackendData, BackendDevice
from lazy_mlir import lowering

from .mlir_backend import MlirBackend, text_digest
from .reference_bf16 import BF16_SOURCE, truncate_double_to_bf16_through_float
from .reference_libm import LIBM_SOURCE, call_libm
from .reference_memref_copy import MEMREF_COPY_SYMBOL, memref_copy_address, raise_copy_error
from .reference_results import CONSUME_PREFIX, MAX_RESULTS_PER_CALL, split_result_calls

_CONSUME_PREFIX = CONSUME_PREFIX
#: The pass after which results are handed back by calls (reference_results.py splits them).
_MUNGE = "refback-munge-calling-conventions"
#: Graphs larger than this (lines of torch-dialect IR) JIT at -O0 (ReferenceBackend._opt_level_for).
_MAX_OPTIMIZED_LINES = 12_000

# Torch dtype -> (numpy dtype used to pass the buffer, memref token in callback names).
_NP_DTYPES: dict[torch.dtype, Any] = {
    torch.float32: np.float32,
    torch.float64: np.float64,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.int16: np.int16,
    torch.int8: np.int8,
    torch.uint8: np.uint8,
    torch.bool: np.bool_,
}
_TOKEN_DTYPES = {
    "mrf16": np.float16, "mrf32": np.float32, "mrf64": np.float64,
    "mri1": np.bool_, "mri8": np.int8, "mri16": np.int16, "mri32": np.int32, "mri64": np.int64,
    "mrui8": np.uint8,
}
_GLOBAL_SENTINEL = 0xDEADBEEF  # "allocated" pointer of memref.get_global buffers


def _refback_pipeline(runtime_checks: bool) -> str:
    passes = [
        "func.func(linalg-generalize-named-ops)",
        "func.func(linalg-fuse-elementwise-ops)",
        "convert-shape-to-std",
        "func.func(refback-generalize-tensor-pad)",
        "func.func(refback-generalize-tensor-concat)",
        "func.func(tm-tensor-bufferize)",
        "one-shot-bufferize{copy-before-write bufferize-function-boundaries "
        "function-boundary-type-conversion=identity-layout-map}",
        "refback-mlprogram-bufferize",
        "buffer-deallocation-pipeline",
        "inline",
        "refback-munge-calling-conventions",
        "func.func(tm-tensor-to-loops)",
        "func.func(refback-munge-memref-copy)",
        "func.func(convert-linalg-to-loops)",
        "func.func(lower-affine)",
        "convert-scf-to-cf",
    ]
    if runtime_checks:
        passes.append("generate-runtime-verification")
    passes += [
        "func.func(refback-expand-ops-for-llvm)",
        "arith-emulate-unsupported-floats{source-types=bf16 target-type=f32}",
        "func.func(arith-expand{include-bf16=true})",
        "func.func(convert-math-to-llvm)",
        "convert-math-to-libm",
        "expand-strided-metadata",
        "finalize-memref-to-llvm",
        "lower-affine",
        "convert-bufferization-to-memref",
        "finalize-memref-to-llvm",
        "func.func(convert-arith-to-llvm)",
        "convert-vector-to-llvm",
        "convert-func-to-llvm",
        "convert-cf-to-llvm",
        "convert-complex-to-llvm",
        "reconcile-unrealized-casts",
    ]
    return "builtin.module(" + ",".join(passes) + ")"


class _RankedDescriptorHeader(ctypes.Structure):
    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_longlong)]


_libc = ctypes.CDLL(None)
_libc.free.argtypes = [ctypes.c_void_p]


@functools.cache
def _half_float_runtime() -> list[str]:
    """Libraries the JIT links for f16 conversions, which LLVM lowers to calls
    (``__truncdfhf2``, ``__extendhfsf2``) that the ExecutionEngine does not
    define: ``torch.full((2,), 0.1, dtype=torch.float16)`` failed with "Symbols
    not found". GCC 12's libgcc_s defines them; without it f16 stays unsupported."""
    name = ctypes.util.find_library("gcc_s")
    if not name:
        return []
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return []
    if not (hasattr(lib, "__truncdfhf2") and hasattr(lib, "__extendhfsf2")):
        return []
    # The JIT wants a path, not a soname: the loaded copy's, from the process's map.
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line and name in line}
    except OSError:
        return []
    return sorted(paths)[:1]


class ReferenceExecutable:
    """A JIT-compiled function plus the callbacks that receive its results."""

    def __init__(self, module: Any, func_name: str, opt_level: int, n_results: int) -> None:
        from torch_mlir.execution_engine import ExecutionEngine

        self.func_name = func_name
        self.n_results = n_results
        self._result: list[torch.Tensor] = []
        self._allocated: list[int] = []
        self._inputs: set[int] = set()
        self.engine = ExecutionEngine(module, opt_level=opt_level, shared_libs=_half_float_runtime())
        # A strided copy calls MLIR's C runtime, which torch-mlir's wheel lacks.
        self.engine.raw_register_runtime(MEMREF_COPY_SYMBOL, memref_copy_address())
        self._callbacks = []
        with module.context:
            for op in module.body:
                name = str(op.attributes["sym_name"]).strip('"')
                if name.startswith(_CONSUME_PREFIX):
                    self._register(name)

    def _register(self, name: str) -> None:
        from torch_mlir.runtime import UnrankedMemRefDescriptor, unranked_memref_to_numpy

        tokens = name[len(_CONSUME_PREFIX):].split("_")
        for t in tokens:
            if t not in _TOKEN_DTYPES:
                raise lowering.LoweringError(f"reference backend: unsupported result type {t!r}")
        proto = ctypes.CFUNCTYPE(None, *[ctypes.POINTER(UnrankedMemRefDescriptor) for _ in tokens])

        def consume(*ptrs: Any) -> None:
            # Copy every result now, free after the last chunk (__call__): results may share
            # a buffer (a view of another result, e.g. matmul's squeezed mm).
            self._result.extend(
                torch.from_numpy(np.array(unranked_memref_to_numpy(ptr, _TOKEN_DTYPES[token]), copy=True))
                for ptr, token in zip(ptrs, tokens))
            for ptr in ptrs:
                header = ctypes.cast(ptr[0].descriptor, ctypes.POINTER(_RankedDescriptorHeader))[0]
                self._allocated.append(header.allocated or 0)

        cb = proto(consume)
        self._callbacks.append(cb)
        self.engine.register_runtime(name, cb)

    def __call__(self, inputs: Sequence[torch.Tensor], result_dtypes: Sequence[torch.dtype]) -> list[torch.Tensor]:
        from torch_mlir.runtime import get_unranked_memref_descriptor

        keep = []
        ffi_args = []
        self._inputs = set()
        for t in inputs:
            t = t.contiguous()
            arr = t.numpy()
            keep.append(arr)
            self._inputs.add(t.data_ptr())
            ffi_args.append(ctypes.pointer(ctypes.pointer(get_unranked_memref_descriptor(arr))))
        self._result, self._allocated = [], []
        try:
            self.engine.invoke(self.func_name, *ffi_args)
        finally:
            # Free buffers the compiled code allocated for us: not globals, not our own
            # inputs, each once.
            freed: set[int] = set()
            for alloc in self._allocated:
                if alloc and alloc != _GLOBAL_SENTINEL and alloc not in self._inputs and alloc not in freed:
                    freed.add(alloc)
                    _libc.free(alloc)
        results, self._result, self._allocated = self._result, [], []
        raise_copy_error()
        if len(results) != self.n_results:
            raise RuntimeError(f"{self.func_name} produced {len(results)} results, expected {self.n_results}")
        # i1 results come back as numpy bools already; bf16 ones as f32 carriers.
        return [lowering.from_carrier(r, dtype) for r, dtype in zip(results or [], result_dtypes)]


class ReferenceBackend(MlirBackend):
    """``reference``: the correctness oracle. Correct first; IREE is the fast path (and the default)."""

    name = "reference"
    lowering_target = "linalg-on-tensors"
    #: Its buffers are CPU tensors (lazy_core.tiering runs a graph seen once op by op).
    host_memory = True

    def __init__(self, opt_level: int | None = None, runtime_checks: bool = False) -> None:
        self.opt_level = int(config.get("LAZY_REFERENCE_OPT_LEVEL")) if opt_level is None else opt_level
        self.runtime_checks = runtime_checks

    def cache_key(self) -> str:
        return f"reference-O{self.opt_level}-checks{int(self.runtime_checks)}-bf16casts-widesums"

    def supports_op(self, op: Any) -> bool:
        return super().supports_op(op)

    def lowering_options(self) -> dict[str, Any]:
        # bf16 computed as PyTorch does (f32, rounded per op; lowering.bf16), rounded
        # by bf16 round trips: torch-mlir's linalg conversion has no aten.view.dtype
        # for "bits", and the pipeline's arith-expand lowers the round trips to
        # integer code, so the JIT needs no __truncsfbf2 (compiler-rt). bf16
        # crosses the boundary as f32 values: the RefBackend calling convention
        # has no bf16 memrefs.
        # Float32 sums and means accumulate in float64 (lowering/wide_sums.py).
        return {"emulate_bf16": "casts", "wide_sums": True}

    def compile(self, computations: Sequence[lowering.Computation]) -> list[Any]:
        out = []
        for comp in computations:
            linalg = self.lower_to_target(comp)
            module = truncate_double_to_bf16_through_float(call_libm(linalg.clone_module()))
            linalg = replace(linalg, module=module)
            pipeline = _refback_pipeline(self.runtime_checks)
            cut = pipeline.index(_MUNGE) + len(_MUNGE)
            munged = lowering.pipelines.run_pipeline(linalg, pipeline[:cut] + ")", "munged")
            if len(comp.results) > MAX_RESULTS_PER_CALL:
                from torch_mlir import ir

                split = split_result_calls(munged.asm(locations=False))
                if split is not None:
                    munged = replace(munged, module=ir.Module.parse(split, context=munged.module.context))
            llvm = lowering.pipelines.run_pipeline(munged, "builtin.module(" + pipeline[cut + 1:], "llvm")
            out.append(self._executable(llvm.module, comp))
        return out

    def _opt_level_for(self, comp: lowering.Computation) -> int:
        """``opt_level``, or 0 for a graph too large for LLVM's optimizer to finish in reasonable
        time: -O2 took 4.6-12 s on HF training steps of 3,700-5,600 torch-dialect lines and more
        than 18 minutes (killed) on MobileViT's (33,000 lines), which -O0 compiles in seconds."""
        lines = comp.mlir.count("\n")
        if self.opt_level == 0 or lines <= _MAX_OPTIMIZED_LINES:
            return self.opt_level
        if config.debug_level() >= 1:
            sys.stderr.write(f"lazy_core: reference backend: {comp.func_name} has {lines} lines of torch-dialect "
                             f"IR (over {_MAX_OPTIMIZED_LINES}): JIT-compiled at -O0, not -O{self.opt_level}\n")
        metrics.counter_add("reference_unoptimized_graphs")
        return 0

    def _executable(self, llvm_module: Any, comp: lowering.Computation) -> ReferenceExecutable:
        exe = ReferenceExecutable(llvm_module, comp.func_name, self._opt_level_for(comp), len(comp.results))
        exe.result_dtypes = [r.logical_dtype or r.dtype for r in comp.results]  # type: ignore[attr-defined]
        exe.arg_dtypes = [a.dtype for a in comp.args]  # type: ignore[attr-defined]
        # Kept for executable_to_bytes: the graph cache stores this LLVM-dialect module.
        exe.llvm_module = llvm_module  # type: ignore[attr-defined]
        return exe

    # -- the graph cache (MlirBackend): the LLVM-dialect module, as bytecode --------------
    # A hit skips the FX build, the import and every torch-mlir pipeline; only
    # the ExecutionEngine's LLVM JIT runs again (it has no object cache). The
    # key covers what changes the LLVM module: the pipeline, the libm and bf16 rewrites.
    def persistent_key(self) -> str:
        return f"{self.cache_key()}|{text_digest(_refback_pipeline(self.runtime_checks) + LIBM_SOURCE + BF16_SOURCE)}"

    def executable_to_bytes(self, computation: lowering.Computation, executable: Any) -> bytes | None:
        import io

        module = getattr(executable, "llvm_module", None)
        if module is None:
            return None
        buf = io.BytesIO()
        module.operation.write_bytecode(buf)
        return buf.getvalue()

    def executable_from_bytes(self, payload: bytes, computation: lowering.Computation) -> ReferenceExecutable:
        from torch_mlir import ir

        module = ir.Module.parse(payload, context=lowering.mlir_context())
        return self._executable(module, computation)

    def execute_computation(
        self, executable: Any, arguments: Sequence[BackendData], device: BackendDevice
    ) -> list[BackendData]:
        inputs = [lowering.to_carrier(a.handle, d) for a, d in zip(arguments, executable.arg_dtypes)]
        results = executable(inputs, executable.result_dtypes)
        return [BackendData(r, r.shape, r.dtype, device) for r in results]
