"""The fuzz loop: many programs in one process, checked against eager CPU.

Programs run in groups (``batch``): a group's programs are traced one after
the other and run as ONE graph at a ``mark_step()``, as a training step
would, which makes a compiled backend fast enough to fuzz. A program whose
CPU run raises runs alone. Every group is followed by its twin group: the
same programs with constants swapped for ones that collide in Python
(``-1``/``-2``, ``1``/``1.0``/``True``, ``0``/``-0.0``/``False``, NaN), so a
cache that decides reuse on a hash or on ``==`` returns the first group's
graph or shapes for the second. Nothing is cleared between groups: the
caches are shared, as in a long-running program.

A failure is shrunk (shrink.py) and printed as a standalone script.
"""

from __future__ import annotations

import faulthandler
import gc
import math
import os
import random
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import lazy_core

from . import ops, values
from .check import compare_env, run_cpu, trace_lazy
from .program import Generator, Line, Program, has_undefined_tie
from .variance import eager_capability_variance


def file_failure(report: Report, failure: Failure, config: Config, log: Callable[[str], Any]) -> None:
    """Count ``failure`` in ``report``: as a failure, or apart when eager's own CPU kernels
    disagree with each other on it (``variance.eager_capability_variance``)."""
    if eager_capability_variance(failure.repro):
        log(f"[fuzz] {config.backend} seed {config.seed}: not counted, lazy equals eager on "
            "ATen's baseline CPU kernels (ATEN_CPU_CAPABILITY=default): eager's own variance")
        report.eager_variances.append(failure)
    else:
        report.failures.append(failure)


@dataclass
class Config:
    backend: str = "eager"
    seed: int = 0
    programs: int = 100
    categories: set[str] = field(default_factory=lambda: set(ops.CATEGORIES))
    batch: int = 8
    twins: bool = True
    min_ops: int = 3
    max_ops: int = 10
    shrink: bool = True
    max_failures: int = 5
    #: Written before each group runs on the lazy device: if the process dies, the repro survives.
    last_path: str | None = None
    #: Seconds one group may take (0: no limit); past it the process dumps its stacks and is
    #: killed by HANG_SIGNAL (a hang is a finding: nothing may wait forever).
    group_timeout: float = 0.0
    #: Multi-step programs that update state in place (stateful.py) instead of single graphs.
    stateful: bool = False


class Progress:
    """A line every ``every`` seconds on a long run (programs so far, mismatches, rate): a run
    stopped by a timeout or by hand still says how far it got without a mismatch."""

    def __init__(self, config: Config, report: Any, log: Any, every: float = 60.0) -> None:
        self.config, self.report, self.log, self.every = config, report, log, every
        self.start = self.last = time.perf_counter()

    def __call__(self, n: int) -> None:
        now = time.perf_counter()
        if now - self.last < self.every:
            return
        self.last = now
        self.log(f"[fuzz] {self.config.backend} seed {self.config.seed}: {n}/{self.config.programs} programs, "
                 f"{len(self.report.failures)} mismatches, {n / (now - self.start):.1f} programs/s")


def host_eval_setting(config: Config) -> str:
    """The ``LAZY_HOST_EVAL`` value a run of ``config`` uses (lazy_core.host_eval: a small graph
    of host-held values read by ``item()`` runs on the host): on for even seeds, off for odd
    ones, so both the users' default and the backend's own answer to such reads are fuzzed. A
    value the caller set in the environment wins."""
    return os.environ.get("LAZY_HOST_EVAL") or ("1" if config.seed % 2 == 0 else "0")


#: How a process ends when a group hangs: killed by SIGALRM.
HANG_SIGNAL = signal.SIGALRM


class _Watchdog:
    """Ends the process with HANG_SIGNAL when a group runs past its time limit.

    A hang inside a compiler holds the GIL (torch-mlir's pass manager does not
    release it: fuzz seed 21 looped in DecomposeComplexOps), so no Python
    thread or signal handler could run to end it. The kernel's ``alarm()``
    does, with SIGALRM's default action; faulthandler, registered for that
    signal in C, first writes every thread's stack to stderr.
    """

    def __init__(self, seconds: float) -> None:
        self._armed = seconds > 0
        if self._armed:
            faulthandler.register(HANG_SIGNAL, all_threads=True, chain=True)
            signal.alarm(max(1, math.ceil(seconds)))

    def cancel(self) -> None:
        if self._armed:
            signal.alarm(0)
            faulthandler.unregister(HANG_SIGNAL)


@dataclass
class Failure:
    message: str
    programs: list[Program]
    batch: bool
    repro: str = ""
    shrunk: bool = False


@dataclass
class Report:
    backend: str
    seed: int
    programs: int = 0
    seconds: float = 0.0
    failures: list[Failure] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    #: Mismatches where lazy equals eager on ATen's baseline CPU kernels (variance.py).
    eager_variances: list[Failure] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.programs / self.seconds if self.seconds else 0.0


def generate(rng: random.Random, categories: set[str], min_ops: int, max_ops: int, label: str) -> Program:
    g = Generator(rng, categories)
    for _ in range(rng.randint(1, 3)):
        g.add_input()
    table = ops.templates(categories)
    want, tries = rng.randint(min_ops, max_ops), 0
    added = 0
    while added < want and tries < want * 8:
        tries += 1
        if g.add_op(table):
            added += 1
    return Program(g.lines, label)


def twin(program: Program, rng: random.Random, categories: set[str] | None = None) -> Program | None:
    """``program`` with some constants swapped for colliding partners (None if it has none).

    With the ``errors`` category off, a twin that eager rejects where the
    original ran is dropped (e.g. ``x // False``: the category's switch holds for twins too).
    """
    lines, changed = [], False
    for ln in program.lines:
        consts = list(ln.consts)
        for i, c in enumerate(consts):
            options = values.partners(c)
            if options and rng.random() < 0.7:
                consts[i] = rng.choice(options)
                changed = True
        lines.append(ln.with_consts(tuple(consts)) if consts else ln)
    if not changed:
        return None
    result = Program(lines, program.label + "'")
    if has_undefined_tie(result):
        return None  # a swapped constant made a maximum eager leaves undefined
    if categories is not None and "errors" not in categories:
        before = run_cpu(program).errors
        after = run_cpu(result).errors
        if any(a is not None and b is None for a, b in zip(after, before)):
            return None
    return result


def fresh_backend(name: str) -> None:
    """A new backend instance with empty caches everywhere (for checking a repro in isolation)."""
    from lazy_core import tensor

    # Values of the failed programs may still be pending (a cycle keeps them): collect
    # them first, since switching backends moves every live value to the new one.
    # A failed execution's error (its traceback holds the step's storages) stays reachable
    # from the executor's last graph until another graph runs: run a tiny one.
    try:
        lazy_core.mark_step()
        (torch.zeros(1, device="lazy") + 1).cpu()
    except Exception:
        pass  # a value that cannot be computed: its error was reported by the check
    gc.collect()
    lazy_core.init(lazy_core.create_backend(name))
    lazy_core.executor().clear_cache()
    tensor._shape_cache.clear()


def run_group(programs: list[Program], batch: bool) -> tuple[str | None, Program | None]:
    """Run ``programs`` on the active backend; the first mismatch and its program, or (None, None)."""
    cpus = [run_cpu(p) for p in programs]
    pending: list[tuple[Program, Any, Any]] = []
    for p, cpu in zip(programs, cpus):
        alone = not batch or any(e is not None for e in cpu.errors)
        lazy, diff = trace_lazy(p, cpu)
        if diff is not None:
            return diff, p
        if alone:
            diff = compare_env(cpu, lazy, p)
            del lazy  # its pending values must not join the next graph
            if diff is not None:
                return diff, p
        else:
            pending.append((p, cpu, lazy))
    if pending:
        failed_compiles = _compile_fallbacks()
        try:
            lazy_core.mark_step()
        except Exception as e:
            return f"mark_step() raised {type(e).__name__}: {e}", pending[0][0]
        for p, cpu, lazy in pending:
            diff = compare_env(cpu, lazy, p)
            if diff is not None:
                return diff, p
        if _compile_fallbacks() > failed_compiles:
            # One program's ops did not compile, so the whole batch's graph ran eagerly and no
            # other program's compiled values were compared: run each alone.
            del pending[:], lazy
            return run_group(programs, batch=False)
    return None, None


def _compile_fallbacks() -> int:
    """Graphs that failed to compile and ran eagerly so far (with ``LAZY_STRICT`` off)."""
    return lazy_core.metrics.counter("fallback::compile_error")


#: Counters that say a graph ran code compiled for another graph of its family (lazy_core.dynamic_shapes).
_SHARED_CODE = ("dynamic_reuse", "dynamic_compile", "persistent_cache_hit")


def _shared_code_count() -> int:
    counters = lazy_core.metrics.counters()
    return sum(counters.get(k, 0) for k in _SHARED_CODE)


def reproduces(backend: str, programs: list[Program], batch: bool) -> str | None:
    """The mismatch of ``programs`` run on a fresh backend, or None."""
    fresh_backend(backend)
    try:
        diff, _ = run_group(programs, batch)
    except Exception as e:  # a crash in the toolkit itself is a finding too
        diff = f"{type(e).__name__}: {e}"
    return diff


def fuzz(config: Config, log: Any = print) -> Report:
    """Generate and check ``config.programs`` programs (twins included) on one backend."""
    from .crash import dump_case
    from .shrink import render_repro, shrink

    report = Report(config.backend, config.seed)
    rng = random.Random(config.seed)
    old_env = {k: os.environ.get(k) for k in ("LAZY_CACHE_DIR", "LAZY_HOST_EVAL", "LAZY_TIERED")}
    with tempfile.TemporaryDirectory(prefix="lazy-fuzz-cache-") as cache_dir:
        # A fresh disk cache: its stable hash is fuzzed too, and the user's cache stays clean.
        os.environ["LAZY_HOST_EVAL"] = host_eval_setting(config)
        # Each program runs once: compiled, not interpreted as a first sight (lazy_core.tiering).
        os.environ["LAZY_TIERED"] = "0"
        os.environ["LAZY_CACHE_DIR"] = cache_dir
        try:
            fresh_backend(config.backend)
            if lazy_core.active_backend().flushes_subnormals and "subnormal" in config.categories:
                config.categories = config.categories - {"subnormal"}
                log(f"[fuzz] {config.backend} flushes subnormals (flushes_subnormals): "
                    "category 'subnormal' left out")
            lazy_core.metrics.reset()
            start = time.perf_counter()
            n = 0
            previous: list[Program] = []
            progress = Progress(config, report, log)
            if config.stateful:
                from .stateful import fuzz_stateful

                n = fuzz_stateful(config, report, log, progress)
            while not config.stateful and n < config.programs and len(report.failures) < config.max_failures:
                progress(n)
                size = min(config.batch, config.programs - n)
                group = [generate(rng, config.categories, config.min_ops, config.max_ops,
                                  f"seed {config.seed} program {n + i}") for i in range(size)]
                groups = [group]
                if config.twins and "collide" in config.categories:
                    twins = [t for t in (twin(p, rng, config.categories) for p in group) if t is not None]
                    if twins:
                        groups.append(twins)
                for programs in groups:
                    if config.last_path:
                        dump_case(config.last_path, config.backend, programs, config.batch > 1)
                    dog = _Watchdog(config.group_timeout)
                    shared_before = _shared_code_count()
                    try:
                        diff, culprit = run_group(programs, config.batch > 1)
                    except Exception as e:
                        diff, culprit = f"{type(e).__name__}: {e}", None
                    finally:
                        dog.cancel()
                    n += len(programs)
                    if diff is None:
                        continue
                    if _shared_code_count() > shared_before:
                        # Earlier programs of the same structure at other sizes made a dynamic
                        # plan (kept on disk for the run): a repro without them runs static code.
                        diff += (" [a graph of this group ran a dynamic-shape plan or code from the disk "
                                 "cache; if the repro passes alone, run the group with LAZY_DYNAMIC=0]")
                    # The group before may have filled the caches this one collided with.
                    history = previous + group + (programs if programs is not group else [])
                    failure = Failure(diff, history, config.batch > 1)
                    log(f"[fuzz] {config.backend} seed {config.seed}: MISMATCH in "
                        f"{culprit.label if culprit else 'group'}: {diff}")
                    if config.shrink:
                        shrink(config.backend, failure, culprit)
                    failure.repro = render_repro(config.backend, failure.programs, failure.batch, failure.message)
                    file_failure(report, failure, config, log)
                    # Start the next group from a clean state: one bug, one report.
                    fresh_backend(config.backend)
                    break
                previous = groups[-1]
            lazy_core.mark_step()
            report.seconds = time.perf_counter() - start
            report.programs = n
            report.counters = {k: v for k, v in lazy_core.metrics.counters().items()
                               if k.startswith(("fallback::", "compile", "cache_", "host_eval", "iree_donat", "iree_refused_"))}
        finally:
            for k, v in old_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    return report


__all__ = ["Config", "Failure", "Line", "Report", "fuzz", "generate", "reproduces", "twin"]
