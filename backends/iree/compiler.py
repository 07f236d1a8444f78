"""Running ``iree-compile`` on a torch-dialect computation, and explaining failures.

IREE's torch input pipeline (``input_type="torch"``) takes torch-dialect
text, in torch-mlir's backend-contract form or as imported, with its
``loc("file":line:0)`` locations; torch-mlir's linalg-on-tensors form goes
in with ``input_type="none"`` (see config for which forms are tried). A failed compile
becomes ``lazy_core.CompileError`` carrying the user's source line (from the
first diagnostic that has one) and a repro file holding the MLIR and the
exact command line, so the failure can be replayed outside Python.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import tempfile
from collections.abc import Callable
from dataclasses import replace

from lazy_core import config as lazy_config
from lazy_core import metrics
from lazy_core.backend import CompileError

from . import bounded_compile
from .barriers import ExpansionFailed
from .config import IreeConfig
from .fused_reductions import fused_reduction_races, isolate_reductions
from .loops import loop_flags
from .miscompiles import refusal
from .region_results import misrouted_duplicates, outputs_behind_barriers, print_flags, read_printed
from .sign_extensions import cloned_sign_extensions, isolate_sign_extensions
from .strided_slices import fused_strided_slices, isolate_strided_slice_sources

# "file:line:col: error: message" as iree-compile prints diagnostics, or the raw MLIR form.
_DIAG = re.compile(r"^(?P<file>[^\s:][^:\n]*):(?P<line>\d+):\d+: error: (?P<msg>.*)$", re.M)
_LOC = re.compile(r'loc\("(?P<file>[^"]+)":(?P<line>\d+):\d+\)')
_OP = re.compile(r"'?(torch\.(?:aten|prims|operator)[\w.]*)'?")
_OPERATOR_NAME = re.compile(r'name = "([\w.]+)"')


def compiler_version() -> str:
    """The IREE compiler's version string (part of every cache key)."""
    try:
        from iree.compiler.version import VERSION

        return str(VERSION)
    except Exception:  # pragma: no cover - very old packages
        from importlib.metadata import version

        return version("iree-base-compiler")


def input_type(form: str) -> str:
    """iree-compile's ``--iree-input-type`` for one of our input forms."""
    # torch-mlir's linalg output may hold tm_tensor ops (scatter from embedding
    # and max-pool backward); IREE accepts those under the tm_tensor input type.
    return "tm_tensor" if form == "linalg" else "torch"


def command_line(config: IreeConfig, source: str = "input.mlir", form: str = "raw", mlir: str = "") -> str:
    """The iree-compile invocation equivalent to ``compile_vmfb`` of ``mlir`` (for repros)."""
    args = [
        "iree-compile",
        source,
        f"--iree-input-type={input_type(form)}",
        f"--iree-hal-target-backends={config.target.target_backend}",
        *config.compile_flags,
        *loop_flags(mlir, config.compile_flags),
        "-o",
        "out.vmfb",
    ]
    return " ".join(shlex.quote(a) for a in args)


def compile_vmfb(mlir: str, config: IreeConfig, func_name: str, form: str = "raw") -> bytes:
    """Compile ``mlir`` (in input ``form``) to a VM flatbuffer or raise ``IreeCompileError``."""
    import iree.compiler as ic

    metrics.counter_add("iree_compile")
    flags = list(config.compile_flags)
    flags += loop_flags(mlir, flags)
    backends = [config.target.target_backend]
    try:
        with metrics.timed(f"iree_compile:{config.target.target_backend}"):
            spirv = config.target.target_backend == "vulkan-spirv"
            wanted = ("flow", "global-optimization") + (("executable-configurations",) if spirv else ())
            finish, phases = _compile_with_phases(mlir, input_type(form), backends, flags, wanted)
            before_dispatch = phases.get("global-optimization", "")
            races, extensions = _spirv_hazards(phases) if spirv else ([], [])
            strided = fused_strided_slices(phases.get("flow", ""))
            first_flow = ""
            if races or extensions or strided:
                first_flow = phases.get("flow", "")
                # Compile again from before dispatch formation, each hazard behind a barrier.
                source = isolated = phases["global-optimization"]
                for found, barriers, counter in ((races, isolate_reductions, "iree_isolated_reductions"),
                                                 (extensions, isolate_sign_extensions, "iree_isolated_sign_extensions"),
                                                 (strided, isolate_strided_slice_sources,
                                                  "iree_isolated_strided_slices")):
                    try:
                        done = barriers(isolated) if found else None
                    except ExpansionFailed as e:
                        metrics.counter_add("iree_refused_softmax_expansion")
                        raise IreeCompileError.refused(
                            f"{e}: the reductions to keep apart cannot be found, so the graph is not compiled",
                            "\n".join(races), mlir, config, func_name, form) from None
                    if done is not None:
                        isolated = done
                        metrics.counter_add(counter)
                if isolated is not source:
                    finish, phases = _compile_with_phases(
                        isolated, input_type(form), backends, flags + ["--compile-from=global-optimization"],
                        wanted)
                    before_dispatch = isolated
                    races, extensions = _spirv_hazards(phases) if spirv else ([], [])
                    strided = fused_strided_slices(phases.get("flow", ""))
            misrouted = misrouted_duplicates(phases.get(_REGIONS, ""))
            kept_apart = outputs_behind_barriers(before_dispatch) if misrouted and before_dispatch else None
            if kept_apart is not None:
                # Compile again from before dispatch formation, each output behind a barrier.
                metrics.counter_add("iree_outputs_kept_apart")
                finish, phases = _compile_with_phases(
                    kept_apart, input_type(form), backends, flags + ["--compile-from=global-optimization"],
                    wanted)
                races, extensions = _spirv_hazards(phases) if spirv else ([], [])
                strided = fused_strided_slices(phases.get("flow", ""))
                misrouted = misrouted_duplicates(phases.get(_REGIONS, ""))
            refused = refusal(phases.get("flow", ""), config.target.target_backend, tuple(config.compile_flags),
                              first_flow)
            if refused is None and misrouted:
                refused = ("iree_refused_misrouted_result",
                           "a dispatch region returning one value twice, not as its first result: IREE 3.13 "
                           "replaces the duplicate by the region's first result, a wrong value, so the graph is "
                           "not compiled", "\n".join(misrouted))
            if refused is None and races:
                refused = ("iree_refused_fused_reduction",
                           "ops fused in one SPIR-V dispatch that IREE 3.13 spreads over threads each on its own "
                           "with no barrier between them (a reduction and an op reading its result, a fill and the "
                           "convolution accumulating into it): threads would read values other threads have not "
                           "written yet, wrong values, so the graph is not compiled", "\n".join(races))
            if refused is None and extensions:
                refused = ("iree_refused_sign_extension",
                           "a 32-to-64-bit sign extension IREE cloned into the dispatch that reads it: lavapipe "
                           "compares such values with 0 wrongly, so the graph is not compiled", "\n".join(extensions))
            if refused is None and strided:
                refused = ("iree_refused_strided_slice",
                           "a strided slice read in the dispatch that computes its source: IREE 3.13's code "
                           "generator drops the stride, a wrong value, so the graph is not compiled",
                           "\n".join(strided))
            if refused is not None:
                counter, why, evidence = refused
                metrics.counter_add(counter)
                raise IreeCompileError.refused(why, evidence, mlir, config, func_name, form)
            return finish()
    except bounded_compile.CompileRanAway as e:
        metrics.counter_add("iree_compile_ran_away")
        raise IreeCompileError.refused(f"{e}; an upstream compiler loop, the graph is not compiled", "",
                                       mlir, config, func_name, form) from None
    except ic.CompilerToolError as e:
        if _needs_system_linking(str(e), config):
            return _compile_system_linked(mlir, config, func_name, form)
        raise IreeCompileError.from_diagnostics(str(e), mlir, config, func_name, form) from None


#: llvm-cpu's default executables are IREE's own ELF files, linked with nothing but IREE's device
#: library: a call into libm has nothing to resolve it. MLIR expands float32 math into
#: polynomials, but float64 ``sin``, ``cos``, ``tan``, ``atan``, ``asin``, ``acos``, ``atan2``,
#: ``tanh``, ``fmod``/``remainder``, ``log2`` (and what is built from them: ``gelu`` with
#: ``tanh``, ``mish``, ``floor_divide``) stay libm calls, and every graph holding one failed to
#: link ("failed to link executable and generate target dylib") and ran op by op on the CPU.
#: Such a graph is compiled again as a system shared library, which the runtime loads with the
#: process's own libm (within an ulp of eager, whose CPU kernels use SLEEF or the same libm).
_SYSTEM_LINKING = "--iree-llvmcpu-link-embedded=false"


def _needs_system_linking(diagnostics: str, config: IreeConfig) -> bool:
    return (config.target.target_backend == "llvm-cpu" and "failed to link executable" in diagnostics
            and _SYSTEM_LINKING not in config.compile_flags)


def _compile_system_linked(mlir: str, config: IreeConfig, func_name: str, form: str) -> bytes:
    metrics.counter_add("iree_system_linked")
    return compile_vmfb(mlir, replace(config, compile_flags=(*config.compile_flags, _SYSTEM_LINKING)), func_name, form)


def _spirv_hazards(phases: dict[str, str]) -> tuple[list[str], list[str]]:
    """What a SPIR-V compile's ``executable-configurations`` phase holds that lavapipe would run
    into wrong values: reductions raced by their consumers, cloned sign extensions."""
    configured = phases.get("executable-configurations", "")
    return fused_reduction_races(configured), cloned_sign_extensions(configured)


def _compile_with_phases(mlir: str, kind: str, backends: list[str], flags: list[str],
                         wanted: tuple[str, ...]) -> tuple[Callable[[], bytes], dict[str, str]]:
    """A function finishing the compile into a vmfb and, by phase name, the IR iree-compile wrote
    after the ``wanted`` phases, and under ``_REGIONS`` the IR after dispatch regions take their
    producers (region_results.py).

    The phases are checked for code IREE turns into wrong values (miscompiles.py,
    fused_reductions.py) before any code is generated: the first iree-compile stops after the
    last wanted phase (``--compile-to``), and ``finish`` runs a second one from that phase's IR
    (``--compile-from``; the vmfb is byte for byte a one-process compile's). A graph the checks
    send back to be compiled again with barriers, or refuse, no longer pays for the code
    generation of a variant that is thrown away: that was most of a compile (0.4 of 0.5 s of a
    small graph on llvm-cpu, 1.3 of 1.9 s on SPIR-V); the split costs one tool start."""
    last = max(wanted, key=_PHASES.index)
    with tempfile.TemporaryDirectory(prefix="lazy-iree-phases-") as tmp:
        tree = os.path.join(tmp, "regions")
        staged = bounded_compile.compile_str(mlir, input_type=kind, target_backends=backends,
                                             extra_args=flags + [f"--compile-to={last}", f"--dump-compilation-phases-to={tmp}",
                                                                 *print_flags(tree)])
        phases = {_REGIONS: read_printed(tree)}
        for name in os.listdir(tmp):  # <source>.<n>.<phase>.mlir
            parts = name.split(".")
            if len(parts) >= 3 and parts[-1] == "mlir" and parts[-2] in wanted:
                phases[parts[-2]] = _read(os.path.join(tmp, name))

    def finish() -> bytes:
        return bounded_compile.compile_str(staged, input_type=kind, target_backends=backends,
                                           extra_args=[f for f in flags if not f.startswith("--compile-from=")]
                                           + [f"--compile-from={last}"])

    return finish, phases


#: iree-compile's phases in pipeline order (``--compile-to``/``--compile-from``).
_PHASES = ("input", "abi", "preprocessing", "global-optimization", "dispatch-creation", "flow", "stream",
           "executable-sources", "executable-configurations", "executable-targets", "hal", "vm", "end")


#: The key of ``_compile_with_phases``'s result holding the dispatch regions' IR.
_REGIONS = "dispatch-regions"


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


class IreeCompileError(CompileError):
    """iree-compile rejected a computation; names the op and the user's line."""

    @classmethod
    def refused(cls, why: str, evidence: str, mlir: str, config: IreeConfig, func_name: str,
                form: str) -> IreeCompileError:
        """A computation IREE would compile into wrong values, refused by us."""
        repro = write_repro(mlir, config, func_name, f"refused: {why}\n{evidence}", form)
        return cls(f"iree-compile ({config.target.target_backend}, {form} input) refused: {why}\n"
                   f"repro: {repro}", repro_path=repro)

    @classmethod
    def from_diagnostics(
        cls, text: str, mlir: str, config: IreeConfig, func_name: str, form: str = "raw"
    ) -> IreeCompileError:
        diagnostics = text.split("\nInvoked with:")[0]
        location = None
        message = None
        for m in _DIAG.finditer(diagnostics):
            message = message or m.group("msg").strip()
            if m.group("file") not in ("-", "<stdin>", "<unknown>") and location is None:
                location = f"{m.group('file')}:{m.group('line')}"
                message = m.group("msg").strip()
                break
        if location is None:
            loc = _LOC.search(diagnostics)
            if loc:
                location = f"{loc.group('file')}:{loc.group('line')}"
        if message is None:
            message = _crash_summary(diagnostics)
        if message is None:
            lines = [ln.strip() for ln in diagnostics.splitlines() if "error" in ln.lower()]
            message = lines[0] if lines else diagnostics.strip().splitlines()[-1]
        op = _culprit(message)
        repro = write_repro(mlir, config, func_name, diagnostics, form)
        what = f"iree-compile ({config.target.target_backend}, {form} input) failed"
        if op:
            what += f" at {op}"
        short = message if len(message) < 400 else message[:400] + " ..."
        full = f"{what}: {short}"
        if location:
            full += f" [at {location}]"
        full += f"\nrepro: {repro}"
        return cls(full, repro_path=repro, location=location)


_EXIT = re.compile(r"Error code: (-?\d+)")
_PASS_FRAME = re.compile(r"(\w+Pass)::runOnOperation")
_LLVM_ERROR = re.compile(r"^(?://\s*)?(LLVM ERROR: .*|.*Assertion .* failed.*)$", re.M)


def _crash_summary(diagnostics: str) -> str | None:
    """"iree-compile crashed ..." naming the signal, the pass and any LLVM error, if it crashed."""
    code = _EXIT.search(diagnostics)
    if "Stack dump" not in diagnostics and not (code and int(code.group(1)) < 0):
        return None
    what = "iree-compile crashed"
    if code and int(code.group(1)) < 0:
        what += f" (signal {-int(code.group(1))})"
    frame = _PASS_FRAME.search(diagnostics)
    if frame:
        what += f" in {frame.group(1)}"
    error = _LLVM_ERROR.search(diagnostics)
    if error:
        what += f": {error.group(1).strip()}"
    return what


def _culprit(message: str) -> str | None:
    m = _OPERATOR_NAME.search(message)
    if m and "torch.operator" in message:
        return m.group(1)
    m = _OP.search(message)
    return m.group(1) if m else None


def repro_dir() -> str:
    d = lazy_config.get("LAZY_REPRO_DIR") or os.path.join(tempfile.gettempdir(), "lazy-mlir-repros")
    os.makedirs(d, exist_ok=True)
    return d


def write_repro(mlir: str, config: IreeConfig, func_name: str, diagnostics: str = "", form: str = "raw") -> str:
    """Save ``mlir`` with the command line (and diagnostics) that reproduce the failure."""
    digest = hashlib.sha1((mlir + config.cache_key()).encode()).hexdigest()[:12]
    path = os.path.join(repro_dir(), f"{func_name}-iree-{config.target.target_backend}-{form}-{digest}.mlir")
    with open(path, "w") as f:
        f.write(f"// Reproduce: {command_line(config, path, form, mlir)}\n")
        for line in diagnostics.strip().splitlines():
            f.write(f"// {line}\n")
        f.write(mlir)
    return path
