"""Full OpInfo sweep: every op in ``op_db`` on one lazy backend, as JSON and a table.

    python tools/opinfo_sweep.py --backend reference --out bench/results/opinfo_reference.json

For each OpInfo (and variant) and each of float32/int64/bool the op supports,
up to ``--max-samples`` CPU samples run on ``lazy`` and on the CPU and are
compared (``test/opinfo_util.py``). The op's status is the worst of its
samples: ``pass``, ``expected_fallback`` (right answer; part of it ran
eagerly by design, e.g. a data-dependent shape), ``fallback`` (right answer,
but an op that should trace ran eagerly), ``mismatch``, ``error``,
``timeout``, ``crash``; ``excluded`` ops (``test/opinfo_exclusions.py``) are
listed but not run. ``LAZY_STRICT=1`` is set so compile failures are errors
rather than silently interpreted graphs.

Ops run in worker processes fed one op at a time: a worker that hangs past
``--op-timeout`` or dies (a crash in compiled code) is replaced, the op is
recorded as ``timeout``/``crash`` and the sweep goes on.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import select
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEST_DIR = os.path.join(ROOT, "test")
PREFIX = "@@OPINFO "
INPLACE_SUFFIX = "#inplace"  # "add#inplace": the sweep entry for add's in-place variant (add_)


# -- worker side ---------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> None:
    sys.path[:0] = [ROOT, TEST_DIR]
    import warnings

    import opinfo_exclusions as ex
    import opinfo_util as u
    import torch

    import lazy_core

    warnings.simplefilter("ignore")
    lazy_core.init(args.backend)
    ops = u.ops_by_name()
    dtypes = [getattr(torch, d) for d in args.dtypes.split(",")]

    def emit(obj: dict) -> None:
        sys.stdout.write(PREFIX + json.dumps(obj) + "\n")
        sys.stdout.flush()

    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        emit({"begin": name})
        start = time.perf_counter()
        base = name.partition(INPLACE_SUFFIX)[0]
        try:
            result = _sweep_op(u, ex, ops[base], dtypes, args, name != base, emit)
        except BaseException as e:  # keep going whatever the op does
            result = {"status": "error", "message": "sweep: " + u.first_line(e)}
        result["seconds"] = round(time.perf_counter() - start, 3)
        emit({"result": name, "data": result})
        try:
            u.drop_pending()
            lazy_core.executor().clear_cache()
        except Exception:
            pass


def _sweep_op(u: Any, ex: Any, op: Any, dtypes: list, args: argparse.Namespace, inplace: bool,
              emit: Any) -> dict:
    name = u.op_name(op)
    per_dtype: dict[str, Any] = {}
    status = None
    message = ""
    fallbacks: dict[str, str] = {}
    for dtype in dtypes:
        if not u.supports_dtype(op, dtype):
            continue
        try:
            samples = u.samples(op, dtype, args.max_samples)
        except Exception as e:
            per_dtype[str(dtype)] = {"status": "skip", "message": "sample_inputs: " + u.first_line(e)}
            continue
        d_status, d_message, passed, ran = None, "", 0, 0
        for i, sample in enumerate(samples):
            emit({"at": f"{dtype}: sample {i}: "})  # names the sample if the worker dies in it
            try:
                with u.time_limit(args.sample_timeout):
                    r = u.run_sample(op, sample, dtype, args.backend, metadata_only=name in ex.METADATA_ONLY,
                                     inplace=inplace)
            except u.SampleTimeout:
                r = u.SampleResult("timeout", f"sample {i} exceeded {args.sample_timeout}s")
            except Exception as e:
                r = u.SampleResult("error", "harness: " + u.first_line(e))
            if r.status == "skip":
                continue
            ran += 1
            passed += r.status in ("pass", "expected_fallback")
            fallbacks.update(r.fallbacks)
            if d_status is None or u.worse(r.status, d_status) != d_status:
                d_status, d_message = r.status, (f"sample {i}: {r.message}" if r.message else "")
        if ran == 0:
            per_dtype[str(dtype)] = {"status": "skip", "message": "no runnable samples"}
            continue
        per_dtype[str(dtype)] = {"status": d_status, "message": d_message, "samples": ran, "passed": passed}
        if status is None or u.worse(d_status, status) != status:
            status, message = d_status, (f"{dtype}: {d_message}" if d_message else "")
    if status is None:
        return {"status": "skip", "message": "no samples for the swept dtypes", "dtypes": per_dtype}
    out = {"status": status, "message": message, "dtypes": per_dtype}
    if fallbacks:
        out["fallbacks"] = fallbacks
    return out


# -- parent side ---------------------------------------------------------------------


class _Worker:
    """One worker process and the ops it still has to run."""

    def __init__(self, args: argparse.Namespace, queue: list[str]) -> None:
        self.queue = queue
        self.current: str | None = None
        self.begun: str | None = None  # the op the worker said it started
        self.at = ""  # and the sample it is running
        self.started = 0.0
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--backend", args.backend,
               "--max-samples", str(args.max_samples), "--dtypes", args.dtypes,
               "--sample-timeout", str(args.sample_timeout)]
        env = dict(os.environ, LAZY_STRICT="1", PYTHONUNBUFFERED="1")
        # Thousands of one-off graphs: keep them out of the on-disk compilation cache.
        env.setdefault("LAZY_DISK_CACHE", "0")
        self.stderr_path = os.path.join(args.log_dir, f"worker-{os.getpid()}-{id(self)}.log")
        self.stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                     text=True, cwd=ROOT, env=env, bufsize=1)
        self.buf = ""
        self.feed()

    def feed(self) -> None:
        """Send the next op (one at a time, so a crash loses only that op)."""
        if self.queue:
            name = self.queue.pop(0)
            self.current = name
            self.started = time.monotonic()
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(name + "\n")
                self.proc.stdin.flush()
            except BrokenPipeError:
                pass  # the worker died; its EOF is handled by the read loop
        else:
            self.current = None
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass

    def stderr_tail(self) -> str:
        self.stderr.flush()
        try:
            with open(self.stderr_path) as f:
                lines = [ln.rstrip() for ln in f.read().splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


def _run_parent(args: argparse.Namespace) -> None:
    sys.path[:0] = [ROOT, TEST_DIR]
    import opinfo_exclusions as ex
    import opinfo_util as u

    ops = u.ops_by_name()
    names = sorted(ops)
    if args.ops:
        wanted = set(args.ops.split(","))
        names = [n for n in names if n in wanted or n.split(".")[0] in wanted]
    if args.inplace:
        names = sorted(names + [n + INPLACE_SUFFIX for n in names if ops[n].inplace_variant is not None])
    results: dict[str, dict] = {}
    todo = []
    for n in names:
        reason = ex.excluded_reason(n.partition(INPLACE_SUFFIX)[0])
        if reason:
            results[n] = {"status": "excluded", "message": reason}
        else:
            todo.append(n)
    os.makedirs(args.log_dir, exist_ok=True)
    jobs = max(1, min(args.jobs, len(todo)))
    shards = [todo[i::jobs] for i in range(jobs)]
    workers = [_Worker(args, shard) for shard in shards if shard]
    t0 = time.monotonic()
    done = 0
    deaths = 0  # workers that died in a row without finishing an op
    while workers:
        fds = {w.proc.stdout.fileno(): w for w in workers if w.proc.stdout is not None}
        ready, _, _ = select.select(list(fds), [], [], 1.0)
        for fd in ready:
            w = fds[fd]
            chunk = os.read(fd, 65536).decode(errors="replace")
            if not chunk:  # the worker exited
                deaths += 1
                if w.current is not None and w.begun != w.current and deaths < 3:
                    w.queue.insert(0, w.current)  # died between ops: not this op's fault
                    w.current = None
                if w.current is not None:
                    code = w.proc.wait()
                    results[w.current] = {"status": "crash",
                                          "message": f"{w.at}worker exited with {code}: {w.stderr_tail()}"}
                    done += 1
                    _progress(args, done, len(todo), w.current, results[w.current], t0)
                    rest = w.queue
                    w.kill()
                    workers.remove(w)
                    if rest:
                        workers.append(_Worker(args, rest))
                else:
                    rest = w.queue
                    w.kill()
                    workers.remove(w)
                    if rest:
                        workers.append(_Worker(args, rest))
                continue
            w.buf += chunk
            while "\n" in w.buf:
                line, w.buf = w.buf.split("\n", 1)
                if not line.startswith(PREFIX):
                    continue
                msg = json.loads(line[len(PREFIX):])
                if "begin" in msg:
                    w.begun = msg["begin"]
                    w.at = ""
                if "at" in msg:
                    w.at = msg["at"]
                if "result" in msg:
                    deaths = 0
                    results[msg["result"]] = msg["data"]
                    done += 1
                    _progress(args, done, len(todo), msg["result"], msg["data"], t0)
                    w.feed()
        now = time.monotonic()
        for w in list(workers):
            if w.current is not None and now - w.started > args.op_timeout:
                results[w.current] = {"status": "timeout", "message": f"{w.at}op exceeded {args.op_timeout}s"}
                done += 1
                _progress(args, done, len(todo), w.current, results[w.current], t0)
                rest = w.queue
                w.kill()
                workers.remove(w)
                if rest:
                    workers.append(_Worker(args, rest))
    _report(args, results, time.monotonic() - t0)


def _progress(args: argparse.Namespace, done: int, total: int, name: str, r: dict, t0: float) -> None:
    if args.quiet:
        return
    msg = r.get("message", "")
    print(f"[{done}/{total} {time.monotonic() - t0:6.0f}s] {r['status']:<17} {name}"
          f"{'  ' + msg[:120] if msg and r['status'] != 'pass' else ''}", flush=True)


def _report(args: argparse.Namespace, results: dict[str, dict], seconds: float) -> None:
    import opinfo_util as u
    import torch

    counts = collections.Counter(r["status"] for r in results.values())
    causes: dict[str, list[str]] = collections.defaultdict(list)
    fallback_ops: collections.Counter[str] = collections.Counter()
    for name, r in sorted(results.items()):
        if r["status"] in ("mismatch", "error", "timeout", "crash"):
            msg = r.get("message", "")
            # "float32: sample 3: Xxx: ..." -> the error itself
            core = msg.split(": ", 2)[-1] if msg.startswith("torch.") else msg
            # (A timeout's message is "sample 1 exceeded 60.0s": no ": " after the sample.)
            core = core.split(": ", 1)[-1] if core.startswith("sample ") else core
            causes[f"{r['status']}: {u.cause(core)}"].append(name)
        for op_str, why in r.get("fallbacks", {}).items():
            if why not in u.BY_DESIGN:
                fallback_ops[f"{op_str} ({why})"] += 1
    top = sorted(causes.items(), key=lambda kv: -len(kv[1]))
    out = {
        "backend": args.backend,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "config": {"max_samples": args.max_samples, "dtypes": args.dtypes.split(","), "strict": True,
                   "inplace": args.inplace},
        "seconds": round(seconds, 1),
        "summary": dict(sorted(counts.items(), key=lambda kv: u.STATUSES.index(kv[0])
                               if kv[0] in u.STATUSES else 99)),
        "top_causes": [{"cause": c, "count": len(ops), "ops": ops[:20]} for c, ops in top[:40]],
        "fallback_ops": dict(fallback_ops.most_common()),
        "ops": dict(sorted(results.items())),
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    total = len(results)
    print(f"\nOpInfo sweep on {args.backend!r}: {total} ops in {seconds:.0f}s -> {args.out}")
    print(f"  {'status':<18} {'ops':>5}")
    for status in (*u.STATUSES, "skip", "excluded"):
        if counts.get(status):
            print(f"  {status:<18} {counts[status]:>5}")
    ran = total - counts.get("excluded", 0) - counts.get("skip", 0)
    ok = counts.get("pass", 0) + counts.get("expected_fallback", 0)
    print(f"  correct (pass + expected_fallback): {ok}/{ran} run; pass without any fallback: "
          f"{counts.get('pass', 0)}")
    if top:
        print("\nTop failure causes:")
        for c, ops in top[: args.top]:
            print(f"  {len(ops):>4}  {c[:150]}")
            print(f"        e.g. {', '.join(ops[:6])}")
    if fallback_ops:
        print("\nOps that ran eagerly (not by design), by number of OpInfos:")
        for op_str, n in fallback_ops.most_common(args.top):
            print(f"  {n:>4}  {op_str}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default=os.environ.get("LAZY_BACKEND", "reference"))
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/opinfo_<backend>.json)")
    ap.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    ap.add_argument("--max-samples", type=int, default=4, help="samples per op and dtype")
    ap.add_argument("--dtypes", default="float32,int64,bool")
    ap.add_argument("--inplace", action="store_true",
                    help=f"also sweep each op's in-place variant (as name{INPLACE_SUFFIX})")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--sample-timeout", type=float, default=60.0, help="seconds per sample (in-process)")
    ap.add_argument("--op-timeout", type=float, default=600.0, help="seconds per op before the worker is killed")
    ap.add_argument("--top", type=int, default=15, help="failure causes to print")
    ap.add_argument("--log-dir", default=os.path.join(tempfile.gettempdir(), "lazy-mlir-opinfo-logs"),
                    help="worker stderr logs")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = os.path.join(ROOT, "bench", "results", f"opinfo_{args.backend}.json")
    if args.worker:
        _worker(args)
    else:
        _run_parent(args)


if __name__ == "__main__":
    main()
