"""Automatic dynamic dimensions: one executable for a program at many sizes.

A lazy tracer records concrete sizes, so a loop over 13 batch shapes made 13
graphs and 13 compiles, and generation compiled once per token. Here graphs
are grouped into *families* (``LazyGraph.family_key``: the same program with
sizes and integer constants left out). The first member of a family compiles
statically, as before. When another member with other sizes misses the
cache, the backend is asked to ``generalize`` the two into a *plan* whose
differing dimensions are dynamic; the plan compiles once, and every later
member the plan ``admits`` reuses that executable without compiling.

Correctness rests on the backend's ``admits``: it says yes only when the
plan's function at the new sizes is exactly the new graph (lowering.dynamic
checks every size and integer of the lowered graph), so a size baked into a
lowered constant sends the graph to a static compile instead of a wrong
value. The policy follows torch.compile's automatic dynamic shapes: static
first, dynamic after the first size change, sizes 0 and 1 never dynamic.
A first member loaded from the persistent cache is not lowered at all (its
sample would cost more than the load): in that process the family goes
dynamic at its third size, not its second, unless an earlier process left a
plan.

*Speculation.* A program often runs as a few families that share a size:
generate() is a prefill graph over the prompt and a decode graph over a KV
cache of the prompt's length. The decode family goes dynamic within one
call; the prefill family meets its second length only in the next call,
which then compiled again. So when a plan compiles, the input sizes it made
dynamic (their values in its family's sample, e.g. the cache length 5) are
offered to other families: one is *speculated* when it is static (a sample,
no plan, no refusal, never speculated), was seen among the last
``_RECENT`` misses, and has that size both in an input and in an output (it
*produced* a tensor of that size, which the dynamic family may have
consumed: the prefill makes the KV cache; a training loop's first step,
whose outputs are parameters and optimizer state, has the batch size in its
inputs only and is left alone). The backend's ``speculate`` replays the
sample with those input dims changed and generalizes the two; the plan
compiles at once (``dynamic_compile`` and ``dynamic_speculative``) and is
kept like any plan, on disk too. At most ``_MAX_SPECULATIVE`` per table
(until ``clear``), ``_SPECULATE_PER_PLAN`` per plan. It is only a guess:
``admits`` decides every reuse exactly as for any plan, so a wrong guess
costs one compile (``dynamic_speculative_used`` counts the guesses that
served a graph), and any failure leaves the family static as before.

A compiled plan is also kept by the backend's persistent cache
(``load_plans`` / ``store_plan``), so a later process runs sizes it has
never seen without compiling (its first use counts ``persistent_cache_hit``).

``LAZY_DYNAMIC=0`` turns it off (``LAZY_DYNAMIC_SPECULATE=0`` only the
speculation); ``LAZY_DEBUG=1`` says when a family went
dynamic (which dims) and when it could not. Counters: ``dynamic_compile``
(a plan compiled), ``dynamic_speculative`` (of which speculated, see above),
``dynamic_reuse`` (a new graph served by a plan without
compiling), ``dynamic_refused`` (two members that are not one function of
their sizes), ``dynamic_compile_error`` (a plan that did not compile; the
graph compiled statically).
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from . import config, metrics
from .backend import BackendImpl
from .graph import LazyGraph
from .state_fills import FirstStep, order_free_key

__all__ = ["DynamicShapes"]

#: Families remembered (LRU): each holds one lowered sample and its plans.
_MAX_FAMILIES = 256
#: Plans kept per family, and members that failed to generalize before a family is left static.
_MAX_PLANS = 4
_MAX_REFUSALS = 8
#: Speculation (module doc): plans compiled per table, per plan that triggers them, and how
#: recently (in-memory misses ago) a family must have been seen.
_MAX_SPECULATIVE = 4
_SPECULATE_PER_PLAN = 2
_RECENT = 16
#: First steps that made state, remembered for the family of the steps after them.
_MAX_FIRST_STEPS = 8


class _Family:
    __slots__ = ("sample", "plans", "refusals", "broken", "loaded", "deferred", "seen", "shapes", "in_sizes",
                 "out_sizes", "stand_in", "speculated")

    def __init__(self) -> None:
        self.sample: Any = None
        #: [plan, executor cache entry, loaded from disk and not used yet, speculated and
        #: not used yet], newest last.
        self.plans: list[list[Any]] = []
        self.refusals = 0
        #: A plan failed to compile: this family stays static.
        self.broken = False
        #: The backend's persistent cache was asked for this family's plans.
        self.loaded = False
        #: The first member was loaded from the persistent cache and not sampled.
        self.deferred = False
        #: The table's miss count when this family was last looked up.
        self.seen = 0
        #: Of the sampled member: its device-data input shapes, the sizes (>= 2) of its
        #: inputs and of its outputs, and a graph holding only its names (for speculation).
        self.shapes: list[tuple[int, ...]] = []
        self.in_sizes: frozenset[int] = frozenset()
        self.out_sizes: frozenset[int] = frozenset()
        self.stand_in: LazyGraph | None = None
        #: A plan was speculated for it (compiled or not): never again.
        self.speculated = False


class DynamicShapes:
    """The executor's family table (one per executor; used under its lock).

    ``make_entry(executable, computation)`` makes an executor cache entry for
    a plan an earlier process compiled (``BackendImpl.load_plans``);
    ``compile_plan(backend, graph, donated, plan)`` compiles a speculated plan
    for another family (None: no speculation).
    """

    def __init__(self, make_entry: Callable[[Any, Any], Any],
                 compile_plan: Callable[[BackendImpl, LazyGraph, dict[int, int] | None, Any], Any] | None = None
                 ) -> None:
        self._families: OrderedDict[tuple, _Family] = OrderedDict()
        self._backend: BackendImpl | None = None
        self._make_entry = make_entry
        self._compile_other = compile_plan
        self._misses = 0
        self._speculations = 0
        #: Lifted samples of first steps that made state, by the lifted graph's family key
        #: (``lazy_core.state_fills``), LRU; each is adopted at most once.
        self._first_steps: OrderedDict[str, FirstStep] = OrderedDict()

    def clear(self) -> None:
        self._families.clear()
        self._first_steps.clear()
        self._speculations = 0

    def _family(self, backend: BackendImpl, graph: LazyGraph, donated: dict[int, int] | None,
                create: bool) -> tuple[tuple, _Family | None]:
        if backend is not self._backend:
            self._families.clear()
            self._first_steps.clear()
            self._backend = backend
        key = (graph.family_key, tuple(sorted(donated.items())) if donated else ())
        family = self._families.get(key)
        if family is not None:
            self._families.move_to_end(key)
        elif create:
            family = self._families[key] = _Family()
            if len(self._families) > _MAX_FAMILIES:
                self._families.popitem(last=False)
        if family is not None:
            family.seen = self._misses
        return key, family

    @staticmethod
    def enabled(backend: BackendImpl) -> bool:
        return bool(config.get("LAZY_DYNAMIC")) and bool(getattr(backend, "supports_dynamic_shapes", False))

    def reuse(self, backend: BackendImpl, graph: LazyGraph, donated: dict[int, int] | None) -> tuple[Any, Any]:
        """On an in-memory cache miss: ``(entry, sample)``, ``entry`` a compiled
        plan's cache entry that admits ``graph`` (or None), ``sample`` the
        graph's lowered sample when one was made (for ``compile``)."""
        if not self.enabled(backend):
            return None, None
        self._misses += 1
        _, family = self._family(backend, graph, donated, create=True)
        assert family is not None
        if family.broken:
            return None, None
        if not family.loaded:
            # A plan an earlier process compiled: sizes never seen here run without compiling.
            family.loaded = True
            with metrics.timed("load_executable"):
                loaded = backend.load_plans(graph, donated)
            family.plans += [[plan, self._make_entry(exe, comp), True, False] for plan, exe, comp in loaded]
        if not family.plans and family.sample is None:
            return None, None
        sample = _sample(backend, graph)
        if sample is None:
            return None, None
        for held in reversed(family.plans):
            plan, entry, unused, guessed = held
            if backend.admits(plan, sample):
                if unused:  # its first use in this process: a load, as metrics counts them
                    held[2] = False
                    metrics.counter_add("cache_miss")
                    metrics.counter_add("persistent_cache_hit")
                else:
                    metrics.counter_add("dynamic_reuse")
                if guessed:  # a speculated plan's first use: the guess paid off
                    held[3] = False
                    metrics.counter_add("dynamic_speculative_used")
                return entry, sample
        return None, sample

    def compile(self, backend: BackendImpl, graph: LazyGraph, donated: dict[int, int] | None, sample: Any,
                compile_static: Callable[[], Any], compile_plan: Callable[[Any], Any]) -> Any:
        """The cache entry for ``graph`` (a miss no plan admitted): a plan
        compiled from this family's first sample and ``graph``, or a static
        compile (``compile_static``), remembering the family either way."""
        if not self.enabled(backend):
            return compile_static()
        key, family = self._family(backend, graph, donated, create=True)
        assert family is not None
        if family.broken or family.refusals >= _MAX_REFUSALS:
            return compile_static()
        adopted = family.sample is None and self._adopt_first_step(backend, family, graph)
        if family.sample is None:
            # The first member: static, as a shape seen once should be. Its
            # lowered sample is what the next member is compared with.
            entry = compile_static()
            if entry.eager:
                return entry
            if sample is None and getattr(entry, "loaded", False) and not family.deferred:
                # Loaded from the persistent cache: nothing was lowered, and lowering it now
                # only for a size that may never change was most of a warm process's first
                # step (docs/dynamic-shapes.md). The next member with other sizes is
                # compiled statically and sampled instead, and the one after it generalizes.
                family.deferred = True
                metrics.counter_add("dynamic_sample_deferred")
                return entry
            family.sample = sample if sample is not None else _sample(backend, graph)
            if family.sample is not None:
                _describe(family, graph)
                self._remember_first_step(graph)
            return entry
        if sample is None:
            sample = _sample(backend, graph)
        plan = backend.generalize(family.sample, sample) if sample is not None else None
        if plan is None and adopted and sample is not None:
            # Not one function of the first step's sizes after all: this graph is
            # its family's first member, as it would have been.
            family.sample = sample
            _describe(family, graph)
            return compile_static()
        if plan is None:
            family.refusals += 1
            metrics.counter_add("dynamic_refused")
            _say(f"graph {graph.name} recurs with other sizes but not as one function of them "
                 f"(a size is baked into a constant, or an integer argument changed); compiled statically")
            return compile_static()
        try:
            entry = compile_plan(plan)
        except Exception as e:  # a compiler that cannot take these dims: static still works
            family.broken = True
            metrics.counter_add("dynamic_compile_error")
            _say(f"graph {graph.name}: the dynamic-shape compile failed ({type(e).__name__}: "
                 f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}); compiling statically")
            return compile_static()
        metrics.counter_add("dynamic_compile")
        describe = getattr(plan, "describe", None)
        _say(f"graph {graph.name} recurs with other sizes: compiled once with dynamic dims "
             f"{describe() if describe else ''}".rstrip())
        family.plans.append([plan, entry, False, False])
        del family.plans[:-_MAX_PLANS]
        with metrics.timed("store_executable"):
            backend.store_plan(graph, donated, plan, entry.computation, entry.executable)
        sizes = {a for old, new in zip(family.shapes, _input_shapes(graph)) for a, b in zip(old, new) if a != b}
        if adopted:
            # A real member is the family's sample from now on (the first step's rewrite only
            # stood in): the next size change generalizes over this step's sizes as before.
            family.sample = sample
            _describe(family, graph)
        self._speculate(backend, family, frozenset(s for s in sizes if s >= 2))
        return entry

    def _remember_first_step(self, graph: LazyGraph) -> None:
        """If ``graph`` made state, keep it as its later steps would be
        (``lazy_core.state_fills``) for the family those steps will be."""
        first = FirstStep.of(graph)
        if first is not None:
            self._first_steps[first.key] = first
            while len(self._first_steps) > _MAX_FIRST_STEPS:
                self._first_steps.popitem(last=False)

    def _adopt_first_step(self, backend: BackendImpl, family: _Family, graph: LazyGraph) -> bool:
        """Whether ``graph``, a new family's first member, is a later step of a
        remembered first step at other sizes: then that step, rewritten, is
        sampled as this family's first member, and ``graph`` generalizes
        with it at once instead of compiling statically. A later step at
        the first step's sizes compiles statically, as before."""
        if not self._first_steps:
            return False
        first = self._first_steps.get(order_free_key(graph))
        rewritten = first.as_later(graph) if first is not None else None
        if rewritten is None or _input_shapes(rewritten) == _input_shapes(graph):
            return False
        sample = _sample(backend, rewritten)
        if sample is None:
            return False
        del self._first_steps[first.key]
        family.sample = sample
        _describe(family, rewritten)
        metrics.counter_add("dynamic_first_step_adopted")
        _say(f"graph {graph.name} is a later step of a first step that made state, at other sizes: "
             "generalized with that step")
        return True

    def _speculate(self, backend: BackendImpl, trigger: _Family, sizes: frozenset[int]) -> None:
        """Compile plans for other static families that share ``sizes`` (the
        module doc's policy); nothing when anything fails."""
        if self._compile_other is None or not sizes or not config.get("LAZY_DYNAMIC_SPECULATE"):
            return
        done = 0
        for key, other in reversed(list(self._families.items())):  # most recently seen first
            if self._speculations >= _MAX_SPECULATIVE or done >= _SPECULATE_PER_PLAN:
                return
            if self._misses - other.seen > _RECENT:
                return  # the rest were seen even earlier
            if (other is trigger or other.sample is None or other.plans or other.broken or other.refusals
                    or other.speculated or other.stand_in is None):
                continue
            shared = sizes & other.in_sizes & other.out_sizes
            if not shared:
                continue
            other.speculated = True
            try:
                with metrics.timed("dynamic_speculate"):
                    plan = backend.speculate(other.sample, shared)
            except Exception:
                plan = None
            if plan is None:
                metrics.counter_add("dynamic_speculation_refused")
                continue
            donated = dict(key[1]) or None
            try:
                entry = self._compile_other(backend, other.stand_in, donated, plan)
            except Exception as e:  # the family's real second member still gets its own try
                metrics.counter_add("dynamic_speculative_error")
                _say(f"graph {other.stand_in.name}: a speculated dynamic-shape compile failed "
                     f"({type(e).__name__}); it stays static until its next size")
                continue
            done += 1
            self._speculations += 1
            metrics.counter_add("dynamic_compile")
            metrics.counter_add("dynamic_speculative")
            describe = getattr(plan, "describe", None)
            _say(f"graph {other.stand_in.name} shares sizes {sorted(shared)} with a graph that went dynamic: "
                 f"compiled ahead with dynamic dims {describe() if describe else ''}".rstrip())
            other.plans.append([plan, entry, False, True])
            with metrics.timed("store_executable"):
                backend.store_plan(other.stand_in, donated, plan, entry.computation, entry.executable)


def _input_shapes(graph: LazyGraph) -> list[tuple[int, ...]]:
    return [tuple(leaf.metas[0].shape) for leaf in graph.device_data()]


def _describe(family: _Family, graph: LazyGraph) -> None:
    """What speculation needs of a family's sampled member (not the graph itself,
    which holds its input buffers)."""
    family.shapes = _input_shapes(graph)
    family.in_sizes = frozenset(d for shape in family.shapes for d in shape if d >= 2)
    family.out_sizes = frozenset(d for out in graph.outputs for d in out.meta.shape if d >= 2)
    family.stand_in = LazyGraph([], [], [], None, _stable=graph.stable_hash, _family=graph.family_key)


def _sample(backend: BackendImpl, graph: LazyGraph) -> Any:
    """The backend's sample of ``graph``, or None if it cannot make one (the
    graph then compiles statically, where its real error, if any, shows)."""
    try:
        with metrics.timed("dynamic_sample"):
            return backend.shape_sample(graph)
    except Exception:
        metrics.counter_add("dynamic_sample_error")
        return None


def _say(text: str) -> None:
    if config.debug_level() >= 1:
        sys.stderr.write(f"lazy_core: {text}\n")
