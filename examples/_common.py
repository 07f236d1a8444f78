"""Helpers the examples share: backend flag, step timing, metrics summary, eager comparison.

The examples are meant to be read, so the model and the training loop stay
in each example; only bookkeeping that would repeat lives here.
"""

from __future__ import annotations

import argparse
import json
import os
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
    """Wall time per steady step: the steps that compiled nothing, run back to back as the
    training loop runs them.

    The lazy device queues a step's execution and returns, and tracing the next step overlaps
    it, so one step's own time cannot be taken without a wait that would serialize the steps
    (this timer used to wait after every step: it reported trace + execution, 13.6 ms for
    ``make demo`` where the loop ran at 8-9 ms a step). It waits instead after a step that
    compiled (or loaded, or ran a graph once interpreted: the ``cache_miss`` counter moved),
    which leaves nothing queued, and at the end of each window of steady steps
    (``window_done()``, at the end of each epoch, or ``steady_ms()``); a window's wall time,
    that wait included, over its steps is the steady step. Eager steps are timed the same
    way (nothing to wait for). The run's first step is left out (caches warming).
    """

    def __init__(self, lazy: bool) -> None:
        self.lazy = lazy
        self.compiling: list[float] = []
        self._window: list[float] = []
        self._steady_s = 0.0
        self._steady_n = 0
        self._first = True
        self._t0 = 0.0
        self._compiles = 0

    def __enter__(self) -> StepTimer:
        self._compiles = lazy_core.metrics.counter("cache_miss") if self.lazy else 0
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.lazy and lazy_core.metrics.counter("cache_miss") != self._compiles:
            lazy_core.wait_device_ops()  # nothing queued behind the steady steps that follow
            self._window.clear()  # steps before it overlapped its compile: not steady
            self.compiling.append(time.perf_counter() - self._t0)
        elif self._first:
            if self.lazy:
                lazy_core.wait_device_ops()
        else:
            self._window.append(time.perf_counter() - self._t0)
        self._first = False

    def window_done(self) -> None:
        """End a window of steady steps (an epoch): wait for the device and count its time."""
        t0 = time.perf_counter()
        if self.lazy:
            lazy_core.wait_device_ops()
        if self._window:
            self._steady_s += sum(self._window) + time.perf_counter() - t0
            self._steady_n += len(self._window)
        self._window.clear()

    def steady_ms(self) -> float | None:
        """Mean wall time of a steady step in ms (None if there was none)."""
        self.window_done()
        return self._steady_s / self._steady_n * 1e3 if self._steady_n else None


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
