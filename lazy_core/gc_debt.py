"""Pay the garbage collector's debt from a compile before the steady steps do.

CPython (3.11) runs a full collection, which walks every tracked object of
the process, once the objects promoted to its oldest generation since the
last one exceed a quarter of those it holds. The first compile of a process
imports the lowering stack (torch-mlir's importer, ``torch.fx``, sympy,
torch._dynamo: about 150,000 long-lived objects on top of the 170,000 of
``import torch``), so the full collection it makes due falls a few steps
later, in the middle of the user's steady state: a step of a 784-256-128-10
MLP that takes 2 ms on iree-cpu took 170-200 ms once, within the first 40
steps after warm-up (``bench/train_step.py --model mlp`` measured 11-13 ms
per step over its 20 timed steps instead of 2-3 ms).

The barrier that compiled already made the user wait (seconds, for a
compile), so after a compile that imported many modules (817 for the first
one of a process, a few hundred for some later ones) it collects at once:
the same work, done where it is not a hiccup. Compiles that import little
skip it (a test suite's thousands of compiles would otherwise pay a full
collection each), and so do executables loaded from the disk cache: a warm
process imports almost nothing (one module in tiny BERT's first two steps),
and its first step is meant to cost about a steady step, which a 200 ms
collection of a transformers-sized heap would triple.

The steps themselves made full collections too. Every traced op leaves a few
GC-tracked objects (node, output, argument tuple, tensor wrapper) that live
until the step's barrier. With CPython's default youngest-generation
threshold (700 net allocations) a step runs many young collections while
they are alive, so they are promoted to the oldest generation, die there by
reference counting, and still count toward the next full collection of the
whole heap (torch, transformers, the model: ~400,000 objects, 230-280 ms
each). Measured (one thread, iree-cpu, GC time per step from ``gc.callbacks``):
``make demo``'s CNN 0.67 ms per step (two full collections in 800 steps),
the model zoo's LSTM 45 ms (one full collection every 5 steps), GPT-2 8.4 ms.
With the threshold at 10,000 a step's objects mostly die before a young
collection sees them: 0.13-0.19, 11.5 and 0.1 ms, and no full collection in
those runs. So the first ``mark_step()`` raises the threshold
(``LAZY_GC_YOUNG``, default 10,000) unless the program set its own. Nothing
is frozen: ``gc.freeze()`` would exempt the heap from full collections too,
but cyclic garbage among frozen objects is never freed (docs/architecture.md
leaves that choice to the user).
"""

from __future__ import annotations

import gc
import sys

from . import config, metrics

#: Imports since the last collection here that make one worth its cost.
MODULES = 50
_modules_seen = 0


def after_compile() -> None:
    """Collect now if compiles since the last call imported many modules."""
    global _modules_seen
    n = len(sys.modules)
    if n - _modules_seen < MODULES:
        return
    _modules_seen = n
    if not gc.isenabled():
        return  # the user turned the collector off: leave it so
    with metrics.timed("gc_after_compile"):
        gc.collect()


#: CPython's default youngest-generation threshold: a program that changed it chose its own.
DEFAULT_YOUNG = 700
_young_tuned = False


def tune_young_generation() -> None:
    """Raise the youngest generation's threshold to ``LAZY_GC_YOUNG`` once per process, if it
    is still CPython's default (the module's docstring says why)."""
    global _young_tuned
    if _young_tuned:
        return
    _young_tuned = True
    young = config.get("LAZY_GC_YOUNG")
    threshold = gc.get_threshold()
    if young and threshold[0] == DEFAULT_YOUNG:
        gc.set_threshold(young, *threshold[1:])
