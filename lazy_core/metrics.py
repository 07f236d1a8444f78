"""Counters and timers for everything the lazy runtime does.

Lazy tensors hide work: a line of Python may compile a graph, or fall back to
eager, or copy a weight to the host. Users only find out why a loop is slow
by counting those events, so every layer reports here (the names follow
PyTorch/XLA and LTC: ``compile``, ``cache_hit``, ``fallback::<op>`` ...).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

_counters: Counter[str] = Counter()
_timers: dict[str, list[float]] = defaultdict(list)
# Where fallbacks happened in user code: "aten.nonzero" -> Counter of "file:line".
_fallback_sites: dict[str, Counter[str]] = defaultdict(Counter)
_MAX_SAMPLES = 10_000


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
        out[name] = {
            "count": len(samples),
            "total": sum(samples),
            "mean": statistics.fmean(samples),
            "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        }
    return out


def fallback_sites() -> dict[str, dict[str, int]]:
    """Fallbacks by op, then by user source line."""
    return {op: dict(sites) for op, sites in _fallback_sites.items()}


def reset() -> None:
    """Clear every counter and timer (e.g. after warm-up)."""
    _counters.clear()
    _timers.clear()
    _fallback_sites.clear()


def _fmt_seconds(s: float) -> str:
    if s >= 1.0:
        return f"{s:.3f}s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f}ms"
    return f"{s * 1e6:.1f}us"


def report() -> str:
    """A human-readable table of counters, timers and fallbacks."""
    lines = ["Counters:"]
    for name in sorted(_counters):
        value = _counters[name]
        if name.endswith("_bytes"):
            lines.append(f"  {name:<40} {value:>12,d} B")
        else:
            lines.append(f"  {name:<40} {value:>12,d}")
    lines.append("Timers:")
    lines.append(f"  {'name':<24} {'count':>8} {'total':>12} {'mean':>12} {'p50':>12} {'p99':>12}")
    for name, t in sorted(timers().items()):
        lines.append(
            f"  {name:<24} {int(t['count']):>8d} {_fmt_seconds(t['total']):>12}"
            f" {_fmt_seconds(t['mean']):>12} {_fmt_seconds(t['p50']):>12} {_fmt_seconds(t['p99']):>12}"
        )
    if _fallback_sites:
        lines.append("Fallbacks (op @ user line: count):")
        for op, sites in sorted(_fallback_sites.items()):
            for site, n in sites.most_common():
                lines.append(f"  {op} @ {site}: {n}")
    return "\n".join(lines)
