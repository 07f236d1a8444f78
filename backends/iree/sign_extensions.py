"""Keep a 32-to-64-bit sign extension out of the Vulkan dispatch that reads it.

Found through integer ``pow`` and kept as a strict xfail for two rounds:
``z = e.to(int32).to(int64)`` returned next to ``z < 0`` gave ``z < 0`` all
False on iree-vulkan (lavapipe) for most sizes (5, 6, 7, 12, 1001 elements;
not 8 or 4096); ``z >= 0``, ``z < 1``, ``torch.where(z < 0, ...)`` and
``int32 + int64`` tensors compared with 0 were wrong the same way, while
``z < -3``, ``z == -5``, ``-z`` or ``z.clamp(min=0)`` were right, and so was a
16-bit source. iree-cpu and the reference backend are right.

IREE clones the cheap extension into each dispatch that reads its result
(``arith.extsi %in : i32 to i64`` in a ``linalg.generic`` of its own, next
to the reader), where it gets an i64 intermediate in workgroup memory. The
SPIR-V IREE writes for it reads correctly (``SConvert``, a workgroup store
and load, ``SLessThan`` against 0), so the wrong value comes later, in
lavapipe's compiler; reproduced with plain ``iree-compile`` and
``iree-run-module`` on a two-generic linalg function
(``test_iree_vulkan_still_miscompiles_a_cloned_sign_extension``), no flag of
ours involved.

``cloned_sign_extensions`` finds such a read in the
``executable-configurations`` phase; ``isolate_sign_extensions`` puts a
barrier (barriers.py) on the extension's results in the
``global-optimization`` phase, so the reader loads the 64-bit values its own
dispatch did not compute, and the graph is compiled again from there
(backends/iree/compiler.py). A graph that still has one is refused.
"""

from __future__ import annotations

import re

from ..mlir_walk import nested_operations
from .barriers import isolate

_FUNC = re.compile(r"^\s*func\.func\s+@(?P<name>[\w.$-]+)\(")
_LINALG_DEF = re.compile(r"^\s*(?P<result>%[\w.$-]+)(?::\d+)?\s*=\s*linalg\.(?P<op>[\w.]+)\b(?P<rest>.*)$")
_OPERANDS = re.compile(r"\b(?:ins|outs)\((?P<values>[^:)]*)")
_VALUE = re.compile(r"%[\w.$-]+")
_SIGN_EXTENSION = re.compile(r"\barith\.extsi\s+%[\w.$-]+\s*:\s*i32\s+to\s+i64\b")
_REGION_END = re.compile(r"^\s*\}\s*->")


def cloned_sign_extensions(configured_ir: str) -> list[str]:
    """``dispatch: reader line`` for each linalg op that reads, in its own dispatch, the result of
    a ``linalg.generic`` sign-extending i32 to i64 (IREE's ``executable-configurations`` phase)."""
    found: list[str] = []
    name = ""
    extended: set[str] = set()
    inside: str | None = None  # the result of the generic whose body this line is in
    for line in configured_ir.splitlines():
        func = _FUNC.match(line)
        if func is not None:
            name, extended, inside = func.group("name"), set(), None
            continue
        d = _LINALG_DEF.match(line)
        if d is not None:
            read = [v.partition("#")[0] for m in _OPERANDS.finditer(d.group("rest"))
                    for v in _VALUE.findall(m.group("values"))]
            if any(v in extended for v in read):
                found.append(f"{name}: {line.strip()[:300]}")
            inside = d.group("result") if d.group("op") == "generic" else None
            continue
        if inside is not None and _SIGN_EXTENSION.search(line):
            extended.add(inside)
        elif _REGION_END.match(line):
            inside = None
    return found


def isolate_sign_extensions(global_opt_ir: str) -> str | None:
    """``global_opt_ir`` with a barrier (barriers.py) on each used result of a
    ``linalg.generic`` that sign-extends i32 to i64, or None where there is none."""
    return isolate(global_opt_ir, results_of=_sign_extends)


def _sign_extends(op) -> bool:  # noqa: ANN001 - an iree.compiler.ir operation
    return op.name == "linalg.generic" and any(
        inner.name == "arith.extsi" and str(inner.operands[0].type) == "i32" and str(inner.results[0].type) == "i64"
        for inner in nested_operations(op))
