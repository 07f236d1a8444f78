"""Shared helpers for the benchmarks: subprocess workers, timing, tables, JSON, charts.

Every system under test runs in its own Python process. That is required,
not a nicety: PyTorch's own LTC (``torch._lazy``) registers kernels for the
``Lazy`` dispatch key, which clash with lazy-mlir's in one process, and a
separate process also keeps one system's caches, threads and allocator
state from colouring another's numbers. A worker prints exactly one line
``BENCH_JSON: {...}``; the driver collects those lines, prints a table, and
writes ``bench/results/<name>.json`` and a PNG bar chart.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
RESULTS_DIR = Path(os.environ.get("LAZY_BENCH_RESULTS", BENCH_DIR / "results"))
MARKER = "BENCH_JSON: "


# ---------------------------------------------------------------------------
# Workers


def emit(result: dict[str, Any]) -> None:
    """Hand a worker's result to the driver (the last line it prints)."""
    sys.stdout.flush()
    print(MARKER + json.dumps(result, default=_jsonable), flush=True)


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def run_worker(
    script: str,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Run ``bench/<script> args`` in a fresh interpreter and return its JSON.

    A crash, a timeout or a missing result line comes back as
    ``{"error": ...}`` with the tail of stderr, so one broken system never
    hides the numbers of the others.
    """
    cmd = [sys.executable, str(BENCH_DIR / script), *args]
    full_env = dict(os.environ)
    full_env.setdefault("PYTHONWARNINGS", "ignore")
    if env:
        full_env.update(env)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, cwd=REPO_ROOT, env=full_env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        return {"error": f"timed out after {timeout:.0f}s", "stderr_tail": _tail(e.stderr)}
    wall = time.perf_counter() - start
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARKER):
            result = json.loads(line[len(MARKER):])
            result.setdefault("process_wall_s", wall)
            return result
    return {
        "error": f"worker exited with status {proc.returncode} and no result",
        "stderr_tail": _tail(proc.stderr),
        "stdout_tail": _tail(proc.stdout),
    }


def thread_env(threads: int | None) -> dict[str, str]:
    """Environment giving every system the same number of compute threads.

    ``None`` keeps each library's default (all cores). On a shared,
    oversubscribed machine one thread is the only setting that measures the
    code rather than the scheduler: a 2-thread OpenMP region whose second
    thread is descheduled spins at its barrier (eager MLP steps went from
    ~3 ms to ~270 ms that way here).
    """
    if not threads:
        return {}
    n = str(threads)
    iree = os.environ.get("LAZY_IREE_RUNTIME_FLAGS", "")
    return {
        "OMP_NUM_THREADS": n,
        "MKL_NUM_THREADS": n,
        "LAZY_BENCH_THREADS": n,
        "LAZY_IREE_RUNTIME_FLAGS": f"{iree} --task_topology_group_count={n}".strip(),
    }


def default_threads() -> int | None:
    """``LAZY_BENCH_THREADS`` (0 = library defaults), else 1."""
    value = os.environ.get("LAZY_BENCH_THREADS", "1")
    return int(value) or None


def _tail(text: str | bytes | None, lines: int = 15) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join(text.strip().splitlines()[-lines:])


def error_summary(result: dict[str, Any]) -> str:
    """One line saying why a worker produced no numbers."""
    err = result.get("error", "")
    tail = result.get("stderr_tail", "").strip().splitlines()
    last = tail[-1] if tail else ""
    return f"{err}: {last}" if last else err


# ---------------------------------------------------------------------------
# Timing


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def time_reps(
    fn: Callable[[], Any],
    reps: int,
    after: Callable[[], Any] | None = None,
    cpu_clock: str = "process",
) -> dict[str, list[float]]:
    """Wall and CPU seconds of ``fn()`` over ``reps`` calls; ``after()`` runs untimed between them.

    The CPU clock (``"thread"``: this thread only; ``"process"``: all threads)
    is what keeps numbers meaningful on a shared, oversubscribed machine: wall
    time there measures the neighbours as much as the code, CPU time does not.
    """
    cpu = time.thread_time if cpu_clock == "thread" else time.process_time
    walls, cpus = [], []
    for _ in range(reps):
        c0 = cpu()
        w0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(cpu() - c0)
        if after is not None:
            after()
    return {"wall": walls, "cpu": cpus}


def summarize(samples: dict[str, list[float]], scale: float = 1.0) -> dict[str, float]:
    """Median and min of wall and CPU samples, each multiplied by ``scale``."""
    return {
        "wall_median": median(samples["wall"]) * scale,
        "wall_min": min(samples["wall"]) * scale,
        "cpu_median": median(samples["cpu"]) * scale,
    }


def _commit() -> str:
    """The checked-out commit, with ``-dirty`` when tracked files differ from it."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=BENCH_DIR, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=BENCH_DIR).returncode != 0
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def machine_info() -> dict[str, Any]:
    """What a reader needs to compare numbers across machines (and how busy this one was)."""
    import torch

    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": _commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "iree": _version("iree-base-compiler"),
        "torch_mlir": _version("torch-mlir"),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "machine": platform.machine(),
        "loadavg": list(load),
    }


# ---------------------------------------------------------------------------
# Output


def fmt(x: Any, digits: int = 2) -> str:
    """A table cell: numbers rounded, missing values as '-'."""
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            return "-"
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{digits}f}"
    return str(x)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    """A Markdown table (readable in a terminal and pasteable into an issue)."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    lines = []
    if title:
        lines.append(f"\n### {title}\n")
    lines.append("| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |")
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


def write_json(name: str, data: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, default=_jsonable) + "\n")
    return path


def bar_chart(
    name: str,
    title: str,
    groups: Sequence[str],
    series: dict[str, Sequence[float | None]],
    ylabel: str,
    log: bool = False,
) -> Path | None:
    """Grouped bars: one group per x label, one bar per series. Missing values are left out."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    n = max(len(series), 1)
    width = 0.8 / n
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(groups) * max(1, n / 3)), 4.2))
    for k, (label, values) in enumerate(series.items()):
        xs, ys = [], []
        for i, v in enumerate(values):
            if v is not None and isinstance(v, int | float) and math.isfinite(v) and v > 0:
                xs.append(i + (k - (n - 1) / 2) * width)
                ys.append(v)
        bars = ax.bar(xs, ys, width, label=label)
        ax.bar_label(bars, labels=[fmt(y, 1) for y in ys], fontsize=7, rotation=90, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.margins(y=0.2)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS_DIR / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing."""
    if a is None or b is None or not b:
        return None
    if not (math.isfinite(a) and math.isfinite(b)):
        return None
    return a / b
