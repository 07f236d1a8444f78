"""Shrink a failing case and print it as a standalone script.

Shrinking first finds the smallest context that still fails on a fresh
backend (the program alone; with its twin, for a cache bug; the whole
group), then drops programs and lines (with the lines that use what a
dropped line defined) while the case still fails. Any mismatch counts as
still failing, as in delta debugging; the final message is the shrunk one's.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .driver import Failure, reproduces
from .program import Line, Program

MAX_RUNS = 80


def _defined(lines: list[Line], i: int) -> set[str]:
    earlier = set().union(*(ln.uses() for ln in lines[:i])) if i else set()
    return {n for n in lines[i].touched if n not in earlier}


def _drop(lines: list[Line], i: int) -> list[Line]:
    """``lines`` without line ``i`` and every later line that uses a name only it defined."""
    gone = _defined(lines, i)
    out = lines[:i]
    for ln in lines[i + 1:]:
        if ln.uses() & gone:
            gone |= _defined([*out, ln], len(out))
            continue
        out.append(ln)
    return out


Fails = Callable[[list[Program], bool], "str | None"]


def reduce_case(programs: list[Program], batch: bool, msg: str, fails: Fails,
                max_runs: int = MAX_RUNS) -> tuple[list[Program], bool, str]:
    """Drop programs, the batch, and lines while ``fails`` still reports a mismatch."""
    runs = 0

    def attempt(trial: list[Program], b: bool) -> str | None:
        nonlocal runs
        runs += 1
        return fails(trial, b)

    progress = True
    while progress and runs < max_runs:
        progress = False
        # Drop whole programs.
        for i in range(len(programs) - 1, -1, -1):
            if len(programs) > 1 and runs < max_runs:
                trial = programs[:i] + programs[i + 1:]
                m = attempt(trial, batch)
                if m is not None:
                    programs, msg, progress = trial, m, True
        if batch and runs < max_runs:
            m = attempt(programs, False)
            if m is not None:
                batch, msg, progress = False, m, True
        # Drop lines, last first; in lockstep across programs with the same line there (twins).
        longest = max(len(p.lines) for p in programs)
        for i in range(longest - 1, -1, -1):
            if runs >= max_runs:
                break
            templates = {p.lines[i].template for p in programs if i < len(p.lines)}
            for template in templates:
                trial = [Program(_drop(p.lines, i), p.label)
                         if i < len(p.lines) and p.lines[i].template == template else p for p in programs]
                if any(not p.lines for p in trial):
                    continue
                m = attempt(trial, batch)
                if m is not None:
                    programs, msg, progress = trial, m, True
                    break
    return programs, batch, msg


def shrink(backend: str, failure: Failure, culprit: Program | None) -> None:
    """Shrink ``failure`` in place (programs, batch flag, message), in this process."""

    def fails(programs: list[Program], batch: bool) -> str | None:
        return reproduces(backend, programs, batch)

    contexts: list[tuple[list[Program], bool]] = []
    if culprit is not None:
        contexts += [([culprit], False), ([culprit], True)]
        base = next((p for p in failure.programs if p.label + "'" == culprit.label), None)
        if base is not None:
            contexts += [([base, culprit], False), ([base, culprit], True)]
    contexts.append((failure.programs, failure.batch))
    if failure.batch:
        contexts.append((failure.programs, False))  # one graph per program: collisions across graphs
    for programs, batch in contexts:
        msg = fails(programs, batch)
        if msg is not None:
            break
    else:
        failure.message += "\n(does not reproduce on a fresh backend: depends on earlier programs)"
        return
    programs, batch, msg = reduce_case(programs, batch, msg, fails)
    failure.programs, failure.batch, failure.message, failure.shrunk = programs, batch, msg, True


_HEADER = '''"""lazy-mlir fuzz repro ({backend}): {first}

{message}
"""
import os

import torch
import torch.nn.functional as F

os.environ["LAZY_HOST_EVAL"] = "{host_eval}"  # as the fuzz run (lazy_core.host_eval)
os.environ["LAZY_TIERED"] = "0"  # compiled on first sight, as the fuzz run (lazy_core.tiering)
import lazy_core  # noqa: E402

nan, inf = float("nan"), float("inf")
lazy_core.init("{backend}")


def check(name, eager, lazy):
    """dtype, shape, NaN positions, values and signs of zeros as eager PyTorch."""
    lazy = lazy.cpu()
    assert lazy.dtype == eager.dtype and lazy.shape == eager.shape, (name, lazy, eager)
    if eager.is_floating_point():
        e, g = eager.double(), lazy.double()
        assert torch.equal(e.isnan(), g.isnan()), (name, lazy, eager)
        assert torch.allclose(g, e, rtol=1e-4, atol=1e-5, equal_nan=True), (name, lazy, eager)
        z = (e == 0) & (g == 0)
        assert torch.equal(e.signbit()[z], g.signbit()[z]), (name, "signs of zeros", lazy, eager)
    else:
        assert torch.equal(lazy, eager), (name, lazy, eager)
'''


def _program_source(index: int, program: Program) -> str:
    from .check import run_cpu

    cpu = run_cpu(program)
    body = []
    for line, err in zip(program.lines, cpu.errors):
        src = line.source()
        if err is None:
            body.append(f"    {src}")
            continue
        exc = type(err).__name__
        read = "; ".join(f"{n}.cpu()" for n in line.touched)
        body += [
            "    try:",
            f"        {src}",
            '        if DEV == "lazy":',
            f"            {read}  # lazy may raise at the read at the latest",
            f"    except {exc}:",
            "        pass",
            "    else:",
            f'        raise AssertionError("eager raises {exc} at `{src}`; lazy did not")',
        ]
    names = [n for n, v in cpu.env.items() if n != "DEV" and hasattr(v, "dtype")]
    body.append("    return {" + ", ".join(f'"{n}": {n}' for n in names) + "}")
    return f"\n\ndef program_{index}(DEV):  # {program.label}\n" + "\n".join(body)


def render_repro(backend: str, programs: list[Program], batch: bool, message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else "mismatch"
    out = [_HEADER.format(backend=backend, first=first.replace('"', "'"),
                          message=message.replace('"""', "'''"),
                          host_eval=os.environ.get("LAZY_HOST_EVAL") or "1")]
    for i, p in enumerate(programs):
        out.append(_program_source(i, p))
    out.append("\n")
    if batch:
        out.append(f"eager = [p('cpu') for p in [{', '.join(f'program_{i}' for i in range(len(programs)))}]]")
        out.append(f"lazy = [p('lazy') for p in [{', '.join(f'program_{i}' for i in range(len(programs)))}]]")
        out.append("lazy_core.mark_step()  # the programs ran as one graph")
        out.append("for e, g in zip(eager, lazy):")
        out.append("    for name in e:")
        out.append("        check(name, e[name], g[name])")
    else:
        for i in range(len(programs)):
            out.append(f"e, g = program_{i}('cpu'), program_{i}('lazy')")
            out.append("for name in e:")
            out.append("    check(name, e[name], g[name])")
    out.append('print("ok: lazy equals eager")\n')
    return "\n".join(out)
