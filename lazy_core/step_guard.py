"""``with lazy_core.step(...)``: one training step, with guarantees that fail loudly.

Lazy-tensor programs degrade silently: a ``.item()`` splits the step into two
graphs, an op without a lowering runs on the CPU, a changing shape compiles a
new graph every step. Users who want certainty wrap the step::

    for x, y in loader:
        with lazy_core.step(max_graphs=1, full_graph=True):
            loss = loss_fn(model(x.to("lazy")), y.to("lazy"))
            loss.backward(); opt.step(); opt.zero_grad()
        # the block ends with mark_step()

``full_graph=True``: the block must run as one graph, from a ``mark_step``
(the one at the end of the block, or one the user calls inside it). Anything
else that would execute or leave the graph inside the block (a value read,
``print``, an eager fallback op, the graph-size safety net, a second graph)
raises ``StepGuardError`` naming its user line, before anything runs.

``max_graphs=N``: at most N distinct graphs may ever run inside blocks opened
at this ``with`` line (all iterations of the loop together), so a recompile
at step 1000 raises, with what changed (``input 0 changed shape from [64,
784] to [32, 784]``). Step closures run after the block and are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from . import closures, diagnostics, metrics, source_location
from .executor import compile_failure_hooks, executor
from .graph import LazyGraph

__all__ = ["StepGuard", "StepGuardError", "reset", "step"]


class StepGuardError(RuntimeError):
    """A ``lazy_core.step`` guarantee was broken; the message names the user line."""


@dataclass
class _SiteGraphs:
    """Distinct graphs seen in blocks opened at one ``with`` line."""

    keys: set[int] = field(default_factory=set)
    summaries: list[diagnostics.GraphSummary] = field(default_factory=list)


_sites: dict[str, _SiteGraphs] = {}
_active: list[StepGuard] = []


def reset() -> None:
    """Forget the graphs counted for ``max_graphs`` at every site."""
    _sites.clear()


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


class StepGuard:
    """The context manager ``lazy_core.step()`` returns."""

    def __init__(self, max_graphs: int | None, full_graph: bool, site: str | None) -> None:
        if max_graphs is not None and max_graphs < 1:
            raise ValueError(f"max_graphs must be at least 1, got {max_graphs}")
        self.max_graphs = max_graphs
        self.full_graph = full_graph
        self.site = site
        self._graphs_in_block = 0
        self._first_graph: str | None = None
        self._exiting = False
        self._done = False

    def _where(self) -> str:
        opts = []
        if self.max_graphs is not None:
            opts.append(f"max_graphs={self.max_graphs}")
        if self.full_graph:
            opts.append("full_graph=True")
        at = f" block at {self.site}" if self.site else " block"
        return f"lazy_core.step({', '.join(opts)}){at}"

    def __enter__(self) -> StepGuard:
        _active.append(self)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if exc_type is None:
                self._exiting = True
                executor().mark_step()
        finally:
            self._done = True
            if self in _active:
                _active.remove(self)

    # -- checks (called by diagnostics before each execution, and on fallbacks) ------
    def _check_execution(self, exe: diagnostics.Execution, graph: LazyGraph) -> None:
        if self._done or closures.running():
            return
        if self._exiting and exe.reason != "mark_step":
            return
        if self.full_graph:
            if exe.reason != "mark_step":
                raise StepGuardError(
                    f"{self._where()}: {exe.label} forced the pending graph to run inside the step "
                    "(a graph break). Read values after the step, or log them with "
                    "lazy_core.add_step_closure(fn, args), which runs after mark_step()."
                )
            if self._graphs_in_block >= 1:
                raise StepGuardError(
                    f"{self._where()}: a second graph ran inside the step at {exe.label} "
                    f"(the first ran at {self._first_graph}); with full_graph=True the block must "
                    "be one graph: call mark_step() only at its end (the block does it for you)."
                )
        if self.max_graphs is not None:
            self._check_distinct(exe, graph)
        self._graphs_in_block += 1
        if self._first_graph is None:
            self._first_graph = exe.label

    def _check_distinct(self, exe: diagnostics.Execution, graph: LazyGraph) -> None:
        seen = _sites.setdefault(self.site or "<unknown>", _SiteGraphs())
        key = hash(graph.key)
        if key in seen.keys:
            return
        summary = diagnostics.summarize(graph)
        if len(seen.keys) >= (self.max_graphs or 0):
            detail = ""
            if seen.summaries:
                previous, differences = diagnostics.nearest(seen.summaries, summary)
                if differences:
                    detail = f"; it differs from {previous.name}:\n" + "\n".join(f"  {d}" for d in differences)
            raise StepGuardError(
                f"{self._where()}: a {_ordinal(len(seen.keys) + 1)} distinct graph ({summary.name}, "
                f"{len(graph.nodes)} ops) would run at {exe.label}, over max_graphs={self.max_graphs}"
                f"{detail}"
            )
        seen.keys.add(key)
        seen.summaries.append(summary)

    def _check_fallback(self, op_name: str, site: str | None) -> None:
        if self._done or self._exiting or not self.full_graph or closures.running():
            return
        raise StepGuardError(
            f"{self._where()}: {op_name} at {diagnostics.relative_site(site) or '<unknown>'} cannot be part of the graph "
            f"(no lowering on backend, or a data-dependent shape) and would run eagerly on the CPU, "
            "splitting the step. Replace it, move it out of the step, or drop full_graph=True."
        )


    def _check_compile_failure(self, graph: LazyGraph, error: BaseException) -> None:
        # Also at the block's own closing mark_step: a whole step that fails to compile
        # would otherwise run op by op on the CPU, the opposite of one graph.
        if self._done or not self.full_graph or closures.running():
            return
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise StepGuardError(
            f"{self._where()}: graph {graph.name} ({len(graph.nodes)} ops) failed to compile on the "
            f"backend ({type(error).__name__}: {first}) and would run eagerly op by op; with "
            "full_graph=True the step must compile as one graph."
        ) from error


def step(max_graphs: int | None = None, full_graph: bool = False) -> StepGuard:
    """A training step that ends with ``mark_step()`` and raises when it breaks a guarantee.

    ``full_graph``: the block runs as exactly one graph (no value reads, no
    eager fallbacks, no second graph). ``max_graphs``: at most this many
    distinct graphs across all blocks opened at this line. Violations raise
    ``StepGuardError`` naming the user line before anything executes.
    """
    stack = source_location.user_stack(limit=1)
    site = diagnostics.format_location(stack[0]) if stack else None
    return StepGuard(max_graphs, full_graph, site)


def _on_execution(exe: diagnostics.Execution, graph: LazyGraph) -> None:
    for guard in list(_active):
        guard._check_execution(exe, graph)


def _on_fallback(op_name: str, site: Any) -> None:
    for guard in list(_active):
        guard._check_fallback(op_name, site)


def _on_compile_failure(graph: LazyGraph, error: BaseException) -> None:
    for guard in list(_active):
        guard._check_compile_failure(graph, error)


diagnostics.add_execution_listener(_on_execution)
compile_failure_hooks.append(_on_compile_failure)
metrics.fallback_hooks.append(_on_fallback)
