"""torch-mlir's end-to-end test suite run on lazy backends, against eager PyTorch.

    python -m tools.e2e_conformance --suite-dir DIR [--backends reference,iree-cpu]
                                    [--every 4] [--filter REGEX] [--out results.json]

torch-mlir's e2e suite (``projects/pt1/python/torch_mlir_e2e_test`` in the
torch-mlir source repository, about 1,800 small ``nn.Module`` programs with
their inputs) is how torch-mlir and its LTC backend measure op coverage. It is
in no wheel, so this is a development-time measurement, not a CI test:
``DIR`` is the suite's parent folder (``projects/pt1/python`` of a checkout).

Each case's golden trace comes from the suite's own ``generate_golden_trace``
(eager PyTorch on the CPU); the case then runs with the module and its inputs
moved to ``lazy``, each call from the RNG state its golden call started with
(lazy draws random numbers from the CPU generator, so they are eager's), and
the suite's own report (``reporting.SingleTestReport``: rtol 1e-3, atol 1e-7,
NaNs equal) decides whether the values match. A case is

* ``pass``: values match, nothing ran eagerly;
* ``pass_fallback``: values match, but some op ran on the CPU (an op with no
  torch-dialect lowering, or a graph that failed to compile: its counters are
  listed);
* ``mismatch``: a wrong value, the worst outcome (exit status 1);
* ``error``: lazy raised where eager did not;
* ``crash`` / ``timeout``: the worker process died or hung (it is restarted
  and the run goes on with the next case);
* ``not_run``: a worker that died before its first case (its stderr is shown).

Cases run in one worker process per backend, in the suite's order, so caches
are shared as in a real program. Modules that need packages not installed here
(torchvision) are reported as not imported. The suite's framework imports the
``multiprocess`` package; where it is missing the standard library's
``multiprocessing`` (whose API it copies) stands in, as this tool never uses it.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from typing import Any

#: Per-case time limit (compiles included); a hung worker is killed and restarted.
CASE_TIMEOUT_S = 180
#: Time for a worker to import torch, lazy_core and the suite before its first case.
STARTUP_TIMEOUT_S = 600
#: This module as ``-m`` names it (``tools.…`` in a checkout, ``lazy_mlir.tools.…`` installed).
_MODULE = __spec__.name if __spec__ is not None else "tools.e2e_conformance"


def _import_suite(suite_dir: str) -> tuple[list[Any], list[str]]:
    """The suite's registered tests, and the test modules that failed to import."""
    import importlib
    import multiprocessing
    import types

    sys.path.insert(0, suite_dir)
    try:
        import multiprocess  # noqa: F401 - the framework's import
    except ImportError:
        sys.modules["multiprocess"] = multiprocessing
    from torch_mlir_e2e_test import registry

    # The package's __init__ imports torch_mlir._version, which the wheels lack;
    # its submodules only need the package to exist.
    folder = os.path.join(suite_dir, "torch_mlir_e2e_test", "test_suite")
    package = types.ModuleType("torch_mlir_e2e_test.test_suite")
    package.__path__ = [folder]
    sys.modules[package.__name__] = package
    missing = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".py") and name != "__init__.py":
            try:
                importlib.import_module(f"{package.__name__}.{name[:-3]}")
            except Exception as e:  # noqa: BLE001 - a module needing an absent package
                missing.append(f"{name[:-3]}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return list(registry.GLOBAL_TEST_REGISTRY), missing


def _selected(tests: list[Any], every: int, pattern: str | None) -> list[Any]:
    tests = sorted(tests, key=lambda t: t.unique_name)[::every]
    if pattern:
        tests = [t for t in tests if re.search(pattern, t.unique_name)]
    return tests


def _worker(suite_dir: str, backend: str, names: list[str]) -> None:
    """Run ``names`` in order on ``backend``, one JSON line per case on stdout."""
    import torch
    from torch.utils._pytree import tree_map

    import lazy_core
    from lazy_core import metrics

    tests, _ = _import_suite(suite_dir)
    from torch_mlir_e2e_test import framework, reporting

    by_name = {t.unique_name: t for t in tests}

    def to(device: str) -> Any:
        return lambda v: v.to(device) if isinstance(v, torch.Tensor) else v

    # Each golden call's RNG state, so a random op draws the same numbers on lazy (whose random
    # numbers come from the CPU generator, as eager's do) as in the golden trace.
    states: list = []
    traced_call = framework._Tracer.__call__

    def recording_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        states.append(torch.get_rng_state())
        return traced_call(self, *args, **kwargs)

    framework._Tracer.__call__ = recording_call

    class LazyConfig(framework.TestConfig):
        def compile(self, program: torch.nn.Module, verbose: bool = False) -> torch.nn.Module:
            return program.to("lazy")

        def run(self, artifact: torch.nn.Module, trace: list) -> list:
            out = []
            for i, item in enumerate(trace):
                torch.set_rng_state(states[i])
                result = getattr(artifact, item.symbol)(*tree_map(to("lazy"), item.inputs))
                out.append(framework.TraceItem(item.symbol, item.inputs, tree_map(to("cpu"), result)))
            return out

    lazy_core.init(backend)
    config = LazyConfig()
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        before = dict(metrics.counters())
        start = time.perf_counter()
        try:
            golden = framework.generate_golden_trace(by_name[name])
        except Exception as e:  # noqa: BLE001 - eager itself fails: not a lazy outcome
            print(json.dumps({"case": name, "outcome": "golden_error", "detail": f"{type(e).__name__}: {e}"[:300]}),
                  flush=True)
            continue
        del golden
        states.clear()
        result = framework.compile_and_run_test(by_name[name], config)
        after = metrics.counters()
        delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        fallbacks = sorted(k.split("::", 1)[1] for k in delta if k.startswith("fallback::") and k != "fallback::total")
        row: dict[str, Any] = {"case": name, "seconds": round(time.perf_counter() - start, 2),
                               "compiles": delta.get("compile", 0), "fallbacks": fallbacks}
        error = result.compilation_error or result.runtime_error
        if error:
            row["outcome"] = "error"
            row["detail"] = error.strip().splitlines()[-1][:300]
        else:
            report = reporting.SingleTestReport(result, reporting.ErrorContext.empty())
            if report.failed:
                row["outcome"] = "mismatch"
                row["detail"] = report.error_str()[:600]
            else:
                row["outcome"] = "pass_fallback" if fallbacks else "pass"
        print(json.dumps(row), flush=True)


def _run_backend(suite_dir: str, backend: str, names: list[str]) -> list[dict]:
    """Every case of ``names`` on ``backend`` in worker processes, restarted after a crash or hang."""
    rows: list[dict] = []
    todo = list(names)
    while todo:
        cmd = [sys.executable, "-m", _MODULE, "--worker", "--suite-dir", suite_dir,
               "--backends", backend, "--names", ",".join(todo)]
        # Each case runs once: compiled, not interpreted as a first sight (lazy_core.tiering).
        env = dict(os.environ, PYTHONUNBUFFERED="1", LAZY_TIERED="0")
        log = tempfile.TemporaryFile("w+")  # the worker's stderr, for the report of a crash
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env,
                                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        lines: queue.Queue[str | None] = queue.Queue()

        def pump(out: Any = proc.stdout, into: queue.Queue = lines) -> None:
            for text in out:
                into.put(text)
            into.put(None)

        threading.Thread(target=pump, daemon=True).start()
        current = None
        done = {r["case"] for r in rows}
        deadline = time.monotonic() + STARTUP_TIMEOUT_S  # imports torch and the suite first
        timed_out = False
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                timed_out = True
                proc.kill()
                break
            if line is None:
                break
            if not line.startswith("{"):
                continue
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
                deadline = time.monotonic() + CASE_TIMEOUT_S
                continue
            rows.append(msg)
            done.add(msg["case"])
            current = None
            _progress(backend, len(rows), len(names), msg)
        proc.wait()
        log.seek(0)
        tail = " | ".join(log.read().strip().splitlines()[-3:])
        log.close()
        if current is not None:
            outcome = "timeout" if timed_out else "crash"
            rows.append({"case": current, "outcome": outcome, "detail": f"worker rc {proc.returncode}: {tail}"})
            done.add(current)
            _progress(backend, len(rows), len(names), rows[-1])
        todo = [n for n in names if n not in done]
        if todo and current is None:  # the worker stopped between cases: nothing to blame
            sys.stderr.write(f"[{backend}] the worker stopped before its next case (rc {proc.returncode}"
                             f"{', timed out starting' if timed_out else ''}): {tail}\n")
            rows += [{"case": n, "outcome": "not_run", "detail": f"worker rc {proc.returncode}: {tail}"} for n in todo]
            break
    return rows


def _progress(backend: str, i: int, n: int, row: dict) -> None:
    if row["outcome"] not in ("pass",):
        sys.stderr.write(f"[{backend} {i}/{n}] {row['case']}: {row['outcome']} {row.get('detail', '')[:160]}"
                         f"{' ' + ','.join(row['fallbacks']) if row.get('fallbacks') else ''}\n")
    elif i % 25 == 0:
        sys.stderr.write(f"[{backend} {i}/{n}]\n")


def summarize(results: dict[str, list[dict]]) -> str:
    """A markdown table of outcomes per backend (golden errors left out of the rates)."""
    lines = ["| backend | cases | pass | pass, no fallback | mismatch | error | crash/timeout | not run |",
             "|---|---|---|---|---|---|---|---|"]
    for backend, rows in results.items():
        c = Counter(r["outcome"] for r in rows if r["outcome"] != "golden_error")
        n = sum(c.values()) - c["not_run"]
        passed = c["pass"] + c["pass_fallback"]

        def pct(k: int, n: int = n) -> str:
            return f"{k} ({100 * k / n:.1f}%)" if n else "0"

        lines.append(f"| {backend} | {n} | {pct(passed)} | {pct(c['pass'])} | {c['mismatch']} | {c['error']} | "
                     f"{c['crash'] + c['timeout']} | {c['not_run']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite-dir", required=True,
                   help="torch-mlir's projects/pt1/python folder (holds torch_mlir_e2e_test)")
    p.add_argument("--backends", default="reference,iree-cpu")
    p.add_argument("--every", type=int, default=1, help="run every N-th case in name order (default: all)")
    p.add_argument("--filter", help="only cases whose name matches this regular expression")
    p.add_argument("--out", help="write every case's row as JSON here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--names", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    suite_dir = os.path.abspath(args.suite_dir)
    if args.worker:
        _worker(suite_dir, args.backends, args.names.split(","))
        return 0
    if not os.path.isdir(os.path.join(suite_dir, "torch_mlir_e2e_test")):
        p.error(f"{suite_dir} holds no torch_mlir_e2e_test folder")
    tests, missing = _import_suite(suite_dir)
    names = [t.unique_name for t in _selected(tests, args.every, args.filter)]
    for m in missing:
        sys.stderr.write(f"not imported: {m}\n")
    results = {b: _run_backend(suite_dir, b, names) for b in args.backends.split(",")}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"cases": len(names), "every": args.every, "not_imported": missing, "results": results}, f,
                      indent=1)
    print(summarize(results))
    for backend, rows in results.items():
        for r in rows:
            if r["outcome"] in ("mismatch", "error", "crash", "timeout"):
                print(f"{backend} {r['outcome']}: {r['case']}: {r.get('detail', '')[:200]}")
    return 1 if any(r["outcome"] == "mismatch" for rows in results.values() for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
