"""What an IREE backend compiles for and where it runs: targets, flags, devices.

Three registered backends share one implementation and differ only in this
configuration. Users adjust it without code through environment variables,
read when a backend is constructed:

``LAZY_IREE_FLAGS``
    extra ``iree-compile`` flags for every IREE backend (shell syntax).
``LAZY_IREE_<CPU|VULKAN|CUDA>_FLAGS``
    extra flags for one backend, after the common ones.
``LAZY_IREE_DEVICE`` / ``LAZY_IREE_<CPU|VULKAN|CUDA>_DEVICE``
    the runtime device: an IREE device URI (``cuda://1``, ``vulkan://0``) or a
    bare ordinal. A URI naming another driver is ignored by that backend, so
    one setting can steer ``iree-cuda`` without breaking ``iree-cpu``.
``LAZY_IREE_INPUT``
    the forms of a computation to offer iree-compile, in order, comma separated
    (default ``torch,raw``); the first that compiles wins. ``torch`` is
    torch-mlir's backend contract (decomposed ops with refined shapes), then
    IREE's torch input pipeline; ``raw`` is the IR as imported, lowered by
    IREE's torch pipeline alone; ``linalg`` is torch-mlir's linalg-on-tensors
    lowering (the reference backend's), compiled with ``--iree-input-type=none``.
    Measured on IREE 3.13 / torch-mlir 20261001: ``raw`` rejects
    ``nll_loss_forward`` (IREE's decomposition leaves an unranked
    ``prim.NumToTensor``), which ``torch`` handles; ``linalg`` cannot carry
    ``tm_tensor`` ops (sort, cumsum) to IREE and torch-mlir's in-process
    TorchToLinalg crashes the process on some graphs (``int8 * 3``), so it is
    opt-in only. ``raw`` stays as the backup for graphs torch-mlir's own
    pipeline cannot bring to its contract.

A user flag replaces a default flag of the same option (LLVM options may be
given once). Flags change the compiled code, so they are part of the cache key.

bfloat16 (every target): computed in f32 and rounded to bf16 after each op
by integer code the lowering writes (``lowering.bf16``, mode ``"bits"``);
bf16 buffers are passed to the compiled function as int16 views of the same
bytes. IREE 3.13 given bf16 itself folds intermediate roundings away
(``x.to(torch.bfloat16) + 1`` rounded once), accumulates bf16 reductions in
bf16 (a 64000-element sum of values in [0, 1) gave 4096 instead of about
32000 on llvm-cpu), fails to compile a bf16 softmax on llvm-cpu and any bf16
reduction on vulkan-spirv (``'spirv.Bitcast' op mismatch in result type
bitwidth 32 and operand type bitwidth 16``). ``--iree-input-promote-bf16-to-f32``
is no way out: it drops every rounding (``x.bfloat16().float()`` is ``x``)
and writes f32 bytes into result buffers tagged bf16.

Defaults per target:
* every target: ``--iree-input-demote-f64-to-f32=false``. IREE demotes f64 to
  f32 by default, but (IREE 3.13, torch input) the function boundary still
  asserts f64 buffer views while the code reads and allocates f32: inputs
  are misread and results fail to be created. So f64 is computed in f64, and
  a flag turning demotion back on is refused. A Vulkan device without f64
  then fails to compile such graphs, which run eagerly with a warning.
* every target: ``--iree-opt-const-eval=false``. IREE evaluates constant
  subexpressions at compile time by compiling and running them with the
  same code generator; a reduction it miscompiles then arrives as a wrong
  literal that no later check can see (``miscompiles.py``). Without it the
  same expressions run once when the module loads, where they are checked.
* every target: ``--iree-dispatch-creation-element-wise-fuse-multi-reduction=false``.
  With it, IREE fuses an elementwise producer into a reduction over several
  dims and keeps the producer's result as an extra output indexed by the
  reduction loop; a producer that folded to a constant leaves a reduction with
  no input, whose constant llvm-cpu adds once instead of once per element:
  ``torch.zeros(3, 3).logical_not().float().sum()`` gave 1.0 (fuzz seed 300).
  The reduction itself still fuses with what feeds it one dim at a time.
* every target: ``--iree-opt-const-expr-hoisting=false``. IREE moves
  subexpressions that depend on no argument into globals computed when the
  module loads; with results of several element types from one such
  computation, IREE 3.13 packed the globals into one resource and read the
  i32 and f32 results from the i1 result's offset: a graph returning
  ``masked_fill(zeros(int32), mask_of_false, 0.5)`` next to a ``logical_not``
  of it gave 1 and 1.4e-45 (the bits of ``true``) on llvm-cpu and Vulkan
  (fuzz seed 600; the raw input form fails to compile with "invalid Read
  access range ... of resource %__hoisted_tensor_i1 with size 1"). Such
  subexpressions now run with the rest of the graph, each call.
* every target: ``--iree-stream-partitioning-favor=debug``: a graph's dispatches
  run one after another in program order. A write through a view
  (``slice_scatter``, ``index_put``, a fill of ``x[:, 1:]``) becomes an in-place
  write into the buffer of the value it updates; where that value is also read
  elsewhere, IREE 3.13 first inserts a copy for the write, then removes it
  again (``ElideAsyncCopies``) on the grounds that the other reads come first
  in program order, and its scheduler, which orders dispatches only by their
  SSA operands, then ran a read after the write (``v2 = v3 + v4`` after
  ``v3[0].logical_not_()``, fuzz seed 1700 p308) or the copy that keeps the old
  value after the write into it (``v6 = minimum(v2, v2.to(float64));
  v6[:, 1:].fill_(nan)`` put NaN into the conversion too, seed 1502 p670): the
  final ``stream.cmd.execute`` showed the write in an earlier concurrent group
  than the read. In program order the elided form is right. Measured cost:
  none within noise on ``bench/train_step.py`` (BERT 78.0 / 71.1 ms per step
  without, 78.6 with; CNN 8.5 / 9.0 without, 8.7 with; iree-cpu, 2 cores);
  ``test_iree_correctness.py`` keeps the IREE default's wrong value as a canary.
* llvm-cpu: ``--iree-llvmcpu-target-cpu=host`` (the host's vector units) and
  ``--iree-global-opt-use-im2col-for-convs``. IREE's CPU code for a
  convolution in PyTorch's NCHW layout is a direct loop nest that reaches
  about 2-3 GFLOP/s; a training step's backward pass adds two more
  convolutions per layer, so convolutions were 90% of a small CNN's step.
  Rewritten as im2col + matmul they use the matmul code path: the
  ``bench/train_step.py`` CNN step graph ran in 30.4 ms before, 15.6 ms
  after (iree-benchmark-module, one local-task worker; see
  ``docs/iree-performance.md``).
  Graphs without convolutions compile to the same code.
  ``--iree-global-opt-use-im2col-for-convs=false`` turns it off.
* vulkan-spirv: ``--iree-hal-memoization=false``. IREE records a graph's
  command buffers once, when the module loads, and replays them each call
  with that call's buffers. On iree-vulkan (IREE 3.13, lavapipe) a replay
  wrote into memory a buffer of an earlier call had held: once freed, that
  memory belonged to a tensor uploaded since, so a later call overwrote the
  first 8 bytes of live inputs (the uploaded ``arange`` of T5's masks read
  0x0101010101010101, the bytes of a bool mask; an int64 check value read an
  intermediate's floats) while every result of that call was right. Found by
  the model zoo's T5 on iree-vulkan. With every upload, result and staging
  buffer kept alive, or with this flag (or
  ``--iree-hal-indirect-command-buffers=false``), the inputs stayed intact:
  commands are then recorded with each call's own buffers.
* vulkan-spirv: on Mesa's lavapipe ``--iree-vulkan-target=llvmpipe``. IREE's
  default Vulkan target (a mobile baseline without 16-bit storage) emulates
  f16 buffers and gets them wrong on lavapipe, and lacks f64. On other Vulkan
  devices pick a target with ``LAZY_IREE_VULKAN_FLAGS=--iree-vulkan-target=<arch>``
  (``ampere``, ``rdna3``, ``valhall`` ...).
"""

from __future__ import annotations

import functools
import os
import shlex
from dataclasses import dataclass

_DEMOTE_F64 = "--iree-input-demote-f64-to-f32"
_NO_DEMOTE_F64 = f"{_DEMOTE_F64}=false"
_NO_CONST_EVAL = "--iree-opt-const-eval=false"
_NO_MULTI_REDUCTION_FUSION = "--iree-dispatch-creation-element-wise-fuse-multi-reduction=false"
_NO_HOISTING = "--iree-opt-const-expr-hoisting=false"
_IN_ORDER = "--iree-stream-partitioning-favor=debug"
#: Correctness flags every target takes (see the module docstring).
_CORRECTNESS = (_NO_DEMOTE_F64, _NO_CONST_EVAL, _NO_MULTI_REDUCTION_FUSION, _NO_HOISTING, _IN_ORDER)


@dataclass(frozen=True)
class TargetSpec:
    """One IREE compilation target and the runtime driver that executes it."""

    backend_name: str  # registered lazy backend name
    target_backend: str  # iree-compile --iree-hal-target-backends
    driver: str  # iree.runtime driver
    env_tag: str  # CPU / VULKAN / CUDA in env var names
    default_flags: tuple[str, ...] = ()
    #: How the lowering writes bf16 out of the computation (``lowering.bf16``), or
    #: None to hand IREE bf16 as it is. See the module docstring.
    emulate_bf16: str | None = "bits"
    #: Compute integer min/max reductions in int64 (``lowering/int_extrema.py``): IREE's
    #: SPIR-V code for narrower ones read past the data on lavapipe for some sizes.
    int64_extrema: bool = False
    #: Give floating min/max reductions an explicit NaN check (``lowering/nan_extrema.py``):
    #: on lavapipe IREE's SPIR-V reductions returned a number where the data held a NaN.
    nan_checked_extrema: bool = False
    #: Make floating sums and means that are zero +0.0 (``lowering/positive_zero_sums.py``):
    #: lavapipe shortcuts ``x + 0.0`` to ``x``, so a sum of -0.0 values stayed -0.0.
    positive_zero_sums: bool = False
    #: Scale a subnormal operand of ``log``/``log2``/``log10`` up first (``lowering/subnormal_logs.py``):
    #: lavapipe reads it as the smallest normal (``log(1e-40)`` was -87.34, not -92.10).
    subnormal_logs: bool = False
    #: Stage reductions over more than 65,535 elements (``lowering/short_loops.py``): lavapipe's
    #: llvmpipe ends every shader loop after 65,535 iterations (``ones(65536).sum()`` was 65535).
    short_loops: bool = False
    #: Accumulate float32 sums and means in float64 (``lowering/wide_sums.py``): a float32 running
    #: total drifts (the mean of 2**20 values 1.2% off eager's).
    wide_sums: bool = False
    #: Compute a float64 ``erf`` from ``exp`` and rational functions (``lowering/erf64.py``):
    #: IREE 3.13's CPU code has no float64 ``math.erf`` (MLIR's expansion is float32 only;
    #: its CUDA code calls libdevice's ``erf``, which has one).
    float64_erf: bool = False
    #: Compute 2-d convolutions (forward, above 64 output positions) and their gradients as
    #: matmuls over an im2col (``lowering/conv_matmuls.py``): IREE 3.13's CPU code for them ran
    #: 1.2-3x slower than its matmul code for the same products.
    conv_gradients_as_matmuls: bool = False
    #: Ops left to run eagerly (``supports_op``) although the lowering decomposes them: their
    #: decomposition does not compile for this target, and a graph that fails to compile runs
    #: op by op whole. ``median`` on vulkan-spirv: IREE 3.13 crashes (signal 11 in
    #: GPUDistributeSharedMemoryCopyPass) or fails ("rank > 1 should be broken down") on the
    #: sort it is read from, for most shapes ([4, 9], [64, 8], [64]); ``nanmedian(dim)`` and
    #: ``kthvalue`` are read from the same sort.
    eager_ops: frozenset[str] = frozenset()
    #: ``BackendImpl.flushes_subnormals``. IREE's CPU runtime (3.13) switches on
    #: flush-to-zero and denormals-are-zero on every thread that runs a dispatch
    #: (``iree_fpu_state_push`` in its task workers), and no flag turns it off.
    flushes_subnormals: bool = False
    #: ``BackendImpl.host_memory``: the driver's buffers are host memory (local-task).
    host_memory: bool = False


CPU = TargetSpec("iree-cpu", "llvm-cpu", "local-task", "CPU",
                 (*_CORRECTNESS, "--iree-llvmcpu-target-cpu=host", "--iree-global-opt-use-im2col-for-convs"),
                 float64_erf=True, flushes_subnormals=True, wide_sums=True, host_memory=True,
                 conv_gradients_as_matmuls=True)
#: Replayed (memoized) command buffers wrote into freed memory on Vulkan (the module docstring).
_NO_MEMOIZATION = "--iree-hal-memoization=false"
VULKAN = TargetSpec("iree-vulkan", "vulkan-spirv", "vulkan", "VULKAN",
                    (*_CORRECTNESS, _NO_MEMOIZATION), int64_extrema=True, nan_checked_extrema=True, positive_zero_sums=True,
                    subnormal_logs=True, short_loops=True,
                    eager_ops=frozenset({"aten::median.dim", "aten::median", "aten::nanmedian.dim", "aten::kthvalue"}))
CUDA = TargetSpec("iree-cuda", "cuda", "cuda", "CUDA", _CORRECTNESS)
TARGETS = {t.backend_name: t for t in (CPU, VULKAN, CUDA)}

INPUT_FORMS = ("raw", "torch", "linalg")
DEFAULT_INPUT_FORMS = ("torch", "raw")


def _option(flag: str) -> str:
    return flag.split("=", 1)[0]


def merge_flags(defaults: list[str] | tuple[str, ...], user: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``defaults`` minus the options ``user`` sets again, then ``user``."""
    overridden = {_option(f) for f in user}
    return tuple([f for f in defaults if _option(f) not in overridden] + list(user))


@dataclass(frozen=True)
class IreeConfig:
    """Everything that decides compiled code (``compile_flags``, ``input_forms``) or placement (``device_uri``)."""

    target: TargetSpec
    compile_flags: tuple[str, ...] = ()
    device_uri: str = ""
    input_forms: tuple[str, ...] = DEFAULT_INPUT_FORMS

    def cache_key(self) -> str:
        return "|".join([self.target.target_backend, ",".join(self.input_forms), *self.compile_flags])

    @property
    def hides_zero_literals(self) -> bool:
        """Whether zero literals go behind barriers (``rewrites.hide_zero_literals``): on lavapipe,
        whose shader compiler shortcuts arithmetic with a constant zero. Follows from the flags,
        so ``cache_key`` covers it."""
        return any("llvmpipe" in f for f in self.compile_flags)


def _env_flags(tag: str) -> list[str]:
    flags: list[str] = []
    for var in ("LAZY_IREE_FLAGS", f"LAZY_IREE_{tag}_FLAGS"):
        flags += shlex.split(os.environ.get(var, ""))
    return flags


def resolve_device(driver: str, requested: str | None) -> str:
    """The device URI to open for ``driver``: ``requested`` if it fits, else the driver's default."""
    if requested:
        requested = requested.strip()
        if requested.isdigit():
            return f"{driver}://{requested}"
        scheme = requested.split("://", 1)[0].split(":", 1)[0]
        if scheme == driver:
            return requested
    return driver


@functools.cache
def _vulkan_device_names() -> tuple[str, ...]:
    try:
        import iree.runtime as rt

        from .runtime import prepare_driver

        prepare_driver("vulkan")  # the driver made here is the process's: give it its layer
        return tuple(str(d.get("name", "")) for d in rt.get_driver("vulkan").query_available_devices())
    except Exception:  # no loader, no ICD: nothing to tune for
        return ()


def detected_defaults(target: TargetSpec, device_uri: str) -> tuple[str, ...]:
    """Default flags that depend on the device found at run time (Vulkan only)."""
    if target.driver != "vulkan":
        return ()
    names = _vulkan_device_names()
    index = 0
    tail = device_uri.split("://", 1)[1] if "://" in device_uri else ""
    if tail.isdigit():
        index = int(tail)
    name = names[index] if index < len(names) else (names[0] if names else "")
    if "llvmpipe" in name.lower():
        return ("--iree-vulkan-target=llvmpipe",)
    return ()


def make_config(
    target: TargetSpec,
    flags: list[str] | tuple[str, ...] | None = None,
    device: str | None = None,
    input_forms: str | list[str] | tuple[str, ...] | None = None,
) -> IreeConfig:
    """Constructor arguments first, then the environment, then defaults."""
    requested = device or os.environ.get(f"LAZY_IREE_{target.env_tag}_DEVICE") or os.environ.get("LAZY_IREE_DEVICE")
    uri = resolve_device(target.driver, requested)
    forms = input_forms or os.environ.get("LAZY_IREE_INPUT") or DEFAULT_INPUT_FORMS
    if isinstance(forms, str):
        forms = [f.strip() for f in forms.split(",") if f.strip()]
    bad = [f for f in forms if f not in INPUT_FORMS]
    if bad or not forms:
        raise ValueError(f"IREE input forms must be among {', '.join(INPUT_FORMS)}, not {forms!r}")
    defaults = list(target.default_flags) + list(detected_defaults(target, uri))
    user = _env_flags(target.env_tag) + list(flags or [])
    for f in user:
        if _option(f) == _DEMOTE_F64 and f.split("=", 1)[-1].lower() not in ("false", "0"):
            raise ValueError(
                f"{f}: IREE's f64 demotion breaks the function boundary (f64 buffer views are "
                "asserted, f32 read); the lazy IREE backends always compile f64 as f64"
            )
    return IreeConfig(target, merge_flags(defaults, user), uri, tuple(forms))
