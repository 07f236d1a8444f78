"""Cold compile cost per model and backend, and what the on-disk cache saves.

For each model and lazy-mlir backend, two fresh processes run the same short
training loop (``train_step.py``'s worker) against one empty
``LAZY_CACHE_DIR``:

1. cold: every graph is lowered and compiled; the backend writes its
   executables to the disk cache (backends that keep one: IREE);
2. warm: a new process, so the in-memory cache is empty; every graph should
   now come from disk.

Reported per process: compile attempts (in-memory cache misses), real
compiler runs (misses answered by neither disk cache), graph-cache hits
(executables found by the graph's stable hash: no lowering at all), hits in
a backend's own MLIR-keyed cache (IREE's), lowerings, lowering and compile
seconds, the first step's wall time, and the ratio of the first step to a
steady step (goal for the warm process: <= 2x, with zero compiler runs and
zero lowerings). ``--inductor`` adds torch.compile with a cold and a warm
inductor cache for comparison.

    python bench/compile_cache.py [--quick] [--model mlp] [--backends reference,iree-cpu]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Any

import _common as C
from train_step import SLOW

MODELS = ("mlp", "cnn", "bert")
BACKENDS = ("reference", "iree-cpu")


def _summarize(r: dict[str, Any]) -> dict[str, Any]:
    if "error" in r:
        return {"error": C.error_summary(r)}
    counters = r.get("counters", {})
    timers = r.get("timers", {})
    # A graph seen once runs interpreted (lazy_core.tiering): no compile attempt.
    misses = counters.get("cache_miss", 0) - counters.get("interpreted_first_sight", 0)
    graph_hits = counters.get("graph_cache_hit", 0)
    disk_hits = counters.get("disk_cache_hit", 0)
    out = {
        "compile_attempts": misses,
        # A graph-cache hit reads no MLIR-keyed entry, so the two never count one graph twice.
        "compiler_runs": misses - graph_hits - disk_hits,
        "graph_cache_hits": graph_hits,
        "lowerings": timers.get("lower", {}).get("count", 0),
        "disk_cache_hits": disk_hits,
        "disk_cache_writes": counters.get("disk_cache_write", 0),
        "compile_errors": counters.get("fallback::compile_error", 0),
        "lower_s": timers.get("lower", {}).get("total", 0.0),
        "compile_s": timers.get("compile", {}).get("total", 0.0),
        "first_step_s": r.get("first_step_s"),
        "steady_ms": r.get("ms_per_step"),
        "process_wall_s": r.get("process_wall_s"),
    }
    if r.get("system") == "torch.compile":
        inductor = r.get("dynamo", {}).get("inductor", {})
        out["compile_attempts"] = r.get("compiles_warmup", 0) + r.get("compiles_steady", 0)
        out["disk_cache_hits"] = inductor.get("fxgraph_cache_hit", 0)
        out["compiler_runs"] = inductor.get("fxgraph_cache_miss", 0)
        out["compile_s"] = max(0.0, (r.get("first_step_s") or 0.0) - (r.get("ms_per_step") or 0.0) / 1e3)
    first, steady = out["first_step_s"], out["steady_ms"]
    out["first_over_steady"] = C.ratio(first * 1e3 if first is not None else None, steady)
    return out


def run(models: list[str], backends: list[str], quick: bool, inductor: bool, timeout: float,
        threads: int | None, include_slow: bool = False) -> dict[str, Any]:
    # Three warm-up steps: with tiering (lazy_core.tiering, users' default) the steady graph
    # compiles at its second sight, step 3; "first step" is step 1 (the optimizer's state made).
    steps = ["--warmup", "3", "--steps", "2"] if quick else ["--warmup", "3", "--steps", "5"]
    results: dict[str, Any] = {}
    systems = [(f"lazy-mlir/{b}", f"lazy:{b}", "LAZY_CACHE_DIR") for b in backends]
    if inductor:
        systems.append(("torch.compile", "compile", "TORCHINDUCTOR_CACHE_DIR"))
    for model in models:
        for label, system, cache_var in systems:
            if (model, label) in SLOW and not include_slow:
                results.setdefault(model, {})[label] = {
                    "cold": {"error": "skipped by default (minutes); pass --all-systems"}}
                continue
            with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
                env = {**C.thread_env(threads), cache_var: cache}
                entry = {}
                for phase in ("cold", "warm"):
                    print(f"[compile_cache] {model} {label} {phase} ...", file=sys.stderr, flush=True)
                    r = C.run_worker("train_step.py", ["--worker", system, "--model", model, *steps],
                                     env=env, timeout=timeout)
                    entry[phase] = _summarize(r)
                results.setdefault(model, {})[label] = entry
    return results


def report(results: dict[str, Any]) -> None:
    headers = ["model", "system", "process", "compile attempts", "compiler runs", "graph hits", "disk hits",
               "lowerings", "lower s", "compile s", "first step s", "steady ms", "first/steady", "errors"]
    rows = []
    for model, systems in results.items():
        for label, entry in systems.items():
            for phase, s in entry.items():
                if "error" in s:
                    rows.append([model, label, phase] + ["-"] * 10 + [s["error"][:100]])
                    continue
                rows.append([model, label, phase, s["compile_attempts"], s["compiler_runs"],
                             s.get("graph_cache_hits", "-"), s["disk_cache_hits"], s.get("lowerings", "-"),
                             s["lower_s"], s["compile_s"], s["first_step_s"], s["steady_ms"],
                             s["first_over_steady"], s["compile_errors"] or ""])
    print(C.table(headers, rows, title="Compile cost: cold process vs a second process with the disk cache"))
    print("(goal for 'warm': 0 compiler runs, 0 lowerings and first step <= 2x a steady step)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", choices=MODELS, help="repeatable; default all")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--inductor", action="store_true", help="also torch.compile with a cold and a warm cache")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--all-systems", action="store_true", help="include slow model/backend pairs")
    ap.add_argument("--threads", type=int, default=C.default_threads())
    ap.add_argument("--timeout", type=float, default=420.0)
    args = ap.parse_args(argv)
    models = args.model or list(MODELS)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    results = run(models, backends, args.quick, args.inductor, args.timeout, args.threads, args.all_systems)
    report(results)
    out = {"machine": C.machine_info(), "threads": args.threads, "models": results}
    path = C.write_json("compile_cache", out)
    groups, series = [], {"cold first step": [], "warm first step": [], "steady step": []}
    for model, systems in results.items():
        for label, entry in systems.items():
            cold, warm = entry.get("cold", {}), entry.get("warm", {})
            groups.append(f"{model}\n{label.replace('lazy-mlir/', '')}")
            series["cold first step"].append(cold.get("first_step_s"))
            series["warm first step"].append(warm.get("first_step_s"))
            steady = warm.get("steady_ms")
            series["steady step"].append(steady / 1e3 if steady else None)
    png = C.bar_chart("compile_cache", "First step, cold vs disk cache (s, log scale)", groups, series,
                      "seconds", log=True)
    print(f"\nwrote {path}" + (f" and {png}" if png else ""))
    return out


if __name__ == "__main__":
    main()
