"""Helpers the examples share: backend flag, step timing, metrics summary, eager comparison.

The examples are meant to be read, so the model and the training loop stay
in each example; only bookkeeping that would repeat lives here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, ROOT)

import torch  # noqa: E402

import lazy_core  # noqa: E402
from lazy_core.registry import DEFAULT_BACKEND  # noqa: E402


def add_common_args(parser: argparse.ArgumentParser) -> None:
    """Flags every example understands."""
    parser.add_argument("--backend", default=os.environ.get("LAZY_BACKEND", DEFAULT_BACKEND),
                        help=f"lazy backend (default: $LAZY_BACKEND or {DEFAULT_BACKEND}); "
                        f"installed: {', '.join(lazy_core.available_backends())}")
    parser.add_argument("--dump-mlir", metavar="DIR",
                        help="write every compiled graph (lazy IR and torch-dialect MLIR) to DIR")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    parser.add_argument("--seed", type=int, default=0)


def init_backend(args: argparse.Namespace) -> lazy_core.BackendImpl:
    """Activate ``--backend`` and route ``--dump-mlir`` through ``LAZY_DUMP_DIR``."""
    if args.dump_mlir:
        os.environ["LAZY_DUMP_DIR"] = os.path.abspath(args.dump_mlir)
    backend = lazy_core.init(args.backend)
    lazy_core.metrics.reset()
    return backend


class StepTimer:
    """Wall time per step, split into steps that compiled and steady-state steps.

    A step that compiled a graph (or loaded one from the disk cache) says
    nothing about the steady state, so the steady-state time is the median
    over steps whose ``cache_miss`` counter did not move.
    """

    def __init__(self, lazy: bool) -> None:
        self.lazy = lazy
        self.steady: list[float] = []
        self.compiling: list[float] = []
        self._t0 = 0.0
        self._compiles = 0

    def __enter__(self) -> StepTimer:
        self._compiles = lazy_core.metrics.counter("cache_miss") if self.lazy else 0
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.lazy:
            lazy_core.wait_device_ops()
        dt = time.perf_counter() - self._t0
        if self.lazy and lazy_core.metrics.counter("cache_miss") != self._compiles:
            self.compiling.append(dt)
        else:
            self.steady.append(dt)

    def steady_ms(self) -> float | None:
        """Median steady-state step time in ms (skipping the first, cache-warming step)."""
        samples = self.steady[1:] if len(self.steady) > 2 else self.steady
        return statistics.median(samples) * 1e3 if samples else None


def lazy_summary() -> dict[str, Any]:
    """Compiles, disk-cache loads, cache hits and fallbacks from ``lazy_core.metrics``."""
    counters = lazy_core.metrics.counters()
    fallbacks = {k: v for k, v in counters.items() if k.startswith("fallback::")}
    return {
        "compiles": counters.get("compile", 0),
        # Of those, graphs lowered again whose compiled executable the backend's own disk cache
        # (keyed by the MLIR) still had: a code change that left this MLIR alone, no compiler run.
        "reused": counters.get("disk_cache_hit", 0),
        "loaded": counters.get("persistent_cache_hit", 0),
        "cache_hits": counters.get("cache_hit", 0),
        "cache_misses": counters.get("cache_miss", 0),
        # Graphs seen once so far, run op by op on the CPU instead of compiled (lazy_core.tiering).
        "interpreted": counters.get("interpreted_first_sight", 0),
        "fallbacks": sum(fallbacks.values()),
        "fallback_ops": fallbacks,
        "compile_s": lazy_core.metrics.timers().get("compile", {}).get("total", 0.0),
    }


def compile_failure_note(summary: dict[str, Any]) -> str | None:
    """A warning line when graphs failed to compile and were interpreted on the CPU instead:
    the results are still right, but the backend did not run them."""
    n = summary["fallback_ops"].get("fallback::compile_error", 0)
    if not n:
        return None
    return (f"NOTE: {n} graph(s) failed to compile and ran eagerly on the CPU (see the warnings "
            "above; LAZY_STRICT=1 makes this an error)")


def print_runtime(summary: dict[str, Any], detail: str = "") -> None:
    """The closing 'lazy runtime' line (compiles, loads, hits, fallbacks) and any compile-failure note."""
    reused = f"; {summary['reused']} reused a compiled executable from the disk cache" if summary.get("reused") else ""
    interpreted = (f"{summary['interpreted']} run once interpreted (compiled if seen again), "
                   if summary.get("interpreted") else "")
    print(f"lazy runtime:       {summary['compiles']} compiles ({summary['compile_s']:.1f} s{detail}{reused}), "
          f"{summary['loaded']} loaded from the disk cache, {interpreted}"
          f"{summary['cache_hits']} cache hits, {summary['fallbacks']} fallbacks"
          + (f" {summary['fallback_ops']}" if summary["fallbacks"] else ""))
    note = compile_failure_note(summary)
    if note:
        print(note)


def max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """Largest absolute difference between same-named parameters (on the host)."""
    pb = dict(b.named_parameters())
    worst = 0.0
    for name, p in a.named_parameters():
        diff = (p.detach().cpu().double() - pb[name].detach().cpu().double()).abs().max()
        worst = max(worst, float(diff))
    return worst


def progress(iterable: Iterable[Any], total: int, desc: str, enabled: bool = True) -> Iterator[Any]:
    """A tqdm bar when tqdm is installed and enabled, the plain iterable otherwise."""
    if enabled:
        try:
            from tqdm import tqdm

            return iter(tqdm(iterable, total=total, desc=desc, leave=True, dynamic_ncols=True))
        except ImportError:
            pass
    return iter(iterable)


def fmt_ms(ms: float | None) -> str:
    return "n/a" if ms is None else f"{ms:.2f} ms"


def write_json(path: str | None, results: dict[str, Any]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=2, default=str)
