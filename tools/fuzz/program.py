"""Fuzz programs: lines of PyTorch source, generated against eager CPU as they grow.

A program is a list of ``Line``s, each one Python statement over variables
``v0, v1, ...`` and the device name ``DEV``. Constants are kept apart from
the template (``{0}``, ``{1}``) so a twin program can swap them for values
that collide in Python (values.partners), and so a failing program prints as
a standalone repro. The generator runs each new line on the CPU at once: the
CPU tensors tell the next line which operands fit (dtype, rank, NaN), and a
line the CPU rejects is usually dropped, sometimes kept to check that the
lazy device raises the same error.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from . import values

_VAR = re.compile(r"\bv\d+\b")


@dataclass(frozen=True)
class Line:
    """One statement. ``touched``: the variables it defines or writes (read to force its error)."""

    template: str
    consts: tuple[Any, ...] = ()
    touched: tuple[str, ...] = ()
    category: str = "input"
    #: Operands of a maximum/minimum (or the input of a max/min reduction) whose result
    #: eager leaves undefined when 0.0 and -0.0 meet (see ``opposite_zeros``).
    tie_operands: tuple[str, ...] = ()

    def source(self) -> str:
        return self.template.format(*[values.render(c) for c in self.consts])

    def uses(self) -> set[str]:
        return set(_VAR.findall(self.template))

    def with_consts(self, consts: tuple[Any, ...]) -> Line:
        return Line(self.template, consts, self.touched, self.category, self.tie_operands)


@dataclass
class Program:
    lines: list[Line] = field(default_factory=list)
    label: str = ""

    def source(self, indent: str = "") -> str:
        return "\n".join(indent + ln.source() for ln in self.lines)

    def categories(self) -> set[str]:
        return {ln.category for ln in self.lines}

    def zero_sign_unspecified(self) -> set[str]:
        """Variables computed from a matrix product or a convolution, whose zeros' signs eager
        leaves to its BLAS (or oneDNN).

        The CPU's GEMM gives ``-0.0`` for a sum of negative-zero products when K is 1 and
        ``+0.0`` at 1x1 or in bfloat16 (its accumulator starts at +0.0 there): no backend can
        follow that, and PyTorch does not promise either (fuzz seed 1100 p675:
        ``F.linear(x[..., None], w)``). Values, NaN and infinities are still compared.
        """
        tainted: set[str] = set()
        for line in self.lines:
            if line.category in ("matmul", "linear", "conv") or line.uses() & tainted:
                tainted.update(line.touched)
        return tainted


def opposite_zeros(*tensors: Any) -> bool:
    """Whether 0.0 and -0.0 meet: at one position of two tensors (after broadcasting),
    or anywhere in one tensor (a reduction may pick either).

    Eager's maximum/minimum of such a pair is not defined: its vectorized loop
    returns one operand and its scalar tail the other (``torch.maximum(zeros(24),
    full((24,), -0.0))``: 16 times -0.0, then 0.0), and a max/min reduction over
    both zeros returns whichever its loop met first, so no backend can match it.
    """
    if not all(isinstance(t, torch.Tensor) and not t.is_complex() for t in tensors):
        return False
    if len(tensors) == 1:
        x = tensors[0].double()
        zeros = x[x == 0]
        return bool(zeros.signbit().any() and not zeros.signbit().all())
    try:
        x, y = torch.broadcast_tensors(*(t.double() for t in tensors))
    except RuntimeError:
        return False
    return bool(((x == 0) & (y == 0) & (x.signbit() != y.signbit())).any())


def has_undefined_tie(program: Program) -> bool:
    """Whether a maximum/minimum or max/min reduction in ``program`` meets opposite zeros
    when run on the CPU."""
    env: dict[str, Any] = {"DEV": "cpu"}
    for line in program.lines:
        if line.tie_operands and opposite_zeros(*(env.get(n) for n in line.tie_operands)):
            return True
        try:
            run_line(line.source(), env)
        except Exception:
            pass  # the program's own error: compared elsewhere
    return False


#: Namespace every line runs in (besides the variables).
GLOBALS: dict[str, Any] = {
    "torch": torch,
    "F": torch.nn.functional,
    "nan": float("nan"),
    "inf": float("inf"),
}

_code_cache: dict[str, Any] = {}


def run_line(src: str, env: dict[str, Any]) -> None:
    """Execute one statement in ``env`` (compiled once per distinct source)."""
    code = _code_cache.get(src)
    if code is None:
        if len(_code_cache) > 50_000:
            _code_cache.clear()
        code = _code_cache[src] = compile(src, "<fuzz>", "exec")
    exec(code, GLOBALS, env)


class Generator:
    """Grows one program line by line, choosing operands that fit the CPU values so far."""

    def __init__(self, rng: random.Random, categories: set[str], error_rate: float = 0.15) -> None:
        self.rng = rng
        self.categories = categories
        self.error_rate = error_rate
        self.env: dict[str, Any] = {"DEV": "cpu"}
        self.names: list[str] = []
        self.lines: list[Line] = []
        self._next = 0

    # -- helpers for op templates ------------------------------------------------------
    def fresh(self) -> str:
        self._next += 1
        return f"v{self._next - 1}"

    def t(self, name: str) -> torch.Tensor:
        return self.env[name]

    def var(self, pred: Any = None) -> str | None:
        """A random existing tensor variable satisfying ``pred(tensor)``."""
        names = [n for n in self.names if isinstance(self.env.get(n), torch.Tensor)]
        if pred is not None:
            names = [n for n in names if pred(self.env[n])]
        return self.rng.choice(names) if names else None

    def nan_ok(self) -> bool:
        """May NaN-sensitive ops (clamp, max, sort ...) get NaN operands?"""
        return "nan" in self.categories

    def scalar(self) -> Any:
        base = values.SCALARS if "collide" in self.categories else values.SCALARS_NO_COLLISIONS
        pool = base + (values.SPECIAL_SCALARS if "special" in self.categories else [])
        pool = pool + (values.INEXACT_SCALARS if "inexact" in self.categories else [])
        pool = pool + (values.SUBNORMAL_SCALARS if "subnormal" in self.categories else [])
        return self.rng.choice(pool)

    def ints(self, pool: list[Any]) -> Any:
        """A choice from ``pool``; with ``collide`` off, never -2 (``hash(-2) == hash(-1)``)."""
        if "collide" not in self.categories:
            pool = [v for v in pool if v != -2 or isinstance(v, bool)] or pool
        return self.rng.choice(pool)

    def dim(self, t: torch.Tensor, allow_bad: bool = True) -> int:
        """A dim of ``t``, negative or positive; sometimes one out of range (an error to match)."""
        n = max(t.dim(), 1)
        if allow_bad and self.rng.random() < 0.04:
            return self.ints([n, -n - 1])
        return self.ints([d for d in range(-n, n)])

    # -- growing the program --------------------------------------------------------------
    def add_input(self) -> None:
        from .ops import input_line

        line = input_line(self)
        self._try(line, keep_errors=False)

    def add_op(self, templates: list[tuple[str, Any]]) -> bool:
        """Try one random template; True if a line was added."""
        category, fn = self.rng.choice(templates)
        line = fn(self)
        if line is None:
            return False
        if line.category not in self.categories:
            return False
        return self._try(line, keep_errors=True)

    def _try(self, line: Line, keep_errors: bool) -> bool:
        # Snapshot the names a failing line may have bound (tuple unpacking binds nothing on error).
        before = dict(self.env)
        try:
            run_line(line.source(), self.env)
        except Exception:
            self.env.clear()
            self.env.update(before)
            own_switch = line.category in ("inplace_cast", "data_error")
            if not keep_errors or not (own_switch or "errors" in self.categories):
                return False
            if self.rng.random() >= self.error_rate:
                return False
        for name in line.touched:
            if name not in self.names:
                self.names.append(name)
        self.lines.append(line)
        return True
