"""Running one OpInfo sample on the lazy device and judging the result.

Shared by the CI subset (``test/test_opinfo.py``) and the full sweep
(``tools/opinfo_sweep.py``) so both judge an op the same way:

* the sample is copied to ``lazy`` (tensors anywhere in input/args/kwargs,
  and ``device="cpu"`` arguments of factories become ``device="lazy"``);
* the op runs on that copy and, with the same RNG seed, on a CPU copy;
* every result and every input afterwards (in-place writes must reach the
  caller's tensors) is brought back and compared with
  ``torch.testing.assert_close``;
* ``fallback::<op>`` counters tell whether part of the op ran eagerly on the
  CPU instead of being traced, and why (data-dependent by design, or not
  supported by the backend, or not traceable).

Nothing here knows a backend: the caller activates one with ``lazy_core.init``.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import opinfo_exclusions as ex  # test/ is on sys.path (pytest rootdir-less import, or the sweep)
import torch

import lazy_core
from lazy_core.op_schema import plan

LAZY = torch.device("lazy")
SEED = 1234

#: Which dtypes the sweep tries, when the op supports them.
SWEEP_DTYPES = (torch.float32, torch.int64, torch.bool)

#: Status order, worst last: an op's status is the worst of its samples'.
STATUSES = ("pass", "expected_fallback", "fallback", "mismatch", "error", "timeout", "crash")
_RANK = {s: i for i, s in enumerate(STATUSES)}


@functools.cache
def op_db() -> list[Any]:
    """PyTorch's OpInfo database (importing it costs a few seconds, so once)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    return list(db)


def op_name(op: Any) -> str:
    """``name`` or ``name.variant``: the key used in reports and exclusions."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def ops_by_name() -> dict[str, Any]:
    return {op_name(op): op for op in op_db()}


def supports_dtype(op: Any, dtype: torch.dtype) -> bool:
    return dtype in op.supported_dtypes("cpu")


def samples(op: Any, dtype: torch.dtype, limit: int | None) -> list[Any]:
    """The first ``limit`` CPU samples of ``op`` for ``dtype`` (seeded, so reproducible)."""
    torch.manual_seed(SEED)
    gen = op.sample_inputs("cpu", dtype, requires_grad=False)
    return list(itertools.islice(gen, limit))


# -- moving trees of values ----------------------------------------------------


def _is_cpu_device(x: Any) -> bool:
    return (isinstance(x, torch.device) and x.type == "cpu") or (isinstance(x, str) and x == "cpu")


def to_lazy(x: Any) -> Any:
    """A copy of ``x`` with every tensor (and ``device="cpu"``) moved to ``lazy``."""
    if isinstance(x, torch.Tensor):
        return x.detach().to(LAZY)
    if _is_cpu_device(x):
        return LAZY
    return _map(x, to_lazy)


def clone_cpu(x: Any) -> Any:
    """A copy of ``x`` whose tensors are fresh clones (ops may write into their inputs)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    return _map(x, clone_cpu)


def _map(x: Any, fn: Any) -> Any:
    if isinstance(x, list):
        return [fn(v) for v in x]
    if isinstance(x, tuple):
        values = [fn(v) for v in x]
        return type(x)(*values) if hasattr(x, "_fields") else tuple(values)
    if isinstance(x, dict):
        return {k: fn(v) for k, v in x.items()}
    return x


def lazy_leaves(x: Any) -> list[torch.Tensor]:
    """Every lazy tensor in ``x``."""
    out: list[torch.Tensor] = []

    def walk(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            if v.device.type == "lazy":
                out.append(v)
        elif isinstance(v, list | tuple):
            for e in v:
                walk(e)
        elif isinstance(v, dict):
            for e in v.values():
                walk(e)

    walk(x)
    return out


def to_cpu(x: Any) -> Any:
    """``x`` with every lazy tensor replaced by its CPU value."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu() if x.device.type == "lazy" else x
    return _map(x, to_cpu)


def wrong_devices(lazy_result: Any, eager_result: Any) -> list[str]:
    """Tensors that eager returns on the CPU but the lazy run did not return on ``lazy``."""
    bad: list[str] = []

    def walk(a: Any, b: Any, path: str) -> None:
        if isinstance(b, torch.Tensor):
            if isinstance(a, torch.Tensor) and b.device.type == "cpu" and a.device.type != "lazy":
                bad.append(f"{path or 'result'} on {a.device}")
        elif isinstance(b, list | tuple) and isinstance(a, list | tuple):
            for i, (x, y) in enumerate(zip(a, b)):
                walk(x, y, f"{path}[{i}]")

    walk(lazy_result, eager_result, "")
    return bad


# -- judging -------------------------------------------------------------------


@dataclass
class SampleResult:
    status: str
    message: str = ""
    detail: str = ""
    fallbacks: dict[str, str] = field(default_factory=dict)  # aten op -> why


class SampleTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise ``SampleTimeout`` after ``seconds`` (main thread, POSIX; else no limit).

    A signal only interrupts Python code; a hang inside a C call is caught by
    the sweep's out-of-process watchdog instead.
    """
    if not seconds or not hasattr(signal, "setitimer"):
        yield
        return
    try:
        old = signal.signal(signal.SIGALRM, _raise_timeout)
    except ValueError:  # not the main thread
        yield
        return
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _raise_timeout(signum: int, frame: Any) -> None:
    raise SampleTimeout("sample exceeded its time limit")


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    for line in text.splitlines():
        if line.strip():
            return f"{type(e).__name__}: {line.strip()}"[:400]
    return type(e).__name__


def _resolve_aten(name: str) -> Any:
    """``"aten.add.Tensor"`` -> the OpOverload, or None."""
    parts = name.split(".")
    if len(parts) != 3:
        return None
    try:
        return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
    except (AttributeError, RuntimeError):
        return None


def fallback_reason(op_str: str) -> str:
    """Why the tracer ran ``op_str`` eagerly: ``data-dependent`` (by design) or the gap."""
    if op_str == "compile_error":
        return "compile error (eager interpretation)"
    op = _resolve_aten(op_str)
    if op is None:
        return "unknown op"
    p = plan(op)
    if p.dynamic_shape or p.returns_python_scalar:
        return "data-dependent"
    if p.random:
        return "random"
    if p.inplace_view:
        return "inplace-view"
    backend = lazy_core.active_backend()
    if not backend.supports_op(op):
        return "unsupported by backend"
    if backend.support_depends_on_arguments(op):
        return "unsupported by backend for these arguments"
    return "untraceable"


#: Fallbacks that are the tracer's design, not a gap (docs/architecture.md, "Fallback").
BY_DESIGN = frozenset({"data-dependent", "random"})


def tolerance(name: str, backend: str) -> dict[str, float]:
    """rtol/atol for float results of ``name`` on ``backend`` (integer and bool
    results are always compared exactly)."""
    if backend == "eager":
        rtol, atol = 1.3e-6, 1e-5
    else:
        # Compiled code reassociates reductions and uses other libm routines.
        rtol, atol = 1e-4, 1e-4
    override = ex.TOLERANCES.get(name)
    if override is not None:
        rtol, atol = max(rtol, override[0]), max(atol, override[1])
    return {"rtol": rtol, "atol": atol}


def _compare(got: Any, expected: Any, tol: dict[str, float], what: str) -> str | None:
    """None when ``got`` equals ``expected`` within ``tol`` (tensors) or exactly; else why not."""
    if isinstance(expected, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(got, torch.Tensor)):
            return f"{what}: {type(got).__name__} where eager gives {type(expected).__name__}"
        if not (expected.dtype.is_floating_point or expected.dtype.is_complex):
            tol = {"rtol": 0.0, "atol": 0.0}
        try:
            torch.testing.assert_close(got, expected, equal_nan=True, check_device=False, check_stride=False,
                                       check_layout=False, **tol)
        except AssertionError as e:
            lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
            return f"{what}: " + " ".join(lines[:3])
        return None
    if isinstance(expected, list | tuple) and isinstance(got, list | tuple):
        if len(got) != len(expected):
            return f"{what}: {len(got)} values where eager gives {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            diff = _compare(g, e, tol, f"{what}[{i}]")
            if diff:
                return diff
        return None
    if isinstance(expected, dict) and isinstance(got, dict):
        if got.keys() != expected.keys():
            return f"{what}: keys {sorted(got)} where eager gives {sorted(expected)}"
        for k in expected:
            diff = _compare(got[k], expected[k], tol, f"{what}[{k!r}]")
            if diff:
                return diff
        return None
    if isinstance(expected, float) and isinstance(got, float):
        if got == expected or (expected != expected and got != got):
            return None
        if abs(got - expected) <= tol["atol"] + tol["rtol"] * abs(expected):
            return None
    elif got == expected:
        return None
    return f"{what}: {got!r} where eager gives {expected!r}"


def drop_pending() -> None:
    """Collect lazy tensors an earlier failed sample left pending (kept alive by
    traceback cycles), so that no later barrier tries to run their graphs."""
    if lazy_core.executor().pending_storages():
        gc.collect()


def run_sample(op: Any, sample: Any, dtype: torch.dtype, backend: str, check_inputs: bool = True,
               metadata_only: bool = False, inplace: bool = False) -> SampleResult:
    """Run one sample lazily and eagerly and judge it. Never raises (except timeouts).

    ``inplace`` runs the op's in-place variant (``add_``) instead of ``op``;
    ``dtype`` is the sample's dtype (kept in reports by the callers).
    """
    name = op_name(op)
    fn = op.inplace_variant if inplace else op
    if fn is None:
        return SampleResult("skip", "no in-place variant")
    drop_pending()
    cpu_in = clone_cpu((sample.input, sample.args, sample.kwargs))
    try:
        if name in ex.CPU_ARGS:
            lazy_in = (to_lazy(sample.input), clone_cpu(sample.args), clone_cpu(sample.kwargs))
        else:
            lazy_in = to_lazy((sample.input, sample.args, sample.kwargs))
    except SampleTimeout:
        raise
    except Exception as e:
        return SampleResult("error", "to lazy: " + first_line(e))
    torch.manual_seed(SEED)
    try:
        expected = fn(cpu_in[0], *cpu_in[1], **cpu_in[2])
    except SampleTimeout:
        raise
    except Exception as e:  # the sample is invalid for eager too: nothing to compare
        return SampleResult("skip", "eager raised: " + first_line(e))
    lazy_core.metrics.reset()
    torch.manual_seed(SEED)
    try:
        with _lazy_barrier_is_ours():
            got = fn(lazy_in[0], *lazy_in[1], **lazy_in[2])
        leaves = lazy_leaves(got) + (lazy_leaves(lazy_in) if check_inputs else [])
        if leaves:
            lazy_core.sync(leaves)
        got_cpu = to_cpu(got)
        in_cpu = to_cpu(lazy_in) if check_inputs else None
    except SampleTimeout:
        raise
    except Exception as e:
        return SampleResult("error", first_line(e), fallbacks=_fallbacks())
    fallbacks = _fallbacks()
    problems = [f"result {p}" for p in wrong_devices(got, expected)]
    tol = tolerance(name, backend)
    if metadata_only:
        problems += _compare_meta(got_cpu, expected)
    else:
        if name in ex.VALUES_ONLY and isinstance(expected, tuple) and isinstance(got_cpu, tuple):
            got_cpu, expected = got_cpu[0], expected[0]
        diff = _compare(got_cpu, expected, tol, "result")
        if diff:
            problems.append(diff)
        if check_inputs and in_cpu is not None:
            # Tensors only: a ``device=`` argument legitimately differs.
            diff = _compare(_tensors(in_cpu), _tensors(cpu_in), tol, "inputs after the op")
            if diff:
                problems.append(diff)
    if problems:
        return SampleResult("mismatch", problems[0], "; ".join(problems[1:]), fallbacks)
    if fallbacks:
        by_design = all(why in BY_DESIGN for why in fallbacks.values())
        msg = ", ".join(f"{k} ({v})" for k, v in sorted(fallbacks.items()))
        return SampleResult("expected_fallback" if by_design else "fallback", "ran eagerly: " + msg,
                            fallbacks=fallbacks)
    return SampleResult("pass")


@contextlib.contextmanager
def _lazy_barrier_is_ours() -> Iterator[None]:
    """OpInfo's ``wrapper_set_seed`` (random ops) calls ``torch._lazy.mark_step()``
    for any result on device ``lazy``, assuming PyTorch's own LTC owns that
    device. Here the barrier is ``lazy_core.mark_step``; route the call there
    while a lazy sample runs."""
    import torch._lazy

    old = torch._lazy.mark_step
    torch._lazy.mark_step = lambda *a, **k: lazy_core.mark_step()
    try:
        yield
    finally:
        torch._lazy.mark_step = old


def _fallbacks() -> dict[str, str]:
    out = {}
    for key in lazy_core.metrics.counters():
        if key.startswith("fallback::"):
            op_str = key[len("fallback::"):]
            out[op_str] = fallback_reason(op_str)
    return out


def _compare_meta(got: Any, expected: Any) -> list[str]:
    """Shape and dtype only (values of ``empty`` and friends are undefined)."""
    g, e = _flat(got), _flat(expected)
    if len(g) != len(e):
        return [f"result: {len(g)} tensors, expected {len(e)}"]
    for a, b in zip(g, e):
        if isinstance(b, torch.Tensor) and (not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype):
            return [f"result: {getattr(a, 'shape', a)}/{getattr(a, 'dtype', '')} != {b.shape}/{b.dtype}"]
    return []


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _flat(x: Any) -> list[Any]:
    if isinstance(x, list | tuple):
        return [y for v in x for y in _flat(v)]
    return [x]


def worse(a: str, b: str) -> str:
    return a if _RANK.get(a, -1) >= _RANK.get(b, -1) else b


_NORMALIZE = [
    (re.compile(r"/[\w./+-]+"), "<path>"),
    (re.compile(r"lazy_graph_[0-9a-f]+"), "lazy_graph_<hash>"),
    (re.compile(r"0x[0-9a-f]+"), "<addr>"),
    (re.compile(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b"), "N"),
    (re.compile(r"\[op [^\]]*? at [^\]]*\]"), lambda m: m.group(0).split(" at ")[0] + "]"),
]


def cause(message: str) -> str:
    """A message with numbers, paths and hashes masked, to group failures by cause."""
    for pattern, repl in _NORMALIZE:
        message = pattern.sub(repl, message)
    return message[:200]
