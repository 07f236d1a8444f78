"""Why did it recompile, and what made it run: answers for the lazy-tensor pain points.

Lazy tensors hide two costs. A graph that changes from step to step is
recompiled every step, and a value read (``.item()``, ``print``) or an op the
backend cannot compile forces the pending graph to run in the middle of a
step. Neither is visible in user code, so this module labels every execution
with its cause and the user's line (``item() at train.py:60``), and on every
cache miss after the first compile at a barrier site (a graph *family*: the
same cause at the same line) compares the new graph with the nearest graph
compiled there before and says what differs::

    recompiling for mark_step at train.py:57 (graph 2 at this site):
      input 0 (from train.py:50) changed shape from [64, 784] to [32, 784]

``LAZY_DEBUG=1`` (or ``lazy_core.debug.explain()``) prints these as they
happen and a summary at exit; ``LAZY_DEBUG=2`` also prints every execution.
The records are always kept (``executions()``, ``recompiles()``), so tests
and tools can read them without turning printing on.

Graph summaries hold names, shapes and constants only, never device data, so
remembering past graphs keeps no buffers alive.
"""

from __future__ import annotations

import atexit
import difflib
import os
import sys
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import metrics, source_location
from .executor import executor
from .graph import LazyGraph
from .ir import Node, Output, ScalarParam
from .registry import active_backend
from .source_location import SourceLocation

__all__ = [
    "Execution", "GraphSummary", "Recompile", "add_execution_listener", "cause_of", "compare",
    "RecompileStormWarning", "executions", "explain", "format_location", "last_execution", "recompiles",
    "relative_site", "reset",
    "summarize", "summary",
]

#: Graphs remembered per barrier site to compare a recompile with.
_FAMILY_MEMORY = 8
#: Differences listed per kind before "and N more".
_MAX_LISTED = 3
#: Above this many (old x new) unmatched ops, ops are not aligned one by one.
_MAX_ALIGN_WORK = 4_000_000

# ---------------------------------------------------------------------------
# Labels: what forced an execution, and where


_CAUSES = {
    "mark_step": "mark_step",
    "item": "item()",
    "print": "print",
    "numpy": ".numpy()",
    "tolist": ".tolist()",
    "save": "torch.save",
    "to cpu": "to cpu",
    "copy to cpu": "copy to cpu",
    "sync": "lazy_core.sync",
    "backend_change": "backend change",
    "graph_limit": "graph-size limit",
    "closure": "async step closure args",
}


def cause_of(reason: str) -> str:
    """The user-facing name of an executor ``reason`` (``"item"`` -> ``"item()"``).

    ``"fallback aten.nonzero.default"`` becomes ``"fallback aten.nonzero"``.
    """
    if reason.startswith("fallback "):
        op = reason[len("fallback "):]
        return "fallback " + (op[: -len(".default")] if op.endswith(".default") else op)
    return _CAUSES.get(reason, reason)


_cwd = os.getcwd()


def format_location(loc: SourceLocation | None) -> str | None:
    """``file:line``, relative to the working directory when the file is under it."""
    if loc is None:
        return None
    name = loc.filename
    if name.startswith(_cwd + os.sep):
        name = name[len(_cwd) + 1:]
    return f"{name}:{loc.line}"


def relative_site(site: str | None) -> str | None:
    """A ``file:line`` string made relative to the working directory (as ``format_location``)."""
    if site and site.startswith(_cwd + os.sep):
        return site[len(_cwd) + 1:]
    return site


def _site(node: Node) -> str | None:
    return format_location(node.location)


# ---------------------------------------------------------------------------
# Graph summaries and their comparison


@dataclass(slots=True)
class GraphSummary:
    """What a graph looked like, without holding any of its data."""

    name: str
    #: Per input in argument order: (kind, shape, dtype, where it came from).
    inputs: list[tuple[str, tuple[int, ...], str, str | None]]
    #: Per op in execution order: (op name, user line).
    ops: list[tuple[str, str | None]]
    #: Per op: ((argument name, signature), ...), signature ("param", type) / ("const", repr) / ...
    consts: list[tuple]
    #: Per op: the shape and dtype of each result.
    shapes: list[tuple]
    #: Per op: where its operands come from (inputs by index, ops by distance).
    wiring: list[tuple]
    #: Per output: (what produces it, shape, dtype).
    outputs: list[tuple[str, tuple[int, ...], str]]


def _dtype(d: Any) -> str:
    return str(d).replace("torch.", "")


def _arg_names(node: Node) -> list[str]:
    schema = getattr(node.op, "_schema", None)
    return [a.name for a in schema.arguments] if schema is not None else []


def _sig(x: Any) -> tuple:
    if isinstance(x, Output):
        if isinstance(x.node, ScalarParam):
            return ("param", type(x.node.value).__name__)
        return ("tensor",)
    if isinstance(x, list | tuple):
        parts = [_sig(v) for v in x]
        if all(p[0] == "const" for p in parts):
            return ("const", _short(repr(list(x))))
        return ("seq", tuple(parts))
    return ("const", _short(repr(x)))


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def summarize(graph: LazyGraph) -> GraphSummary:
    """A comparable description of ``graph`` (names, shapes, constants; no data)."""
    in_index = {id(n): i for i, n in enumerate(graph.inputs)}
    op_index = {id(n): i for i, n in enumerate(graph.nodes)}
    inputs = []
    for n in graph.inputs:
        m = n.metas[0]
        kind = "scalar" if isinstance(n, ScalarParam) else "device_data"
        inputs.append((kind, tuple(m.shape), _dtype(m.dtype), _site(n)))
    ops, consts, shapes, wiring = [], [], [], []
    for j, n in enumerate(graph.nodes):
        ops.append((n.name, _site(n)))
        names = _arg_names(n)
        sig = [(names[i] if i < len(names) else f"#{i}", _sig(a)) for i, a in enumerate(n.args)]
        sig += [(k, _sig(v)) for k, v in n.kwargs.items()]
        consts.append(tuple(sig))
        shapes.append(tuple((tuple(m.shape), _dtype(m.dtype)) if m else None for m in n.metas))
        refs = []
        for o in n.operands:
            if id(o.node) in in_index:
                refs.append(("in", in_index[id(o.node)], o.index))
            else:
                refs.append(("op", j - op_index.get(id(o.node), j), o.index))
        wiring.append(tuple(refs))
    outputs = []
    for o in graph.outputs:
        what = f"{o.node.name} at {_site(o.node)}" if _site(o.node) else o.node.name
        outputs.append((what, tuple(o.meta.shape), _dtype(o.meta.dtype)))
    return GraphSummary(graph.name, inputs, ops, consts, shapes, wiring, outputs)


def _shape(s: tuple[int, ...]) -> str:
    return str(list(s))


def _op_at(op: tuple[str, str | None]) -> str:
    return f"{op[0]} at {op[1]}" if op[1] else op[0]


class _Diff:
    """Differences found so far, by kind, with a count for choosing the nearest graph."""

    def __init__(self) -> None:
        self.inputs: list[str] = []
        self.scalars: list[str] = []
        self.ops: list[str] = []
        self.outputs: list[str] = []
        self.output_producers: list[str] = []
        self.constants: list[str] = []
        #: Changed constants that are not sizes (a bool, a float, a string): causes even when
        #: an input's shape changed too (HF's ``full((batch,), is_done)`` turning True).
        self.value_constants: list[str] = []
        self.shapes: list[str] = []
        self.wiring: list[str] = []
        self.score = 0

    def messages(self, shape_changed: bool) -> list[str]:
        out = self.inputs + self.scalars + self.ops + self.outputs + self.value_constants
        if not shape_changed:
            # Constants and intermediate shapes that follow an input shape are not causes.
            out += self.constants
        # Consequences of the causes above, reported only when nothing else differs.
        for more in (self.output_producers, self.shapes, self.wiring):
            if not out:
                out += more
        return out


def _listed(items: list[str], what: str) -> list[str]:
    """Repeated messages once with a count, at most ``_MAX_LISTED`` of them, then how many more."""
    counts = Counter(items)  # keeps first-seen order
    grouped = [m if n == 1 else f"{m} (x{n})" for m, n in counts.items()]
    if len(grouped) <= _MAX_LISTED:
        return grouped
    rest = sum(list(counts.values())[_MAX_LISTED:])
    return grouped[:_MAX_LISTED] + [f"... and {rest} more {what}"]


def _compare_inputs(old: GraphSummary, new: GraphSummary, d: _Diff) -> bool:
    """Device-data inputs; returns whether a shape or dtype changed."""
    od = [(i, x) for i, x in enumerate(old.inputs) if x[0] == "device_data"]
    nd = [(i, x) for i, x in enumerate(new.inputs) if x[0] == "device_data"]
    found: list[str] = []
    if len(od) == len(nd):
        for (_, a), (j, b) in zip(od, nd):
            where = f" (from {b[3]})" if b[3] else ""
            if a[1] != b[1]:
                found.append(f"input {j}{where} changed shape from {_shape(a[1])} to {_shape(b[1])}")
            elif a[2] != b[2]:
                found.append(f"input {j}{where} changed dtype from {a[2]} to {b[2]}")
    else:
        found.append(f"{len(nd)} device-data inputs instead of {len(od)}")
        sm = difflib.SequenceMatcher(None, [x[1:3] for _, x in od], [x[1:3] for _, x in nd], autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            for j, x in nd[j1:j2] if tag in ("insert", "replace") else []:
                where = f" from {x[3]}" if x[3] else ""
                found.append(f"new input {j}: a {_shape(x[1])} {x[2]} tensor{where}")
            for _, x in od[i1:i2] if tag in ("delete", "replace") else []:
                where = f" from {x[3]}" if x[3] else ""
                found.append(f"input gone: a {_shape(x[1])} {x[2]} tensor{where}")
    d.inputs += _listed(found, "input differences")
    d.score += len(found)
    return any("shape" in f or "dtype" in f for f in found)


def _may_be_a_size(value: str) -> bool:
    """Whether a recorded constant (its repr, ``"[-1, 5]"``) could follow an input's shape:
    an int or a list of ints; an argument left at its default is given the benefit too."""
    if value == "its default":
        return True
    parts = value.strip("[]() ").split(",")
    return all(p.strip().lstrip("-").isdigit() for p in parts if p.strip())


def _compare_consts(old_c: tuple, new_c: tuple, op: tuple[str, str | None], d: _Diff) -> None:
    at = _op_at(op)
    # By name: an argument left at its default is not recorded, so the two
    # lists can differ in length (``sort(x, 0)`` then ``sort(x)``).
    old_by, new_by = dict(old_c), dict(new_c)
    default = ("const", "its default")
    names = list(old_by) + [n for n in new_by if n not in old_by]
    for name, a, b in ((n, old_by.get(n, default), new_by.get(n, default)) for n in names):
        if a == b:
            continue
        if a[0] == "param" and b[0] == "const":
            d.scalars.append(
                f"the scalar '{name}' of {at} became the constant {b[1]}, baked into the graph "
                "(it was a graph parameter; 0, 1 and bools are lifted only as a fill's value)"
            )
        elif a[0] == "const" and b[0] == "param":
            d.scalars.append(
                f"the scalar '{name}' of {at} was the baked constant {a[1]} and is now a graph parameter"
            )
        elif a[0] == "param" and b[0] == "param":
            d.scalars.append(f"the scalar '{name}' of {at} changed type from {a[1]} to {b[1]}")
        elif a[0] == "const" and b[0] == "const":
            (d.constants if _may_be_a_size(a[1]) and _may_be_a_size(b[1]) else d.value_constants).append(
                f"the constant '{name}' of {at} changed from {a[1]} to {b[1]}; this argument is "
                "baked into the graph (not lifted to a parameter), so each new value compiles a new graph"
            )
        else:
            d.constants.append(f"the argument '{name}' of {at} changed kind ({a[0]} -> {b[0]})")
        d.score += 1


def _compare_ops(old: GraphSummary, new: GraphSummary, d: _Diff) -> None:
    a, b = old.ops, new.ops
    # Common prefix and suffix first: most recompiles change a few ops of a long graph.
    lo = 0
    while lo < len(a) and lo < len(b) and a[lo] == b[lo]:
        lo += 1
    hi = 0
    while hi < len(a) - lo and hi < len(b) - lo and a[len(a) - 1 - hi] == b[len(b) - 1 - hi]:
        hi += 1
    pairs = [(i, i) for i in range(lo)] + [(len(a) - 1 - k, len(b) - 1 - k) for k in range(hi)]
    new_ops: list[str] = []
    gone: list[str] = []
    mid_a, mid_b = a[lo: len(a) - hi], b[lo: len(b) - hi]
    if mid_a or mid_b:
        if len(mid_a) * len(mid_b) <= _MAX_ALIGN_WORK:
            sm = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False)
            for tag, i1, i2, j1, j2 in sm.get_opcodes():
                if tag == "equal":
                    pairs += [(lo + i1 + k, lo + j1 + k) for k in range(i2 - i1)]
                    continue
                new_ops += [f"new op {_op_at(op)}" for op in mid_b[j1:j2]]
                gone += [f"op {_op_at(op)} is gone" for op in mid_a[i1:i2]]
        else:
            first_new = _op_at(mid_b[0]) if mid_b else None
            first_old = _op_at(mid_a[0]) if mid_a else None
            new_ops.append(
                f"the ops differ from op {lo} on ({len(mid_b)} ops instead of {len(mid_a)}): "
                f"first {first_new or 'nothing'} where there was {first_old or 'nothing'}"
            )
            d.score += max(len(mid_a), len(mid_b))
    d.ops += _listed(new_ops, "new ops") + _listed(gone, "ops gone")
    d.score += len(new_ops) + len(gone)
    shape_msgs: list[str] = []
    wiring_msgs: list[str] = []
    for i, j in sorted(pairs, key=lambda p: p[1]):
        if old.consts[i] != new.consts[j]:
            _compare_consts(old.consts[i], new.consts[j], b[j], d)
        if old.shapes[i] != new.shapes[j]:
            shapes = ", ".join(_shape(s[0]) for s in new.shapes[j] if s)
            before = ", ".join(_shape(s[0]) for s in old.shapes[i] if s)
            shape_msgs.append(f"{_op_at(b[j])} now produces {shapes} instead of {before}")
        if old.wiring[i] != new.wiring[j]:
            wiring_msgs.append(
                f"the operands of {_op_at(b[j])} come from different values "
                "(e.g. the same tensor passed twice, or a different input)"
            )
    d.scalars[:] = _listed(d.scalars, "scalar changes")
    d.constants[:] = _listed(d.constants, "constant changes")
    d.shapes += _listed(shape_msgs, "shape changes")
    d.wiring += _listed(wiring_msgs, "wiring changes")
    d.score += len(shape_msgs) + len(wiring_msgs)


def _compare_outputs(old: GraphSummary, new: GraphSummary, d: _Diff) -> None:
    if len(old.outputs) == len(new.outputs):
        changed = [
            f"output {k} is now {b[0]} {_shape(b[1])} (was {a[0]} {_shape(a[1])})"
            for k, (a, b) in enumerate(zip(old.outputs, new.outputs))
            if a[0] != b[0]
        ]
        d.output_producers += _listed(changed, "output changes")
        d.score += len(changed)
        return
    found = [
        f"{len(new.outputs)} live outputs instead of {len(old.outputs)} "
        "(the graph returns every tensor still alive in Python)"
    ]
    sm = difflib.SequenceMatcher(None, [o[0] for o in old.outputs], [o[0] for o in new.outputs], autojunk=False)
    extra: list[str] = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag in ("insert", "replace"):
            extra += [f"new live output: {o[0]} {_shape(o[1])}" for o in new.outputs[j1:j2]]
        if tag in ("delete", "replace"):
            extra += [f"no longer live: {o[0]} {_shape(o[1])}" for o in old.outputs[i1:i2]]
    d.outputs += found + _listed(extra, "output changes")
    d.score += 1 + len(extra)


def _diff(old: GraphSummary, new: GraphSummary) -> tuple[int, list[str]]:
    d = _Diff()
    shape_changed = _compare_inputs(old, new, d)
    _compare_ops(old, new, d)
    _compare_outputs(old, new, d)
    return d.score, d.messages(shape_changed)


def compare(old: GraphSummary, new: GraphSummary) -> list[str]:
    """What differs between two graphs, as sentences naming user lines.

    Empty when the two graphs are the same (a graph evicted from the cache).
    """
    return _diff(old, new)[1]


def nearest(candidates: list[GraphSummary], new: GraphSummary) -> tuple[GraphSummary, list[str]]:
    """The candidate closest to ``new`` (fewest differences, newest on ties) and the differences."""
    best: tuple[int, int, GraphSummary, list[str]] | None = None
    for age, old in enumerate(reversed(candidates)):
        score, messages = _diff(old, new)
        if best is None or (score, age) < best[:2]:
            best = (score, age, old, messages)
    assert best is not None
    return best[2], best[3]


# ---------------------------------------------------------------------------
# Records


@dataclass
class Execution:
    """One graph execution: what forced it, where, and whether it compiled."""

    reason: str
    cause: str
    site: str | None
    stack: list[SourceLocation]
    graph_name: str | None
    nodes: int
    cache_miss: bool
    #: The recompile explanation when this was a cache miss after the site's first compile.
    recompile: Recompile | None = None

    @property
    def label(self) -> str:
        """``item() at train.py:60``."""
        return f"{self.cause} at {self.site}" if self.site else self.cause


@dataclass
class Recompile:
    """A cache miss at a barrier site that had compiled a graph before."""

    family: str
    number: int
    graph_name: str
    previous: str
    differences: list[str] = field(default_factory=list)
    hint: str | None = None

    @property
    def message(self) -> str:
        head = f"recompiling for {self.family} (graph {self.number} at this site, {self.graph_name})"
        if not self.differences:
            return (
                f"{head}: the same graph as {self.previous}, which is no longer cached "
                "(evicted from the LRU cache, see LAZY_CACHE_SIZE, or the cache was cleared)"
            )
        text = f"{head} differs from {self.previous}:\n" + "\n".join(f"  {m}" for m in self.differences)
        return text + (f"\n  hint: {self.hint}" if self.hint else "")


@dataclass
class _Family:
    label: str
    compiles: int = 0
    executions: int = 0
    graphs: deque = field(default_factory=lambda: deque(maxlen=_FAMILY_MEMORY))
    causes: Counter = field(default_factory=Counter)


class _State:
    def __init__(self) -> None:
        self.families: dict[tuple[str, str | None], _Family] = {}
        self.executions: deque[Execution] = deque(maxlen=1000)
        self.recompiles: deque[Recompile] = deque(maxlen=1000)
        self.names: dict[int, str] = {}
        self.backend: Any = None
        self.printed_sites: set[tuple[str, str | None]] = set()
        self.current: Execution | None = None


_state = _State()
_listeners: list[Callable[[Execution, LazyGraph], None]] = []
_level = 0
_atexit_registered = False


def _env_level() -> int:
    from .config import debug_level

    return debug_level()


def add_execution_listener(fn: Callable[[Execution, LazyGraph], None]) -> None:
    """Call ``fn(execution, graph)`` before each execution; it may raise to stop it."""
    _listeners.append(fn)


def executions() -> list[Execution]:
    """The most recent executions (up to 1000), oldest first."""
    return list(_state.executions)


def last_execution() -> Execution | None:
    """The execution running now (inside hooks) or that ran last."""
    return _state.current


def recompiles() -> list[Recompile]:
    """Every recompile explanation so far (up to 1000), oldest first."""
    return list(_state.recompiles)


def reset() -> None:
    """Forget families, executions and recompiles (e.g. between tests)."""
    global _state
    _state = _State()
    _noted.clear()


def explain(enable: bool = True) -> None:
    """Print recompile causes and forced executions as they happen, and a summary at exit."""
    global _level, _atexit_registered
    _level = max(_level, 1) if enable else 0
    if enable and not _atexit_registered:
        atexit.register(_print_summary)
        _atexit_registered = True


def _emit(text: str) -> None:
    sys.stderr.write("lazy_core: " + text.replace("\n", "\n  ") + "\n")


def explaining() -> bool:
    """Whether explanations are printed (``explain()``, LAZY_DEBUG): check before building one."""
    return bool(_level)


_noted: set = set()


def note(text: str, once: Any = None) -> None:
    """Print ``text`` as the other explanations are printed, when they are; with ``once``
    (a hashable key), only the first time that key is noted."""
    if not _level or (once is not None and once in _noted):
        return
    if once is not None:
        _noted.add(once)
    _emit(text)


def _pre_execute(graph: LazyGraph, reason: str, is_cache_miss: bool) -> None:
    stack = source_location.user_stack(limit=16)
    site = format_location(stack[0]) if stack else None
    cause = cause_of(reason)
    exe = Execution(reason, cause, site, stack, None, len(graph.nodes), is_cache_miss)
    for fn in _listeners:
        fn(exe, graph)  # may raise (lazy_core.step guards): nothing is recorded then
    state = _state
    backend = active_backend()
    if state.backend is not backend:
        # A new backend starts with an empty computation cache: start families afresh.
        state.families.clear()
        state.backend = backend
    key = (reason, site)
    fam = state.families.get(key)
    if fam is None:
        fam = state.families[key] = _Family(exe.label)
    fam.executions += 1
    if is_cache_miss:
        summary_ = summarize(graph)
        exe.graph_name = summary_.name
        state.names[hash(graph.key)] = summary_.name
        if fam.graphs:
            previous, differences = nearest(list(fam.graphs), summary_)
            rec = Recompile(exe.label, fam.compiles + 1, summary_.name, previous.name, differences,
                            _hint(fam.compiles + 1, previous, summary_))
            exe.recompile = rec
            state.recompiles.append(rec)
            metrics.counter_add("recompile")
            for m in differences or ["same graph (evicted)"]:
                fam.causes[m] += 1
            if _level:
                _emit(rec.message)
            _warn_storm(rec)
        elif _level:
            _emit(f"compiling {summary_.name} ({len(graph.nodes)} ops) for {exe.label}")
        fam.compiles += 1
        fam.graphs.append(summary_)
    else:
        exe.graph_name = state.names.get(hash(graph.key))
    metrics.record_execution(cause, site)
    state.executions.append(exe)
    state.current = exe
    if _level >= 2:
        _emit(f"executing {exe.graph_name or 'a cached graph'} ({exe.nodes} ops) for {exe.label}")
    elif _level and reason != "mark_step" and key not in state.printed_sites:
        state.printed_sites.add(key)
        _emit(
            f"{exe.label} forced the pending graph to run before mark_step() (a graph break); "
            "later ones at this line are counted in lazy_core.metrics.report()"
        )


#: Graphs compiled at one barrier site that make a recompile storm (warned again at each doubling).
STORM_GRAPHS = 8


class RecompileStormWarning(UserWarning):
    """One barrier site keeps compiling new graphs. Its own category, apart
    from the RuntimeWarning of a failed compile, so programs and tests that
    turn compile failures into errors do not fail on a slow-but-correct storm."""


def _warn_storm(rec: Recompile) -> None:
    """Warn when one site keeps compiling new graphs: the cost users notice
    as "every step is slow" (PyTorch/XLA's most common complaint). Sizes that
    vary compile only twice (lazy_core.dynamic_shapes), so a storm means the
    graphs differ in something else, or that their sizes are baked into
    constants; the warning names what changed last and where."""
    n = rec.number
    if n < STORM_GRAPHS or n & (n - 1):
        return
    import warnings

    changed = "; ".join(rec.differences[:2]) or "the same graph was evicted from the cache (LAZY_CACHE_SIZE)"
    warnings.warn(
        f"lazy_core: recompile storm: {n} graphs compiled for {rec.family}. Last change: {changed}. "
        "Sizes that vary are compiled with dynamic dimensions unless a size is baked into a constant "
        "(docs/dynamic-shapes.md); LAZY_DEBUG=1 prints every recompile and its cause.",
        RecompileStormWarning, stacklevel=2)


def _hint(number: int, old: GraphSummary, new: GraphSummary) -> str | None:
    """A likely explanation for a well-known pattern, or None."""
    def n_data(s: GraphSummary) -> int:
        return sum(1 for x in s.inputs if x[0] == "device_data")

    if number == 2 and n_data(new) > n_data(old):
        return (
            "the first step of a training loop often compiles a graph of its own: state that an "
            "optimizer creates in its first step (SGD momentum, Adam moments) is a graph input "
            "from the second step on. Expected once; a recompile at every step is not."
        )
    return None


def summary() -> str:
    """Executions and compiles per barrier site, and the recompile causes seen."""
    fams = sorted(_state.families.values(), key=lambda f: (-f.compiles, -f.executions))
    if not fams:
        return "lazy_core diagnostics: no graph executed\n"
    width = max(len(f.label) for f in fams)
    lines = ["lazy_core diagnostics summary", f"  {'cause':<{width}}  {'executions':>10}  {'graphs':>6}"]
    for f in fams:
        lines.append(f"  {f.label:<{width}}  {f.executions:>10,d}  {f.compiles:>6,d}")
    recompiling = [f for f in fams if f.causes]
    if recompiling:
        lines.append("recompile causes:")
        for f in recompiling:
            lines.append(f"  {f.label}: {f.compiles - 1} recompile(s)")
            for cause, n in f.causes.most_common(5):
                lines.append(f"    {n}x {cause}")
    return "\n".join(lines) + "\n"


def _print_summary() -> None:
    if _level:
        sys.stderr.write(summary())


def _install() -> None:
    ex = executor()
    if _pre_execute not in ex.pre_hooks:
        ex.pre_hooks.insert(0, _pre_execute)


_install()
if _env_level():
    explain(True)
    _level = _env_level()
