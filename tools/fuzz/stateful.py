"""Multi-step stateful fuzz programs: state updated in place over several steps, against eager.

Why this exists: the single-graph programs of driver.py never keep a tensor
alive across ``mark_step()`` and update it again, yet that is what every
training loop does and where the executor's buffer donation acts (an updated
state tensor's old buffer becomes the new value's output). Two bugs lived
there: on iree-vulkan a donated state buffer was written in place while
another op of the same graph still read its old value (the moments of an AdamW
step), and an integer state buffer (BatchNorm's ``num_batches_tracked``) made
every donating compile fail. ``python -m tools.fuzz --stateful`` fuzzes that:

- state: float32 parameters, zero-initialised moment buffers, sometimes a
  float64 buffer, an integer counter, a bool mask, a 0-d float (AdamW's step),
  created on the device directly or copied there with ``.to(DEV)``;
- a step body run K times (2..5) on fresh inputs every step (literal tensors,
  the same on both sides). The shapes mostly stay, so from step 2 on the
  compiled graph is reused and the state buffers are donated; sometimes a batch
  dimension changes from step to step;
- the body mixes ops.py's templates over exact values (inputs, integer and bool
  state, what they computed), smooth reads of float state (old values kept in
  temporaries past the update), and in-place updates: ``mul_``, ``add_(x,
  alpha=a)``, ``addcmul_``, ``addcdiv_`` by a positive denominator, ``lerp_``,
  ``copy_``, ``clamp_``, ``masked_fill_``, ``zero_``, updates through views, a
  counter ``+= 1``, ``.item()`` of a 0-d state feeding a step size;
- after each step a ``mark_step()`` (sometimes none: two steps in one graph),
  sometimes a comparison of every variable with eager's there (a read in the
  middle changes which graphs compile), and always one at the end, by
  check.py's rules.

Float state is never an operand of a discontinuous op (a comparison, a floor,
a cast to an integer): a backend's value within tolerance of eager's could
then rightly land on the other side of a step, and each later step carries
the difference on. Integer and bool state are updated from exact values only
(inputs, other integer/bool state, comparisons of inputs).
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

import lazy_core

from . import ops, values
from .check import Trace, compare_env
from .program import _VAR, GLOBALS, Generator, Line, Program, opposite_zeros, run_line

if TYPE_CHECKING:
    from .driver import Config, Failure, Report

#: op categories of ops.py the body's computations may draw from (the in-place ones would
#: write state with discontinuous ops, and error lines are not kept in stateful programs).
_NOT_IN_BODY = {"inplace", "view_inplace", "strided", "inplace_cast", "data_error", "errors"}


@dataclass
class Input:
    """A per-step input: one source expression (on ``DEV``) per step."""

    name: str
    sources: list[str]

    def line(self, step: int) -> Line:
        return Line(f"{self.name} = {self.sources[step]}", (), (self.name,), "input")


@dataclass
class StatefulProgram:
    """State lines, per-step inputs, and the step body run once per step."""

    label: str
    state: list[Line]
    inputs: list[Input]
    body: list[Line]
    #: ``mark_step()`` after step k on the lazy device.
    marks: list[bool]
    #: Compare every variable after step k (the last step is always compared).
    checks: list[bool]
    #: ``mark_step()`` right after the state is created (a model moved to the device first).
    init_mark: bool = False

    @property
    def steps(self) -> int:
        return len(self.marks)

    def state_names(self) -> list[str]:
        return [name for line in self.state for name in line.touched]

    def step_lines(self, step: int) -> list[Line]:
        return [i.line(step) for i in self.inputs] + self.body

    def checked(self) -> list[int]:
        return [k for k in range(self.steps) if self.checks[k] or k == self.steps - 1]

    def analysis(self, steps: int) -> Program:
        """The lines run up to ``steps`` steps as one Program, for check.py's per-variable
        rules (zeros of a matrix product, float64 of float32 values): a body line may use a
        state that a later line of the step before updated, so the body is repeated."""
        lines = list(self.state)
        for k in range(steps):
            lines += self.step_lines(k)
        return Program(lines, self.label)


# -- running ------------------------------------------------------------------------------------
@dataclass
class EagerRun:
    """Eager's variables (cloned) after each compared step, or the first problem of the program."""

    points: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: (body line index or None, why): the program is not a valid stateful program as it stands.
    problem: tuple[int | None, str] | None = None


_INT_CAST = re.compile(r"\.(long|int|short)\(\)|torch\.u?int\d+|\.type_as\(")


def _undefined(line: Line, env: dict[str, Any], categories: set[str]) -> str | None:
    """Why eager leaves ``line``'s result undefined on these values (checked at every step:
    the templates checked their operands at step 0 only), or None."""
    if line.tie_operands and opposite_zeros(*(env.get(n) for n in line.tie_operands)):
        return "0.0 meets -0.0 in a maximum/minimum"
    operands = [env[n] for n in line.uses() if isinstance(env.get(n), torch.Tensor)]
    floats = [t for t in operands if t.is_floating_point()]
    if _INT_CAST.search(line.source()) and any(ops._undefined_as_integer(t, torch.int32) for t in floats):
        return "a float outside the integers' range converted to an integer"
    if line.category == "minmax" and "nan" not in categories and any(bool(t.isnan().any()) for t in floats):
        return "a NaN operand of a NaN-sensitive op with category 'nan' off"
    return None


def _snapshot(env: dict[str, Any]) -> dict[str, Any]:
    return {n: v.clone() if isinstance(v, torch.Tensor) else v for n, v in env.items()}


def run_eager(program: StatefulProgram, categories: set[str] | None = None) -> EagerRun:
    """Run ``program`` on eager CPU; its snapshots, or the first line that raised or is undefined."""
    categories = set(ops.CATEGORIES) if categories is None else categories
    run, env = EagerRun(), {"DEV": "cpu"}
    for line in program.state:
        try:
            run_line(line.source(), env)
        except Exception as e:
            run.problem = (None, f"state `{line.source()}` raised {type(e).__name__}: {e}")
            return run
    checked = program.checked()
    for k in range(program.steps):
        lines = [(None, i.line(k)) for i in program.inputs] + list(enumerate(program.body))
        for index, line in lines:
            why = _undefined(line, env, categories) if index is not None else None
            if why is None:
                try:
                    run_line(line.source(), env)
                except Exception as e:
                    why = f"raised {type(e).__name__}: {e}"
            if why is not None:
                run.problem = (index, f"step {k} `{line.source()}`: {why}")
                return run
        if k in checked:
            run.points[k] = _snapshot(env)
    return run


def _lazy_error(where: str, e: BaseException) -> str:
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
    return f"{where}: lazy raised {type(e).__name__}({first!r}), eager did not"


def check_lazy(program: StatefulProgram, expected: EagerRun) -> str | None:
    """Run ``program`` on the lazy device; the first difference from ``expected``, or None."""
    env: dict[str, Any] = {"DEV": "lazy"}
    for line in program.state:
        try:
            run_line(line.source(), env)
        except Exception as e:
            return _lazy_error(f"state `{line.source()}`", e)
    try:
        if program.init_mark:
            lazy_core.mark_step()
        for k in range(program.steps):
            diff = _lazy_step(program, k, env, expected)
            if diff is not None:
                return diff
    finally:
        env.clear()  # its pending values must not join the next program's graph
    return None


def _lazy_step(program: StatefulProgram, k: int, env: dict[str, Any], expected: EagerRun) -> str | None:
    for line in program.step_lines(k):
        try:
            run_line(line.source(), env)
        except Exception as e:
            return _lazy_error(f"step {k} `{line.source()}`", e)
    if program.marks[k]:
        try:
            lazy_core.mark_step()
        except Exception as e:
            return f"step {k}: mark_step() raised {type(e).__name__}: {e}"
    if k not in expected.points:
        return None
    diff = compare_env(Trace(env=expected.points[k]), Trace(env=env), program.analysis(k + 1))
    if diff is None:
        return None
    marked = "after its mark_step()" if program.marks[k] else "without a mark_step()"
    return f"after step {k} of {program.steps} ({marked}): {diff}"


def check_program(program: StatefulProgram, categories: set[str] | None = None) -> str | None:
    """Eager, then the lazy device: the first mismatch, or None (also for an invalid program)."""
    expected = run_eager(program, categories)
    if expected.problem is not None:
        return None
    return check_lazy(program, expected)


# -- generating ---------------------------------------------------------------------------------
class _StepGenerator(Generator):
    """program.Generator that lets ops.py's templates read only the exact variables."""

    def __init__(self, rng: random.Random, categories: set[str]) -> None:
        super().__init__(rng, categories, error_rate=0.0)
        #: Readable by ops.py's templates: inputs, integer/bool state and what they computed.
        self.exact: set[str] = set()
        #: Values integer/bool state may take: inputs, integer/bool state, comparisons of inputs.
        self.pure: set[str] = set()
        self.float_state: list[str] = []
        self.discrete_state: list[str] = []
        self.zero_d: list[str] = []
        #: Python numbers read from 0-d state with ``.item()``.
        self.items: list[str] = []
        self.only_exact = False

    def var(self, pred: Any = None) -> str | None:
        names = [n for n in self.names if isinstance(self.env.get(n), torch.Tensor)
                 and (not self.only_exact or n in self.exact)]
        if pred is not None:
            names = [n for n in names if pred(self.env[n])]
        return self.rng.choice(names) if names else None

    def add(self, *lines: Line) -> bool:
        """Add ``lines`` in order while each runs on the CPU; True if all did."""
        return all(self._try(line, keep_errors=False) for line in lines)


def _fits(shape: torch.Size) -> Callable[[torch.Tensor], bool]:
    """A tensor that broadcasts to exactly ``shape`` (an in-place operand)."""
    def ok(t: torch.Tensor) -> bool:
        try:
            return torch.broadcast_shapes(t.shape, shape) == shape
        except RuntimeError:
            return False

    return ok


_SHAPES = [(3,), (4,), (2, 3), (3, 4), (3, 3), (2, 3, 4), (4, 2)]
#: 1.0 and 0.0 are a weight decay of 0 (``p.mul_(1 - lr * 0)``): updates a compiler folds away.
_RATES = [0.9, 0.99, 0.5, 0.1, 0.999, 1.0]
_STEPS = [0.1, 0.01, -0.5, 1.0, 2.0, 1e-3, 0.0]
_EPS = [1e-3, 0.1, 1.0]


def _literal(g: _StepGenerator, shape: tuple[int, ...], dtype: torch.dtype, specials: bool = False) -> str:
    return values.input_source(g.rng, shape, dtype, specials)


def _add_state(g: _StepGenerator, src: str, kind: list[str]) -> str:
    name = g.fresh()
    if g.rng.random() < 0.4:  # made on the CPU and copied over, as model.to(device)
        src = src.replace(", device=DEV)", ").to(DEV)")
    g.add(Line(f"{name} = {src}", (), (name,), "state"))
    kind.append(name)
    return name


def _make_state(g: _StepGenerator) -> list[tuple[int, ...]]:
    """Parameters with zero-initialised moments, and sometimes a counter, a mask, a 0-d step."""
    shapes = []
    for _ in range(g.rng.randint(1, 3)):
        shape = g.rng.choice(_SHAPES)
        shapes.append(shape)
        _add_state(g, _literal(g, shape, torch.float32), g.float_state)
        for _ in range(g.rng.choice([0, 1, 1, 2])):
            init = g.rng.choice(["torch.zeros({0}, device=DEV)", "torch.zeros_like({1})"])
            _add_state(g, init.format(shape, g.float_state[-1]), g.float_state)
    if g.rng.random() < 0.15:
        shape = g.rng.choice(shapes)
        _add_state(g, _literal(g, shape, torch.float64), g.float_state)
    if g.rng.random() < 0.5:
        dtype = g.rng.choice([torch.int64, torch.int64, torch.int32])
        shape = g.rng.choice([(), (), (1,)])
        counter = _add_state(g, f"torch.zeros({shape}, dtype={dtype}, device=DEV)", g.discrete_state)
        if not shape:
            g.zero_d.append(counter)
    if g.rng.random() < 0.35:
        _add_state(g, _literal(g, g.rng.choice(shapes), torch.bool), g.discrete_state)
    if g.rng.random() < 0.4:
        g.zero_d.append(_add_state(g, f"torch.tensor({g.rng.choice([0.0, 1.0])}, device=DEV)", g.float_state))
    g.exact.update(g.discrete_state)
    g.pure.update(g.discrete_state)
    return shapes


def _make_inputs(g: _StepGenerator, shapes: list[tuple[int, ...]], steps: int,
                 specials: bool) -> list[Input]:
    """A gradient-like input per parameter, a few others, sometimes a batch whose size varies."""
    specs: list[tuple[tuple[int, ...] | None, torch.dtype]] = []
    specs += [(s, torch.float32) for s in shapes if g.rng.random() < 0.8]
    specs += [(g.rng.choice(values.SHAPES), g.rng.choice(values.DTYPES)) for _ in range(g.rng.randint(0, 2))]
    inputs = [Input(g.fresh(), [_literal(g, s, dt, specials) for _ in range(steps)]) for s, dt in specs]
    wide = [s for s in shapes if len(s) == 2]
    if wide and g.rng.random() < 0.5:  # F.linear(x, w) of a weight, the batch size maybe varying
        cols, vary = g.rng.choice(wide)[1], g.rng.random() < 0.4
        sizes = [g.rng.randint(1, 4) for _ in range(steps)] if vary else [g.rng.randint(1, 4)] * steps
        inputs.append(Input(g.fresh(), [_literal(g, (b, cols), torch.float32, specials) for b in sizes]))
    for i in inputs:
        g.add(i.line(0))
    names = [i.name for i in inputs]
    g.exact.update(names)
    g.pure.update(names)
    return inputs


# -- body templates -------------------------------------------------------------------------------
def _compute(g: _StepGenerator, table: list[tuple[str, ops.Template]]) -> list[Line] | None:
    """One ops.py template over the exact values (its result stays exact)."""
    g.only_exact = True
    try:
        _, fn = g.rng.choice(table)
        line = fn(g)
    finally:
        g.only_exact = False
    if line is None or line.category not in g.categories:
        return None
    g.exact.update(line.touched)
    return [line]


def _float_var(g: _StepGenerator, pred: Any = None, state_first: float = 0.6) -> str | None:
    """A float tensor: a float state (often), else any float value."""
    def ok(t: torch.Tensor) -> bool:
        return t.is_floating_point() and (pred is None or pred(t))

    if g.rng.random() < state_first:
        names = [n for n in g.float_state if ok(g.t(n))]
        if names:
            return g.rng.choice(names)
    return g.var(ok)


def _read(g: _StepGenerator) -> list[Line] | None:
    """A smooth function of float state into a temporary (read before or after its update)."""
    a = _float_var(g)
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    forms = _read_forms(g, a, t, out)
    template, consts = g.rng.choice(forms)
    # A product's zeros have the sign eager's BLAS gives them (Program.zero_sign_unspecified).
    return [Line(template, consts, (out,), "linear" if "F.linear" in template else "state_read")]


def _read_forms(g: _StepGenerator, a: str, t: torch.Tensor, out: str) -> list[tuple[str, tuple]]:
    forms: list[tuple[str, tuple]] = [
        (f"{out} = {a} * {{0}}", (g.rng.choice(_RATES + _STEPS),)),
        (f"{out} = {a}.{g.rng.choice(['tanh', 'sigmoid', 'square', 'neg', 'relu', 'sin'])}()", ()),
        (f"{out} = {a}.abs().sqrt()", ()),
        (f"{out} = {a}.clamp({{0}}, {{1}})", (-1.0, g.rng.choice([0.5, 1.0, 2.0]))),
        (f"{out} = {a}.clone()", ()),
        (f"{out} = {a}.{g.rng.choice(['sum', 'mean', 'norm'])}()", ()),
    ]
    b = g.var(lambda x: ops._broadcasts(t)(x) and x.dtype != torch.bool)
    if b is not None:
        forms += [(f"{out} = {a} {g.rng.choice(['+', '-', '*'])} {b}", ()),
                  (f"{out} = {a} / ({b}.abs() + {{0}})", (g.rng.choice(_EPS),))]
        if g.t(b).is_floating_point():
            forms.append((f"{out} = torch.lerp({a}, {b}.to({a}.dtype), {{0}})", (g.rng.choice([0.1, 0.5, 0.9]),)))
    if t.dim() >= 1:
        d = g.dim(t, allow_bad=False)
        forms += [(f"{out} = {a}.{g.rng.choice(['sum', 'mean', 'logsumexp'])}({{0}})", (d,)),
                  (f"{out} = torch.softmax({a}, {{0}})", (d,)),
                  (f"{out} = {a}{g.rng.choice(['.view(-1)', '[0]', '[-1]', '.unsqueeze(0)'])}", ())]
    if t.dim() == 2:
        forms.append((f"{out} = {a}.t()", ()))
        x = g.var(lambda x: x.is_floating_point() and x.dim() >= 1 and x.shape[-1] == t.shape[1]
                  and x.dtype == t.dtype)
        if x is not None:
            forms.append((f"{out} = F.linear({x}, {a})", ()))
    if t.dim() == 0:
        forms += [(f"{out} = {a}.item()", ())] * 3
    mask = _mask(g, t.shape)
    if mask is not None:
        forms.append((f"{out} = torch.where({mask}, {a}, {{0}})", (g.rng.choice([0.0, -1.0, 2.0]),)))
    return forms


def _scalar_of(g: _StepGenerator) -> tuple[str, tuple]:
    """A step size: a constant, or one scaled by a number read with ``.item()`` (AdamW's step)."""
    lr = g.rng.choice(_STEPS)
    counts = [n for n in g.items if isinstance(g.env.get(n), int)]
    if counts and g.rng.random() < 0.4:  # a bias correction: a pole at 0, so of exact counts only
        return f"-{{0}} / (1 - {{1}} ** {g.rng.choice(counts)})", (abs(lr), g.rng.choice(_RATES))
    if g.items and g.rng.random() < 0.4:
        return f"{{0}} * {g.rng.choice(g.items)}", (lr,)
    return "{0}", (lr,)


def _pure(g: _StepGenerator, pred: Callable[[torch.Tensor], bool]) -> str | None:
    """One of the values integer and bool state may take (see ``_StepGenerator.pure``)."""
    names = [n for n in g.names if n in g.pure and isinstance(g.env.get(n), torch.Tensor) and pred(g.env[n])]
    return g.rng.choice(names) if names else None


def _source(g: _StepGenerator, shape: torch.Size, exact_only: bool = False,
            state_first: float = 0.25, same: bool = False) -> str | None:
    """An operand that broadcasts to ``shape`` (``same``: has it): another state (maybe already
    updated this step), a temporary (maybe an old value of a state), an input; ``exact_only``:
    an integer or bool one of ``_pure``."""
    fit = _fits(shape) if not same else (lambda t: t.shape == shape)
    if exact_only:
        return _pure(g, lambda t: fit(t) and not t.is_floating_point())
    return _float_var(g, fit, state_first)


def _view(g: _StepGenerator, target: str) -> str:
    """``target`` or a view of it to update through."""
    t = g.t(target)
    if t.dim() == 0 or g.rng.random() < 0.65:
        return target
    views = ["[0]", "[-1]", ".view(-1)[::2]", "[..., 1:]", ".unsqueeze(0)", ".narrow(0, 0, 1)"]
    if t.dim() == 2:
        views += [".t()", ".diagonal()", "[:, 0]"]
    return target + g.rng.choice(views)


def _update(g: _StepGenerator, target: str | None = None) -> list[Line] | None:
    """An in-place update of ``target`` or a random state (through a view sometimes)."""
    state = g.float_state + g.discrete_state
    if not state:
        return None
    target = target or g.rng.choice(state)
    dst = _view(g, target)
    try:
        shape = eval(dst, dict(GLOBALS), g.env).shape
    except Exception:
        return None
    t = g.t(target)
    if t.is_floating_point():
        form = _float_update(g, dst, shape)
    elif t.dtype == torch.bool:
        form = _bool_update(g, dst, shape)
    else:
        form = _int_update(g, dst, shape)
    if form is None:
        return None
    template, consts = form
    written = eval(dst, dict(GLOBALS), g.env)
    read = template[len(dst):]  # the destination itself is read and written element by element
    operands = [g.t(n) for n in _VAR.findall(read) if isinstance(g.env.get(n), torch.Tensor)]
    if any(ops._reads_what_it_writes(written, o) for o in operands):
        return None  # eager's loop order decides the values (ops._reads_what_it_writes)
    return [Line(template, consts, (target,), "state_update")]


def _float_update(g: _StepGenerator, dst: str, shape: torch.Size) -> tuple[str, tuple] | None:
    src, src2 = _source(g, shape), _source(g, shape)
    # addcmul/addcdiv operands of dst's shape (an optimizer's) or broadcasting to it (a product
    # smaller than dst: lowering/addc.py, which torch-mlir's decomposition mistyped)
    full = (src, src2) if g.rng.random() < 0.5 else (_source(g, shape, same=True), _source(g, shape, same=True))
    rate = g.rng.choice(_RATES)
    step, step_consts = _scalar_of(g)
    shifted = re.sub(r"\{(\d)\}", lambda m: "{" + str(int(m.group(1)) + 1) + "}", step)
    forms: list[tuple[str, tuple]] = [
        (f"{dst}.mul_({{0}})", (rate,)),
        (f"{dst}.add_({{0}})", (g.rng.choice(_STEPS),)),
        # Identities IREE folds to the state itself (a buffer donated to its own unchanged value).
        (f"{dst}.{g.rng.choice(['div_', 'mul_'])}({{0}})", (g.rng.choice([1, 1.0, 2.0]),)),
        (f"{dst}.{g.rng.choice(['sub_', 'add_'])}({{0}})", (g.rng.choice([0, 0.0, -0.0]),)),
        (f"{dst}.clamp_({{0}}, {{1}})", (-g.rng.choice([0.5, 1.0, 3.0]), g.rng.choice([0.5, 1.0, 3.0]))),
        (f"{dst}.{g.rng.choice(['clamp_min_', 'clamp_max_'])}({{0}})", (g.rng.choice([-1.0, 0.0, 0.5]),)),
        (f"{dst}.zero_()", ()),
        (f"{dst}.fill_({{0}})", (g.rng.choice([0.0, 1.0, -0.5]),)),
        (f"{dst}.{g.rng.choice(['neg_', 'tanh_', 'sigmoid_'])}()", ()),
    ]
    if src is not None:
        forms += [
            (f"{dst}.add_({src}, alpha={step})", step_consts),
            (f"{dst}.sub_({src})", ()),
            (f"{dst}.mul_({src})", ()),
            (f"{dst}.copy_({src})", ()),
            (f"{dst}.lerp_({src}.to({dst}.dtype), {{0}})", (g.rng.choice([0.1, 0.5, 0.9]),)),
            (f"{dst}.mul_({{0}}).add_({src}, alpha={{1}})", (rate, round(1 - rate, 6))),
        ] * 2
    src, src2 = full
    if src is not None:
        forms += [(f"{dst}.mul_({{0}}).addcmul_({src}, {src}, value={{1}})", (rate, round(1 - rate, 6)))] * 2
    if src is not None and src2 is not None:
        denominator = g.rng.choice([f"{src2}.abs().sqrt().add({{0}})", f"{src2}.clamp_min(0).sqrt().add({{0}})",
                                    f"({src2} * {src2}).add({{0}})"])
        forms += [
            (f"{dst}.addcmul_({src}, {src2}, value={{0}})", (g.rng.choice(_STEPS),)),
            (f"{dst}.addcdiv_({src}, {denominator}, value={shifted})", (g.rng.choice(_EPS), *step_consts)),
        ] * 2
    mask = _mask(g, shape)
    if mask is not None:
        forms += [(f"{dst}.masked_fill_({mask}, {{0}})", (g.rng.choice([0.0, 1.0, -2.0]),))] * 3
    return g.rng.choice(forms)


def _mask(g: _StepGenerator, shape: torch.Size) -> str | None:
    """A bool of exact values that broadcasts to ``shape``: a bool input or state, or a
    comparison of an integer/bool state or an input (never of float state)."""
    fit = _fits(shape)
    x = _pure(g, lambda t: fit(t))
    if x is None:
        return None
    if g.t(x).dtype == torch.bool and g.rng.random() < 0.6:
        return x
    return f"({x} {g.rng.choice(['>', '<=', '!='])} {values.render(g.rng.choice([0, 1, 0.5, -1]))})"


def _bool_update(g: _StepGenerator, dst: str, shape: torch.Size) -> tuple[str, tuple] | None:
    src = _source(g, shape, exact_only=True)
    forms: list[tuple[str, tuple]] = [(f"{dst}.logical_not_()", ()), (f"{dst}.fill_({{0}})", (g.rng.random() < 0.5,))]
    if src is not None:
        forms += [(f"{dst}.copy_({src} > {{0}})", (g.rng.choice([0, 1, -1]),)),
                  (f"{dst}.{g.rng.choice(['logical_and_', 'logical_or_', 'logical_xor_'])}({src})", ())]
        if g.t(src).dtype == torch.bool:
            forms += [(f"{dst} {g.rng.choice(['|=', '&=', '^='])} {src}", ()), (f"{dst}.copy_({src})", ())]
    return g.rng.choice(forms)


def _int_update(g: _StepGenerator, dst: str, shape: torch.Size) -> tuple[str, tuple] | None:
    src = _source(g, shape, exact_only=True)
    forms: list[tuple[str, tuple]] = [(f"{dst} += 1", ()), (f"{dst}.add_(1)", ()), (f"{dst}.sub_({{0}})", (2,)),
                                      (f"{dst}.mul_(2)", ()), (f"{dst}.zero_()", ()),
                                      (f"{dst}.clamp_(max={{0}})", (g.rng.choice([2, 3]),))]
    if src is not None:
        forms += [(f"{dst}.add_({src})", ()), (f"{dst}.copy_({src})", ())]
    mask = _mask(g, shape)
    if mask is not None:
        forms.append((f"{dst}.masked_fill_({mask}, {{0}})", (g.rng.choice([0, 5]),)))
    return g.rng.choice(forms)


def _count(g: _StepGenerator) -> list[Line] | None:
    """A counter ``+= 1`` (BatchNorm's num_batches_tracked, AdamW's step), often read with item()."""
    counters = [n for n in g.zero_d if not g.t(n).dtype == torch.bool]
    if not counters:
        return None
    c = g.rng.choice(counters)
    lines = [Line(f"{c} += 1", (), (c,), "state_update")]
    if g.rng.random() < 0.6:
        item = g.fresh()
        lines.append(Line(f"{item} = {c}.item()", (), (item,), "state_read"))
    return lines


def _compare_input(g: _StepGenerator) -> list[Line] | None:
    """A bool of an input (a mask for ``masked_fill_``, a value for bool state)."""
    x = _pure(g, lambda t: t.dtype != torch.bool)
    if x is None:
        return None
    out = g.fresh()
    g.pure.add(out)
    g.exact.add(out)
    return [Line(f"{out} = {x} {g.rng.choice(['>', '<=', '!='])} {{0}}", (g.rng.choice([0, 0.5, -1]),), (out,),
                 "state_read")]


def _add_body_line(g: _StepGenerator, table: list[tuple[str, ops.Template]]) -> bool:
    r = g.rng.random()
    if r < 0.3 and table:
        lines = _compute(g, table)
    elif r < 0.5:
        lines = _read(g)
    elif r < 0.58:
        lines = _count(g)
    elif r < 0.65:
        lines = _compare_input(g)
    else:
        lines = _update(g)
    if not lines:
        return False
    ok = g.add(*lines)
    g.items += [n for ln in lines for n in ln.touched if isinstance(g.env.get(n), int | float)]
    return ok


def _make_body(g: _StepGenerator, table: list[tuple[str, ops.Template]]) -> None:
    want, tries, added = g.rng.randint(4, 14), 0, 0
    while added < want and tries < want * 8:
        tries += 1
        added += _add_body_line(g, table)
    for name in g.float_state + g.discrete_state:  # most state changes every step
        if not any(name in ln.touched for ln in g.lines if ln.category == "state_update") and g.rng.random() < 0.7:
            for _ in range(4):
                lines = _update(g, name)
                if lines and g.add(*lines):
                    break


def generate_stateful(rng: random.Random, categories: set[str], label: str) -> StatefulProgram:
    """A random stateful program, valid on eager for every step (lines that raise or are
    undefined at some step are dropped)."""
    g = _StepGenerator(rng, categories - _NOT_IN_BODY)
    steps = rng.randint(2, 5)
    shapes = _make_state(g)
    specials = "special" in categories and rng.random() < 0.1
    inputs = _make_inputs(g, shapes, steps, specials)
    n_state = len(g.lines) - len(inputs)
    table = ops.templates(g.categories)
    _make_body(g, table)
    marks = [rng.random() < 0.75 for _ in range(steps)]
    checks = [rng.random() < 0.3 for _ in range(steps)]
    program = StatefulProgram(label, g.lines[:n_state], inputs, g.lines[n_state + len(inputs):], marks, checks,
                              init_mark=rng.random() < 0.4)
    return make_valid(program, categories)


def make_valid(program: StatefulProgram, categories: set[str]) -> StatefulProgram:
    """``program`` without the body lines (and what depends on them) that raise or are
    undefined at some step on eager."""
    for _ in range(len(program.body) + 1):
        problem = run_eager(program, categories).problem
        if problem is None:
            return program
        index, why = problem
        if index is None:
            raise AssertionError(f"{program.label}: {why}")  # a state or input line: a generator bug
        program = drop_body_line(program, index)
    raise AssertionError(f"{program.label}: still invalid after dropping every line")


# -- shrinking -------------------------------------------------------------------------------------
def _prefix(program: StatefulProgram) -> list[Line]:
    return [*program.state, *(i.line(0) for i in program.inputs)]


def drop_body_line(program: StatefulProgram, index: int) -> StatefulProgram:
    """Without body line ``index`` and the later lines that use a name only it defined."""
    from .shrink import _drop

    prefix = _prefix(program)
    lines = _drop(prefix + program.body, len(prefix) + index)
    return replace(program, body=lines[len(prefix):])


def _drop_names(program: StatefulProgram, gone: set[str]) -> StatefulProgram:
    """Without the state or inputs ``gone`` and every line that uses them (transitively)."""
    state, body = [], []
    for line in program.state:
        if (line.uses() | set(line.touched)) & gone:
            gone = gone | set(line.touched)
            continue
        state.append(line)
    for line in program.body:
        if line.uses() & gone:
            gone = gone | set(line.touched)
            continue
        body.append(line)
    inputs = [i for i in program.inputs if i.name not in gone]
    return replace(program, state=state, inputs=inputs, body=body)


def _keep_steps(program: StatefulProgram, keep: list[int]) -> StatefulProgram:
    checks = [program.checks[k] for k in keep]
    return replace(program, inputs=[Input(i.name, [i.sources[k] for k in keep]) for i in program.inputs],
                   marks=[program.marks[k] for k in keep], checks=checks)


def _trials(program: StatefulProgram) -> list[StatefulProgram]:
    """Smaller or simpler variants, the largest cuts first."""
    names = [i.name for i in program.inputs] + program.state_names()
    out = [_drop_names(program, {n}) for n in names]
    out += [_keep_steps(program, list(range(n))) for n in range(1, program.steps)]
    out += [drop_body_line(program, i) for i in range(len(program.body) - 1, -1, -1)]
    if program.steps > 1:
        out += [_keep_steps(program, [k for k in range(program.steps) if k != drop])
                for drop in range(program.steps)]
    out += [replace(program, checks=[False] * program.steps), replace(program, init_mark=False),
            replace(program, marks=[True] * program.steps), replace(program, marks=[False] * program.steps)]
    return [t for t in out if _size(t) < _size(program) or _simpler(t, program)]


def _key(p: StatefulProgram) -> str:
    return repr(([ln.source() for ln in p.state], [(i.name, i.sources) for i in p.inputs],
                 [ln.source() for ln in p.body], p.marks, p.checks, p.init_mark))


def _size(p: StatefulProgram) -> int:
    return p.steps * 1000 + len(p.body) * 10 + len(p.state) + len(p.inputs)


def _simpler(a: StatefulProgram, b: StatefulProgram) -> bool:
    """Same size, fewer flags to explain (no reads in the middle, no initial mark_step)."""
    def flags(p: StatefulProgram) -> tuple[int, bool, bool]:
        return sum(p.checks[:-1]), p.init_mark, len(set(p.marks)) > 1

    return _size(a) == _size(b) and flags(a) < flags(b)


Fails = Callable[[StatefulProgram], "str | None"]


def reduce_stateful(program: StatefulProgram, message: str, fails: Fails,
                    max_runs: int = 60) -> tuple[StatefulProgram, str]:
    """Take the first smaller variant that still fails, until none does (or ``max_runs``)."""
    runs, progress, tried = 0, True, set()
    while progress and runs < max_runs:
        progress = False
        for trial in _trials(program):
            if runs >= max_runs:
                break
            if _key(trial) in tried:
                continue
            tried.add(_key(trial))
            runs += 1
            m = fails(trial)
            if m is not None:
                program, message, progress = trial, m, True
                break
    return program, message


def reproduces(backend: str, program: StatefulProgram, categories: set[str]) -> str | None:
    """The mismatch of ``program`` on a fresh backend (None also for a program eager rejects)."""
    from .driver import fresh_backend

    fresh_backend(backend)
    expected = run_eager(program, categories)
    if expected.problem is not None:
        return None
    try:
        return check_lazy(program, expected)
    except Exception as e:  # a crash in the toolkit itself is a finding too
        return f"{type(e).__name__}: {e}"


# -- repro scripts and crash cases -------------------------------------------------------------------
def render_repro(backend: str, program: StatefulProgram, message: str) -> str:
    """A standalone script: the program on eager, then on the lazy device, compared at each check."""
    from .shrink import _HEADER

    first = message.strip().splitlines()[0] if message.strip() else "mismatch"
    out = [_HEADER.format(backend=backend, first=first.replace('"', "'"), message=message.replace('"""', "'''"),
                          host_eval=os.environ.get("LAZY_HOST_EVAL") or "1")]
    if program.inputs:
        out.append(_render_inputs(program))
    out.append(_render_run(program))
    out.append('''

expected = {}
run("cpu", lambda k, vs: expected.__setitem__(k, {n: v.clone() for n, v in vs.items()}))


def compare(k, vs):
    for name, value in vs.items():
        check(f"after step {k}: {name}", expected[k][name], value)


run("lazy", compare)
print("ok: lazy equals eager")
''')
    return "\n".join(out)


def _render_inputs(program: StatefulProgram) -> str:
    names = ", ".join(i.name for i in program.inputs)
    lines = ["\n\ndef inputs(k, DEV):", f'    """{names or "nothing"}: fresh values every step."""']
    for k in range(program.steps):
        row = ", ".join(i.sources[k] for i in program.inputs)
        lines.append(f"    if k == {k}:\n        return ({row}{',' if len(program.inputs) == 1 else ''})")
    return "\n".join(lines)


def _tensor_names(program: StatefulProgram) -> list[str]:
    env = run_eager(program)
    last = env.points.get(program.steps - 1, {})
    return [n for n, v in last.items() if isinstance(v, torch.Tensor)]


def _render_run(program: StatefulProgram) -> str:
    lines = [f"\n\ndef run(DEV, read):  # {program.label}", "    # state"]
    lines += [f"    {ln.source()}" for ln in program.state]
    if program.init_mark:
        lines += ['    if DEV == "lazy":', "        lazy_core.mark_step()"]
    names = ", ".join(i.name for i in program.inputs)
    lines.append(f"    for k in range({program.steps}):")
    if names:
        lines.append(f"        {names}{',' if len(program.inputs) == 1 else ''} = inputs(k, DEV)")
    elif not program.body:
        lines.append("        pass")
    lines += [f"        {ln.source()}" for ln in program.body]
    marked = [k for k in range(program.steps) if program.marks[k]]
    if marked:
        lines += [f'        if DEV == "lazy" and k in {tuple(marked)!r}:', "            lazy_core.mark_step()"]
    shown = "{" + ", ".join(f'"{n}": {n}' for n in _tensor_names(program)) + "}"
    lines += [f"        if k in {tuple(program.checked())!r}:", f"            read(k, {shown})"]
    return "\n".join(lines)


def _line_data(line: Line) -> list[Any]:
    return [line.template, [values.render(c) for c in line.consts], list(line.touched), line.category,
            list(line.tie_operands)]


def _line_of(data: list[Any]) -> Line:
    template, consts, touched, category, ties = data
    return Line(template, tuple(eval(c, dict(GLOBALS)) for c in consts), tuple(touched), category, tuple(ties))


def dump_case(path: str, backend: str, program: StatefulProgram, categories: set[str]) -> None:
    """Write ``program`` where crash.py can replay it in a child process."""
    data = {"kind": "stateful", "backend": backend, "host_eval": os.environ.get("LAZY_HOST_EVAL", ""),
            "categories": sorted(categories), "label": program.label,
            "state": [_line_data(ln) for ln in program.state],
            "inputs": [[i.name, i.sources] for i in program.inputs],
            "body": [_line_data(ln) for ln in program.body],
            "marks": program.marks, "checks": program.checks, "init_mark": program.init_mark}
    with open(path, "w") as f:
        json.dump(data, f)


def load_case(path: str) -> tuple[str, StatefulProgram, set[str]]:
    with open(path) as f:
        data = json.load(f)
    program = StatefulProgram(data["label"], [_line_of(d) for d in data["state"]],
                              [Input(n, s) for n, s in data["inputs"]], [_line_of(d) for d in data["body"]],
                              data["marks"], data["checks"], data["init_mark"])
    return data["backend"], program, set(data["categories"])


def replay(path: str) -> str | None:
    """The mismatch of the case in ``path`` on a fresh backend (crash.py's ``--replay``)."""
    backend, program, categories = load_case(path)
    return reproduces(backend, program, categories)


def shrink_crash(path: str, max_runs: int = 60) -> tuple[str, str]:
    """(message, standalone repro) of the stateful crash case in ``path``, shrunk in child processes."""
    from .crash import died, replay_status

    backend, program, categories = load_case(path)

    def status(trial: StatefulProgram) -> int:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            trial_path = f.name
        try:
            dump_case(trial_path, backend, trial, categories)
            return replay_status(trial_path)
        finally:
            os.unlink(trial_path)

    first = status(program)
    if not died(first):
        msg = f"the case in {path} did not crash when replayed (exit status {first})"
        return msg, render_repro(backend, program, msg)

    def fails(trial: StatefulProgram) -> str | None:
        if run_eager(trial, categories).problem is not None:
            return None
        st = status(trial)
        return f"the process dies (exit status {st})" if died(st) else None

    program, msg = reduce_stateful(program, f"the process dies (exit status {first})", fails, max_runs)
    return msg, render_repro(backend, program, msg)


# -- the fuzz loop -------------------------------------------------------------------------------------
def program_rng(seed: int, index: int) -> random.Random:
    """Program ``index`` of ``seed`` depends on nothing else (a repro is one pair of numbers)."""
    return random.Random(f"stateful {seed} {index}")


def fuzz_stateful(config: Config, report: Report, log: Callable[[str], Any],
                  progress: Callable[[int], Any] = lambda n: None) -> int:
    """Generate and check ``config.programs`` stateful programs on the active backend (driver.fuzz
    set it up); failures go to ``report``. The number of programs run."""
    from .driver import _Watchdog, fresh_backend

    n = 0
    while n < config.programs and len(report.failures) < config.max_failures:
        progress(n)
        label = f"seed {config.seed} stateful program {n}"
        program = generate_stateful(program_rng(config.seed, n), config.categories, label)
        if config.last_path:
            dump_case(config.last_path, config.backend, program, config.categories)
        dog = _Watchdog(config.group_timeout)
        try:
            diff = check_program(program, config.categories)
        except Exception as e:
            diff = f"{type(e).__name__}: {e}"
        finally:
            dog.cancel()
        n += 1
        if diff is None:
            continue
        log(f"[fuzz] {config.backend} seed {config.seed}: MISMATCH in {label}: {diff}")
        from .driver import file_failure

        file_failure(report, _failure(config, program, diff), config, log)
        fresh_backend(config.backend)  # one bug, one report
    return n


def _failure(config: Config, program: StatefulProgram, diff: str) -> Failure:
    """The failure of ``program``, shrunk on fresh backends if it reproduces there."""
    from .driver import Failure

    shrunk, message, reduced = program, diff, False
    if config.shrink:
        alone = reproduces(config.backend, program, config.categories)
        if alone is None:
            message += "\n(does not reproduce on a fresh backend: depends on earlier programs)"
        else:
            shrunk, message = reduce_stateful(program, alone,
                                              lambda p: reproduces(config.backend, p, config.categories))
            reduced = True
    return Failure(message, [], False, render_repro(config.backend, shrunk, message), reduced)


__all__ = ["EagerRun", "Input", "StatefulProgram", "check_lazy", "check_program", "fuzz_stateful",
           "generate_stateful", "reduce_stateful", "render_repro", "run_eager"]
