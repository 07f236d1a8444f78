"""Run a fuzz program on eager CPU and on the lazy device, and compare everything.

Compared: each line's raised exception type (lazy may raise at the call, or
at the latest when the line's result is read), and at the end every tensor
variable's dtype, shape, NaN positions, values, and signs of zeros. Values
are compared with a small tolerance for floats (compiled kernels may fuse
and reassociate), exactly for integers and booleans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .program import Line, Program, run_line


@dataclass
class Trace:
    """What one run of a program did: each line's exception (or None), and the final variables."""

    errors: list[BaseException | None] = field(default_factory=list)
    env: dict[str, Any] = field(default_factory=dict)
    #: A line raised on the CPU and lazy deferred it to the read, which raised: nothing after it compares.
    stopped_at: int | None = None


def run_cpu(program: Program) -> Trace:
    trace = Trace(env={"DEV": "cpu"})
    for line in program.lines:
        trace.errors.append(_run(line, trace.env))
    return trace


def _run(line: Line, env: dict[str, Any]) -> BaseException | None:
    try:
        run_line(line.source(), env)
    except Exception as e:  # the program's own error, compared with the other device's
        return e
    return None


def _describe(e: BaseException | None) -> str:
    if e is None:
        return "no error"
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}({first[:160]!r})"


def trace_lazy(program: Program, cpu: Trace) -> tuple[Trace, str | None]:
    """Run ``program`` on the lazy device, checking each line's error against ``cpu``.

    Returns the trace and the first mismatch (None if every line agreed).
    """
    trace = Trace(env={"DEV": "lazy"})
    for i, line in enumerate(program.lines):
        expected = cpu.errors[i]
        got = _run(line, trace.env)
        trace.errors.append(got)
        if expected is None and got is not None:
            return trace, f"line {i} `{line.source()}`: lazy raised {_describe(got)}, eager did not"
        if expected is not None and got is None:
            # Allowed only if reading the line's result raises the same error.
            try:
                for name in line.touched:
                    value = trace.env.get(name)
                    if isinstance(value, torch.Tensor):
                        value.cpu()
            except Exception as e:
                if type(e) is not type(expected):
                    return trace, (f"line {i} `{line.source()}`: eager raised {_describe(expected)}, lazy raised "
                                   f"{_describe(e)} at the read")
                # The line's pending result cannot be computed: drop it, or every later
                # graph that includes it fails too (nothing after this line is compared).
                trace.stopped_at = i
                trace.env.clear()
                return trace, None
            return trace, (f"line {i} `{line.source()}`: eager raised {_describe(expected)}, lazy raised nothing "
                           "(not at the call, not at the read)")
        if expected is not None and got is not None and type(got) is not type(expected):
            return trace, f"line {i} `{line.source()}`: eager raised {_describe(expected)}, lazy {_describe(got)}"
    return trace, None


def _tolerance(dtype: torch.dtype) -> tuple[float, float]:
    if dtype == torch.float64:
        # Not tighter: a float32 value read with ``.item()`` carries its summation order's
        # few ulps (~1e-7 each) into float64 arithmetic (fuzz seed 22 program 64).
        return 1e-6, 1e-7
    if dtype in (torch.float16, torch.bfloat16):
        return 2e-3, 2e-3
    return 1e-4, 1e-5


def _from_narrow_floats(program: Program, env: dict[str, Any]) -> set[str]:
    """Variables computed (directly or not) from a float32 or narrower value.

    A float64 result of such a value carries that value's ulps: ``x.add(v1.erf(), alpha=-2)``
    with ``erf`` of a float32 one ulp (6e-8) off was 1.2e-7 off at 0.0094, past float64's
    tolerance, while every value was right to float32's (fuzz seed 1204 p1695, reference)."""
    narrow: set[str] = set()
    for line in program.lines:
        used = line.uses()
        if used & narrow or any(isinstance(env.get(n), torch.Tensor) and env[n].is_floating_point()
                                and env[n].dtype != torch.float64 for n in used):
            narrow.update(line.touched)
    return narrow


def compare_value(name: str, expected: torch.Tensor, got: Any, zero_signs: bool = True,
                  narrow: bool = False) -> str | None:
    """None if ``got`` (lazy) equals ``expected`` (eager CPU), else what differs; ``narrow``:
    a float64 value computed from float32 ones is compared at float32's tolerance."""
    if not isinstance(got, torch.Tensor):
        return f"{name}: lazy gave {type(got).__name__}, eager a tensor"
    try:
        host = got.cpu()
    except Exception as e:
        return f"{name}: reading the lazy value raised {_describe(e)}"
    if host.dtype != expected.dtype:
        return f"{name}: dtype {host.dtype}, eager {expected.dtype}"
    if host.shape != expected.shape:
        return f"{name}: shape {tuple(host.shape)}, eager {tuple(expected.shape)}"
    if not expected.is_floating_point():
        if not torch.equal(host, expected):
            return f"{name}: values differ\n  lazy  {host.tolist()}\n  eager {expected.tolist()}"
        return None
    e64, h64 = expected.double(), host.double()
    if not torch.equal(e64.isnan(), h64.isnan()):
        return f"{name}: NaN positions differ\n  lazy  {host.tolist()}\n  eager {expected.tolist()}"
    rtol, atol = _tolerance(torch.float32 if narrow and expected.dtype == torch.float64 else expected.dtype)
    if not bool(torch.isclose(h64, e64, rtol=rtol, atol=atol, equal_nan=True).all()):
        return f"{name}: values differ\n  lazy  {host.tolist()}\n  eager {expected.tolist()}"
    zeros = (e64 == 0) & (h64 == 0)
    if zero_signs and not torch.equal(e64.signbit()[zeros], h64.signbit()[zeros]):
        return f"{name}: signs of zeros differ\n  lazy  {host.tolist()}\n  eager {expected.tolist()}"
    return None


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _discrete_of_inexact(name: str, cpu: Trace, lazy: Trace, program: Program, narrow: set[str]) -> bool:
    """Whether integer or bool ``name`` was computed from a float operand that lazy gives only
    within tolerance of eager, not bit for bit: then a cast, a comparison or a rounding may
    rightly land on the other side (``x.std(0).bool()`` of a constant column: eager's two-pass
    variance left 1.3e-7, lazy an exact 0, so True against False; fuzz seed 4301 p291,
    reference). The operand's own value was already compared at its tolerance."""
    defining = [i for i, line in enumerate(program.lines) if name in line.touched]
    if not defining:
        return False
    i = defining[-1]
    later = set().union(*(line.touched for line in program.lines[i + 1:])) if i + 1 < len(program.lines) else set()
    for operand in program.lines[i].uses() - {name} - later:
        expected, got = cpu.env.get(operand), lazy.env.get(operand)
        if not (isinstance(expected, torch.Tensor) and expected.is_floating_point() and isinstance(got, torch.Tensor)):
            continue
        try:
            host = got.cpu()
        except Exception:
            continue  # its own comparison reports the failed read
        if (host.dtype == expected.dtype and not _same_bits(host, expected)
                and compare_value(operand, expected, got, narrow=operand in narrow) is None):
            return True
    return False


def compare_env(cpu: Trace, lazy: Trace, program: Program | None = None) -> str | None:
    """Compare every tensor variable the CPU run left (unless a deferred error stopped the lazy run).

    Signs of zeros are not compared where eager leaves them to its BLAS
    (``Program.zero_sign_unspecified``); an integer or bool value computed from a float that
    lazy matches only within tolerance is not compared (``_discrete_of_inexact``)."""
    if lazy.stopped_at is not None:
        return None
    unspecified = program.zero_sign_unspecified() if program is not None else set()
    narrow = _from_narrow_floats(program, cpu.env) if program is not None else set()
    for name, expected in cpu.env.items():
        if not isinstance(expected, torch.Tensor):
            continue
        if name not in lazy.env:
            return f"{name}: eager defines it, lazy does not"
        diff = compare_value(name, expected, lazy.env[name], zero_signs=name not in unspecified,
                             narrow=name in narrow)
        if diff is not None and not (program is not None and not expected.is_floating_point()
                                     and _discrete_of_inexact(name, cpu, lazy, program, narrow)):
            return diff
    return None
