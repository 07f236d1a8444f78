"""Shrink a case that kills the process (an abort, a segfault, SIGFPE).

The fuzz loop writes each group to ``<repro-dir>/last-<backend>.json`` before
it runs it on the lazy device; if the process dies, ``python -m tools.fuzz``
(or ``python -m tools.fuzz.crash CASE.json``) replays that case in child
processes, shrinks it while the child still dies the same way, and prints
the standalone repro. A crash is the second worst bug after a wrong value.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any

from .program import GLOBALS, Line, Program

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def dump_case(path: str, backend: str, programs: list[Program], batch: bool) -> None:
    from .values import render

    data = {"backend": backend, "batch": batch, "host_eval": os.environ.get("LAZY_HOST_EVAL", ""), "programs": [
        {"label": p.label, "lines": [[ln.template, [render(c) for c in ln.consts], list(ln.touched), ln.category]
                                     for ln in p.lines]} for p in programs]}
    with open(path, "w") as f:
        json.dump(data, f)


def load_case(path: str) -> tuple[str, list[Program], bool]:
    with open(path) as f:
        data = json.load(f)
    programs = [Program([Line(t, tuple(eval(c, dict(GLOBALS)) for c in consts), tuple(touched), cat)
                         for t, consts, touched, cat in p["lines"]], p["label"]) for p in data["programs"]]
    return data["backend"], programs, bool(data["batch"])


def use_case_host_eval(path: str) -> None:
    """Run as the fuzz run that wrote the case did: its ``LAZY_HOST_EVAL`` (children inherit it,
    and ``dump_case`` records it in the trial cases)."""
    with open(path) as f:
        host_eval = json.load(f).get("host_eval")
    if host_eval:
        os.environ["LAZY_HOST_EVAL"] = host_eval
    os.environ["LAZY_TIERED"] = "0"  # the fuzz run compiles each graph on first sight (lazy_core.tiering)


def child_status(backend: str, programs: list[Program], batch: bool, timeout: float = 300) -> int:
    """Exit status of a child process replaying the case (negative: killed by that signal)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        path = f.name
    try:
        dump_case(path, backend, programs, batch)
        return replay_status(path, timeout)
    finally:
        os.unlink(path)


def replay_status(path: str, timeout: float = 300) -> int:
    """Exit status of a child process replaying the case in ``path`` (negative: killed by that signal)."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    try:
        proc = subprocess.run([sys.executable, "-m", "lazy_mlir.tools.fuzz.crash", "--replay", path], cwd=ROOT,
                              env=env, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -9
    return proc.returncode


def _stateful(path: str) -> bool:
    """Whether ``path`` holds a stateful case (stateful.dump_case)."""
    with open(path) as f:
        return json.load(f).get("kind") == "stateful"


def died(status: int) -> bool:
    # A signal, the C runtime's abort() / a fault seen through a shell (128 + signal), or the
    # dynamic loader's exit on a symbol it cannot resolve in loaded code (127: "symbol lookup
    # error", IREE's CPU code calling compiler-rt's __truncsfbf2, fuzz seed 4521 under bf16).
    return status < 0 or status in (127, 134, 136, 139)


def shrink_crash(path: str, max_runs: int = 60) -> tuple[str, str]:
    """(message, standalone repro) of the crash case in ``path``, shrunk."""
    from .shrink import reduce_case, render_repro

    use_case_host_eval(path)
    if _stateful(path):
        from .stateful import shrink_crash as shrink_stateful_crash

        return shrink_stateful_crash(path, max_runs)
    backend, programs, batch = load_case(path)
    status = child_status(backend, programs, batch)
    if not died(status):
        msg = f"the case in {path} did not crash when replayed (exit status {status})"
        return msg, render_repro(backend, programs, batch, msg)

    def fails(trial: list[Program], b: bool) -> str | None:
        st = child_status(backend, trial, b)
        return f"the process dies (exit status {st})" if died(st) else None

    msg = f"the process dies (exit status {status})"
    programs, batch, msg = reduce_case(programs, batch, msg, fails, max_runs=max_runs)
    return msg, render_repro(backend, programs, batch, msg)


def _replay(path: str) -> Any:
    from .driver import reproduces

    use_case_host_eval(path)
    if _stateful(path):
        from .stateful import replay

        print(replay(path))
        return
    backend, programs, batch = load_case(path)
    print(reproduces(backend, programs, batch))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--replay"]:
        _replay(sys.argv[2])
    else:
        message, repro = shrink_crash(sys.argv[1])
        print(message)
        print(repro)
