"""Keep a strided slice of a computed value from being read in the dispatch that computes it.

Found by the fuzzer (seed 9562): ``torch.mul(b, b, out=x)`` with bool ``b`` and float ``x``,
then ``x[::2].logical_not_()``, gave ``[1, 1, 0]`` on iree-cpu (eager ``[1, 1, 1]``). Any
widening cast followed by a strided slice was wrong the same way on small 1-d tensors:
``b.float()[::2] + 1`` read ``b.float()[0:3]`` instead of elements 0, 2 and 4 (bool, int8,
uint8, int16, float16 to float32; int32 or float32 to int64 or float64; 5 and 16 elements;
33 or more, and 2-d tensors, were right). The reference backend is right.

IREE's dispatch formation clones a cheap widening producer (``arith.sitofp`` of an i8, an
``arith.extf``) into the dispatch that reads it, here through the ``tensor.extract_slice``
with stride 2 that ``x[::2]`` lowers to. The llvm-cpu code generator then vectorizes the
producer whole into a ``vector.transfer_write`` and ``OptimizeTensorInsertExtractSlicesPass``
folds the strided ``extract_slice`` of that write into a write of the first elements: the
stride is dropped (seen in ``--mlir-print-ir-after-all``; plain ``iree-compile`` and
``iree-run-module`` on a three-op torch function reproduce it, no flag of ours involved).

``fused_strided_slices`` finds, in IREE's ``flow`` phase, a strided ``tensor.extract_slice``
inside a dispatch of a value that dispatch computes; ``isolate_strided_slice_sources`` puts a
barrier (barriers.py) on the result of every linalg op a strided slice reads in the
``global-optimization`` phase, so the slice reads the value from memory with its stride, and
the graph is compiled again from there (compiler.py). A graph that still has one is refused.
``test/test_iree_correctness.py`` keeps the plain-IREE case, so an IREE that fixes the fold
shows up.
"""

from __future__ import annotations

import re

from .barriers import isolate

_EXECUTABLE = re.compile(r"^\s*flow\.executable\b")
_FUNC = re.compile(r"^\s*func\.func\s+@(?P<name>[\w.$-]+)\(")
_DEF = re.compile(r"^\s*(?P<results>%[\w.$-]+(?::\d+)?)\s*=\s*(?P<op>[\w.]+)\b(?P<rest>.*)$")
_SLICE = re.compile(r"^\s*%[\w.$-]+\s*=\s*tensor\.extract_slice\s+(?P<source>%[\w.$-]+)(?:#\d+)?"
                    r"\[[^\]]*\]\s*\[[^\]]*\]\s*\[(?P<strides>[^\]]*)\]")
#: Ops whose result is computed in the dispatch (not loaded from a binding), and the views of
#: such a result that keep it computed.
_COMPUTES = ("linalg.", "iree_linalg_ext.")
_VIEWS = ("tensor.extract_slice", "tensor.expand_shape", "tensor.collapse_shape", "tensor.cast")


def _strided(strides: str) -> bool:
    return any(s.strip() != "1" for s in strides.split(","))


def fused_strided_slices(flow_ir: str) -> list[str]:
    """``dispatch: slice line`` for each ``tensor.extract_slice`` with a stride other than 1,
    inside a ``flow.executable``, of a value its dispatch computes (IREE's ``flow`` phase)."""
    found: list[str] = []
    in_executable = False
    name = ""
    computed: set[str] = set()
    for line in flow_ir.splitlines():
        if _EXECUTABLE.match(line):
            in_executable, name, computed = True, "", set()
            continue
        if not in_executable:
            continue
        func = _FUNC.match(line)
        if func is not None:
            name, computed = func.group("name"), set()
            continue
        if line.lstrip().startswith("util.func"):
            in_executable = False
            continue
        s = _SLICE.match(line)
        if s is not None and s.group("source") in computed and _strided(s.group("strides")):
            found.append(f"{name}: {line.strip()[:300]}")
        d = _DEF.match(line)
        if d is None:
            continue
        op = d.group("op")
        base = d.group("results").split(":")[0]
        if op.startswith(_COMPUTES):
            computed.add(base)
        elif op in _VIEWS:
            source = re.match(r"\s*(%[\w.$-]+)", d.group("rest"))
            if source is not None and source.group(1) in computed:
                computed.add(base)
    return found


def isolate_strided_slice_sources(global_opt_ir: str) -> str | None:
    """``global_opt_ir`` with a barrier (barriers.py) on each used result of a linalg op that a
    strided ``tensor.extract_slice`` reads (directly or through reshapes), or None where there
    is none."""
    return isolate(global_opt_ir, results_of=_read_by_a_strided_slice)


def _read_by_a_strided_slice(op) -> bool:  # noqa: ANN001 - an iree.compiler.ir operation
    if not op.name.startswith(_COMPUTES):
        return False
    pending = list(op.results)
    while pending:
        value = pending.pop()
        for use in value.uses:
            user = use.owner
            if user.name == "tensor.extract_slice" and _has_a_stride(user):
                return True
            if user.name in _VIEWS:
                pending.extend(user.results)
    return False


def _has_a_stride(slice_op) -> bool:  # noqa: ANN001 - an iree.compiler.ir operation
    """Whether a ``tensor.extract_slice`` has a stride other than 1 (a dynamic one counts)."""
    strides = slice_op.attributes["static_strides"]
    return any(int(s) != 1 for s in strides)

