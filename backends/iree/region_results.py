"""Dispatch regions that yield one value twice, which IREE 3.13 then wires to the wrong result.

IREE forms ``flow.dispatch.region``s and then clones elementwise producers into them; the
linalg fusion inside a region can make two of its results equal (``where(c, x, where(c, x, y))``
folds to ``where(c, x, y)``, so a region returning both yields one value twice). The
canonicalizer then drops the duplicate result (``dropUnusedAndRedundantDispatchRegionResults``
in IREE's FlowOps.cpp), but it records the duplicate's own result number instead of the
number of the result it duplicates, and a lookup that misses gives 0: every dropped
duplicate is replaced by the region's *first* result. Fuzz seed 4601 p1320 returned
``sin(x)`` for ``where(x > 0, x, where(x > 0, x, sin(x)))`` on iree-cpu and iree-vulkan.

The duplicate is gone from every phase IREE dumps (the flow phase already holds the wrong
wiring), so the compile also prints the IR right after ``CloneProducersIntoDispatchRegions``,
the pass after which the canonicalizer runs, into a directory (MLIR's
``--mlir-print-ir-tree-dir``); this module reads it. A duplicate of the first yielded value
is harmless (the lookup's 0 is then right); any other one is a wrong value, and the graph is
compiled again with its outputs kept apart (``outputs_behind_barriers``) or refused.
"""

from __future__ import annotations

import os
import re

from .barriers import isolate

#: The pass after which regions are checked, and the flags that make iree-compile print it.
CHECKED_PASS = "iree-dispatch-creation-clone-producers-into-dispatch-regions"


def print_flags(directory: str) -> list[str]:
    """iree-compile flags that write the IR after ``CHECKED_PASS`` under ``directory``."""
    return [f"--mlir-print-ir-after={CHECKED_PASS}", f"--mlir-print-ir-tree-dir={directory}"]


def read_printed(directory: str) -> str:
    """Every function's IR printed under ``directory`` (one file per function and run)."""
    texts = []
    for root, _, files in os.walk(directory):
        for name in sorted(files):
            if name.endswith(".mlir"):
                with open(os.path.join(root, name)) as f:
                    texts.append(f.read())
    return "\n".join(texts)


_REGION = re.compile(r"=\s*flow\.dispatch\.region\b")
_RETURN = re.compile(r"^\s*flow\.return\s+(?P<values>[^:]+?)\s*:\s*(?P<types>.*)$")


def misrouted_duplicates(ir: str) -> list[str]:
    """The body ``flow.return`` lines of dispatch regions in ``ir`` that yield a value twice
    where that value is not the region's first result: IREE 3.13 replaces such a duplicate
    by the first result (see the module docstring)."""
    found = []
    inside = False
    for line in ir.splitlines():
        if _REGION.search(line):
            inside = True
            continue
        m = _RETURN.match(line) if inside else None
        if m is None:
            continue
        inside = False  # the body's return comes first; a count region's returns are indices
        values = [v.strip() for v in m["values"].split(",")]
        seen = set()
        for v in values:
            if v in seen and v != values[0]:
                found.append(line.strip())
                break
            seen.add(v)
    return found


#: Ops whose result leaves the function (what the function returns goes through these).
_SINKS = ("hal.tensor.barrier", "hal.tensor.export", "iree_tensor_ext.compute_barrier.end")
#: Never behind a barrier: a fill or constant there becomes a splat IREE writes into in place
#: and merges with other splats (miscompiles.py); the rest compute nothing.
_KEPT_IN_PLACE = ("linalg.fill", "linalg.yield", "linalg.index", "tensor.empty", "tensor.dim")


def _computes_an_output(op) -> bool:  # noqa: ANN001 - an iree.compiler.ir operation
    """An op computing a tensor the function returns."""
    if not op.name.startswith(("linalg.", "tensor.", "iree_linalg_ext.")) or op.name in _KEPT_IN_PLACE:
        return False
    return any(use.owner.name in _SINKS for result in op.results for use in result.uses)


def outputs_behind_barriers(global_opt_ir: str) -> str | None:
    """``global_opt_ir`` (IREE's ``global-optimization`` phase) with every computed output behind
    a barrier (barriers.py), or None where there is none. The ops that read an output then read it
    from memory, in another dispatch, so no fusion can make an output equal to another result of
    its region (``where(c, x, out)`` no longer folds into ``out``); the graph is checked again."""
    return isolate(global_opt_ir, results_of=_computes_an_output)
