"""Counters and timers for everything the lazy runtime does.

Lazy tensors hide work: a line of Python may compile a graph, or fall back to
eager, or copy a weight to the host. Users only find out why a loop is slow
by counting those events, so every layer reports here. ``COUNTERS`` says what
each core counter counts; the report shows the PyTorch/XLA name next to ours
where one exists.

Getting an executable for a graph is one of five events, counted apart so a
warm second process does not read as compiling: ``cache_hit`` (this
process's in-memory cache), ``dynamic_reuse`` (another size of a graph
compiled with dynamic dimensions, lazy_core.dynamic_shapes),
``persistent_cache_hit`` (loaded from the disk cache, nothing lowered or
compiled), ``compile`` (lowered and compiled) or ``fallback::compile_error``
(it failed; the graph is interpreted on the CPU). ``cache_miss`` is the sum
of the last three.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

_counters: Counter[str] = Counter()
_timers: dict[str, list[float]] = defaultdict(list)
# Where fallbacks happened in user code: "aten.nonzero" -> Counter of "file:line".
_fallback_sites: dict[str, Counter[str]] = defaultdict(Counter)
# Cumulative [count, total seconds] per timer: samples are trimmed, these are not.
_timer_totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
# What forced each execution: "mark_step" / "item()" / "fallback aten.nonzero" -> Counter of "file:line".
_execution_sites: dict[str, Counter[str]] = defaultdict(Counter)
_MAX_SAMPLES = 10_000
#: Called as hook(op_name, site) after each recorded fallback (lazy_core.step_guard uses it).
fallback_hooks: list = []


def counter_add(name: str, value: int = 1) -> None:
    """Add ``value`` to counter ``name``."""
    _counters[name] += value


def record_time(name: str, seconds: float) -> None:
    """Record one sample of timer ``name`` (seconds)."""
    samples = _timers[name]
    if len(samples) >= _MAX_SAMPLES:
        # Keep memory flat in long loops; the newest samples matter most.
        del samples[: _MAX_SAMPLES // 2]
    samples.append(seconds)
    totals = _timer_totals[name]
    totals[0] += 1
    totals[1] += seconds


@contextmanager
def timed(name: str) -> Iterator[None]:
    """Time the body of a ``with`` block into timer ``name``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        record_time(name, time.perf_counter() - start)


def record_fallback(op_name: str, site: str | None) -> None:
    """Count one eager fallback of ``op_name`` at user source ``site``."""
    _counters[f"fallback::{op_name}"] += 1
    _fallback_sites[op_name][site or "<unknown>"] += 1
    for hook in fallback_hooks:
        hook(op_name, site)


def record_execution(cause: str, site: str | None) -> None:
    """Count one graph execution forced by ``cause`` (``mark_step``, ``item()`` ...) at ``site``."""
    _execution_sites[cause][site or "<unknown>"] += 1


def counters() -> dict[str, int]:
    """A snapshot of all counters."""
    return dict(_counters)


def counter(name: str) -> int:
    """The value of one counter (0 when it never fired)."""
    return _counters.get(name, 0)


def timers() -> dict[str, dict[str, float]]:
    """count/total/mean/p50/p99 (seconds) per timer."""
    out: dict[str, dict[str, float]] = {}
    for name, samples in _timers.items():
        if not samples:
            continue
        ordered = sorted(samples)
        count, total = _timer_totals[name]
        out[name] = {
            "count": count,
            "total": total,
            "mean": total / count if count else statistics.fmean(samples),
            "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        }
    return out


def fallback_sites() -> dict[str, dict[str, int]]:
    """Fallbacks by op, then by user source line."""
    return {op: dict(sites) for op, sites in _fallback_sites.items()}


def execution_sites() -> dict[str, dict[str, int]]:
    """Executions by cause, then by user source line."""
    return {cause: dict(sites) for cause, sites in _execution_sites.items()}


def reset() -> None:
    """Clear every counter and timer (e.g. after warm-up)."""
    _counters.clear()
    _timers.clear()
    _fallback_sites.clear()
    _timer_totals.clear()
    _execution_sites.clear()


#: What each core counter counts (backends add their own, prefixed ``iree_``,
#: ``graph_cache_``, ``disk_cache_`` ...; docs/debugging.md lists them too).
COUNTERS: dict[str, str] = {
    "mark_step": "mark_step() calls",
    "trace_op": "ATen ops recorded into lazy graphs",
    "execute": "graphs run (compiled, loaded, or interpreted: first sight or compile error)",
    "execute_reason::<cause>": "graphs run, by what forced them (mark_step, item(), fallback ...)",
    "graph_nodes": "nodes over every graph run",
    "cache_hit": "executables found in this process's in-memory cache",
    "cache_miss": "executables not in memory: persistent_cache_hit + compile + fallback::compile_error "
                  "+ interpreted_first_sight",
    "interpreted_first_sight": "graphs seen for the first time, run op by op on the CPU instead of compiled "
                               "(lazy_core.tiering; they compile when they run again)",
    "persistent_cache_hit": "executables loaded from the disk cache (nothing lowered or compiled)",
    "compile": "graphs lowered and compiled (the backend may still reuse its own artifact cache)",
    "dynamic_reuse": "graphs served, without compiling, by an executable compiled with dynamic dimensions",
    "dynamic_compile": "graph families compiled with dynamic dimensions (also counted in compile)",
    "dynamic_first_step_adopted": "later training steps generalized with the first step that made the optimizer's "
                                  "state (lazy_core.state_fills)",
    "dynamic_refused": "graphs that recur at other sizes but are not one function of them (compiled statically)",
    "dynamic_compile_error": "dynamic-dimension compiles that failed (the graph compiled statically)",
    "fallback::compile_error": "graphs that failed to lower or compile, interpreted on the CPU",
    "fallback::<op>": "ops run eagerly on the CPU (data-dependent shapes, unsupported)",
    "random::<op>": "random ops filled on the CPU generator (bit-identical to eager CPU)",
    "host_eval": "small graphs of host-held values run on the host at a scalar read (lazy_core.host_eval)",
    "host_eval_error": "such graphs the host could not run (they went to the backend)",
    "recompile": "cache misses at a barrier site that had compiled another graph before",
    "graph_limit_cut": "pending graphs cut by the size safety net (LAZY_MAX_PENDING_NODES)",
    "transfer_to_device_bytes": "bytes copied host -> device",
    "transfer_to_host_bytes": "bytes copied device -> host",
}

# -- the report ------------------------------------------------------------------------
# Names PyTorch/XLA and LTC users already read in their metrics reports, next to ours.
# XLA's CachedCompile also counts persistent-cache loads; ours are persistent_cache_hit.
_XLA_NAMES = {
    "mark_step": "MarkStep",
    "cache_hit": "CachedCompile",
    "compile": "UncachedCompile",
    "persistent_cache_hit": "PersistentCacheHit",
}
_TIMER_XLA_NAMES = {"compile": "CompileTime", "execute": "ExecuteTime", "lower": "LoweringTime"}


def _fmt_seconds(s: float) -> str:
    if s >= 1.0:
        return f"{s:.3f}s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f}ms"
    return f"{s * 1e6:.1f}us"


def _rel(site: str) -> str:
    """A user line relative to the working directory, as people type paths."""
    cwd = os.getcwd() + os.sep
    return site[len(cwd):] if site.startswith(cwd) else site


def _fmt_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n:,d} B" if unit == "B" else f"{value:.2f} {unit} ({n:,d} B)"
        value /= 1024
    return f"{n:,d} B"


def _table(title: str, header: list[str], rows: list[list[str]], align: str) -> list[str]:
    """Fixed-width columns; ``align`` has one letter per column, ``l`` or ``r``."""
    if not rows:
        return []
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    def line(cells: list[str]) -> str:
        parts = [
            str(c).ljust(w) if align[i] == "l" else str(c).rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths))
        ]
        return "  " + "  ".join(parts).rstrip()
    rule = "  " + "  ".join("-" * w for w in widths)
    return [title, line(header), rule, *[line(r) for r in rows], ""]


_TRANSFERS = (("host -> device", "transfer_to_device"), ("device -> host", "transfer_to_host"))


def report() -> str:
    """A human-readable report: counters, timers, transfers, executions and fallbacks.

    The layout follows the PyTorch/XLA and LTC metrics reports (the second
    column of the counter table gives their name where one exists), with two
    tables they lack: what forced each execution, and fallbacks by user line.
    """
    out = ["lazy_core metrics report", "=" * 24, ""]
    shown_elsewhere = {name for _, name in _TRANSFERS} | {f"{n}_bytes" for _, n in _TRANSFERS}
    shown_elsewhere |= {f"fallback::{op}" for op in _fallback_sites}
    rows = [
        [name, _XLA_NAMES.get(name, ""), f"{_counters[name]:,d}"]
        for name in sorted(_counters)
        if name not in shown_elsewhere
    ]
    out += _table("Counters", ["counter", "xla name", "value"], rows, "llr")
    t = timers()
    rows = [
        [name, _TIMER_XLA_NAMES.get(name, ""), f"{int(v['count']):,d}", _fmt_seconds(v["total"]),
         _fmt_seconds(v["mean"]), _fmt_seconds(v["p50"]), _fmt_seconds(v["p99"])]
        for name, v in sorted(t.items())
        if name not in shown_elsewhere
    ]
    out += _table("Timers", ["timer", "xla name", "count", "total", "mean", "p50", "p99"], rows, "llrrrrr")
    rows = []
    for direction, name in _TRANSFERS:
        nbytes = _counters.get(f"{name}_bytes", 0)
        timing = t.get(name)
        if timing is None and not nbytes:
            continue
        count = int(timing["count"]) if timing else 0
        total = _fmt_seconds(timing["total"]) if timing else "-"
        rows.append([direction, f"{count:,d}", _fmt_bytes(nbytes), total])
    out += _table("Transfers", ["direction", "count", "bytes", "time"], rows, "lrrr")
    rows = [
        [cause, site, f"{n:,d}"]
        for cause, sites in sorted(_execution_sites.items())
        for site, n in sites.most_common()
    ]
    out += _table("Executions by cause", ["cause", "user line", "count"], rows, "llr")
    rows = [
        [op, f"{sum(sites.values()):,d}", ", ".join(f"{_rel(s)} ({n})" for s, n in sites.most_common(3))
         + (", ..." if len(sites) > 3 else "")]
        for op, sites in sorted(_fallback_sites.items(), key=lambda kv: -sum(kv[1].values()))
    ]
    out += _table("Fallbacks by op (ran eagerly on the CPU)", ["op", "count", "user lines"], rows, "lrl")
    by_line: dict[str, Counter[str]] = defaultdict(Counter)
    for op, sites in _fallback_sites.items():
        for site, n in sites.items():
            by_line[_rel(site)][op] += n
    rows = [
        [site, f"{sum(ops.values()):,d}", ", ".join(f"{op} ({n})" for op, n in ops.most_common())]
        for site, ops in sorted(by_line.items(), key=lambda kv: -sum(kv[1].values()))
    ]
    out += _table("Fallbacks by user line", ["user line", "count", "ops"], rows, "lrl")
    return "\n".join(out).rstrip() + "\n"


# -- deltas (for per-computation dumps and step-by-step reports) -----------------------
def snapshot() -> dict[str, dict[str, float]]:
    """Counters and cumulative timer totals now, to compare with later (``delta``)."""
    return {
        "counters": dict(_counters),
        "timers": {name: (c, tot) for name, (c, tot) in _timer_totals.items()},
    }


def delta(since: dict[str, dict[str, float]]) -> str:
    """What changed since ``snapshot()`` returned ``since``, as a small table."""
    before_c = since.get("counters", {})
    rows = [
        [name, f"{_counters[name] - before_c.get(name, 0):+,d}"]
        for name in sorted(_counters)
        if _counters[name] != before_c.get(name, 0)
    ]
    out = _table("Counters (delta)", ["counter", "change"], rows, "lr")
    before_t = since.get("timers", {})
    rows = []
    for name, (count, total) in sorted(_timer_totals.items()):
        c0, t0 = before_t.get(name, (0, 0.0))
        if count != c0:
            rows.append([name, f"{int(count - c0):,d}", _fmt_seconds(total - t0)])
    out += _table("Timers (delta)", ["timer", "count", "total"], rows, "lrr")
    return "\n".join(out).rstrip() + "\n" if out else "no change\n"
