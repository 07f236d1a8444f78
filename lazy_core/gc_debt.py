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
collection of a transformers-sized heap would triple. Nothing else about the
collector changes: no thresholds, no ``gc.freeze()``, which would keep the
user's cyclic garbage of that moment forever (docs/architecture.md leaves
that choice to the user).
"""

from __future__ import annotations

import gc
import sys

from . import metrics

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
