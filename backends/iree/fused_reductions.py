"""Keep ops that race in IREE's SPIR-V code out of one dispatch.

IREE 3.13's SPIR-V code generation gives many dispatches the
``BaseDistribute`` pipeline (a reduction over a dim that is not the innermost,
an innermost one of a size its subgroup reduction does not take, a
convolution on lavapipe). That pipeline tiles *each* op of the dispatch over
the workgroup's threads on its own, with the root op's thread tile sizes
applied by loop position, and puts no barrier between the ops. An op that
reads a value another op of the dispatch wrote then reads elements other
threads have not written yet:

* ``x - x.mean(1, keepdim=True)`` over ``[2, 4, 7, 9]`` was off by 2.06 in 376
  of 504 elements, ``softmax(x, 1)`` by 4e4 (on lavapipe): thread ``t`` writes
  reduced element ``t`` into workgroup memory, then the broadcasting
  consumer's loop, distributed over *its* dims, reads every reduced element
  (the IR after ``SPIRVTileAndDistributePass`` shows the two ``scf.for`` loops
  over one ``memref.alloc``; ``GpuEliminateBarriers`` has none to keep);
* a depthwise convolution whose channels are not a multiple of 8 came out
  with zeros: its accumulator's zero fill is distributed over (channel, column)
  and the convolution over (column, channel), so threads zeroed sums other
  threads had accumulated.

Element ``[i, j]`` is handled by one thread in both ops only where dim ``k``
of the value is loop ``k`` in both and the loops past its rank are
reductions (``_in_loop_order``); ``fused_reduction_races`` reads the
``executable-configurations`` phase and lists every in-dispatch read that
is not, where a reduction, a convolution or an accumulator's fill is
involved (innermost reductions take ``SubgroupReduce``, which synchronizes).
An elementwise op reading another one's value out of loop order (a computed
row broadcast over a matrix) is not listed: by the same rule it may race,
but it never gave a wrong value here, and listing it sent common integer
graphs op by op.
Such a graph is compiled again from its ``global-optimization`` phase with a
barrier (barriers.py) on each reduction's (or convolution's,
contraction's) results and on its inputs other linalg ops compute
(``isolate_reductions``): dispatch formation cannot fuse across a barrier,
so each of those values goes through memory between two dispatches, which
the runtime orders. Only graphs that race pay the second compile and the
extra dispatches. An accumulator's fill is not isolated (behind a barrier it
becomes a splat IREE writes into in place and merges with other splats:
wrong values, see miscompiles.py), so the depthwise case still races and is
refused: it runs op by op. ``test/test_iree_correctness.py`` keeps a test
that runs the racing form, so an IREE that fixes it shows up.
"""

from __future__ import annotations

import re

from .barriers import isolate

#: ``#alias = #iree_codegen.translation_info<pipeline = #iree_gpu.spirv_pipeline<Name> ...``
_ALIAS = re.compile(r"^(?P<alias>#[\w.$-]+)\s*=\s*#iree_codegen\.translation_info<pipeline\s*=\s*"
                    r"#iree_gpu\.spirv_pipeline<(?P<pipeline>\w+)>", re.M)
_INLINE = re.compile(r"translation_info\s*=\s*#iree_codegen\.translation_info<pipeline\s*=\s*"
                     r"#iree_gpu\.spirv_pipeline<(?P<pipeline>\w+)>")
_FUNC = re.compile(r"^\s*func\.func\s+@(?P<name>[\w.$-]+)\(.*?translation_info\s*=\s*(?P<info>#[\w.$-]+)?", re.M)
_LINALG_DEF = re.compile(r"^\s*(?P<result>%[\w.$-]+)(?::\d+)?\s*=\s*linalg\.(?P<op>[\w.]+)\b(?P<rest>.*)$")
_INS = re.compile(r"\bins\((?P<ins>[^:)]*)")
_OUTS = re.compile(r"\bouts\((?P<outs>[^:)]*)")
_VALUE = re.compile(r"%[\w.$-]+")
_MAP_TEXT = r"affine_map<\((?P<dims>[^)]*)\)\s*->\s*\((?P<exprs>[^)]*)\)>"
_MAP_ALIAS = re.compile(r"^(?P<alias>#[\w.$-]+)\s*=\s*" + _MAP_TEXT, re.M)
_MAPS = re.compile(r"indexing_maps\s*=\s*\[(?P<maps>[^\]]*)\]")
_MAP_ITEM = re.compile(r"#[\w.$-]+|" + _MAP_TEXT)
#: Pipelines that synchronize a reduction with its consumers (or hold contractions only).
_SYNCHRONIZED = ("SubgroupReduce", "MatmulPromoteVectorize", "CooperativeMatrixVectorize", "Winograd")


def fused_reduction_races(configured_ir: str) -> list[str]:
    """``dispatch (pipeline): reader line`` for each linalg op that reads (as input or as its
    accumulator) a value another linalg op of its dispatch wrote, where the two may run on other
    threads: in a dispatch whose SPIR-V pipeline does not synchronize ops, unless both reach the
    value in their loop order (``_in_loop_order``). That pipeline tiles every op of the dispatch
    with the root op's thread tile sizes by loop position, so element ``[i, j]`` is computed by
    the same thread in both ops only when dim ``k`` of the value is loop ``k`` in both, and the
    loops past the value's rank are reductions (not distributed)."""
    aliases = {m.group("alias"): m.group("pipeline") for m in _ALIAS.finditer(configured_ir)}
    maps = {m.group("alias"): _parse_map(m) for m in _MAP_ALIAS.finditer(configured_ir)}
    found: list[str] = []
    name, pipeline = "", ""
    written: dict[str, list[tuple[bool, bool]]] = {}  # result -> per result: (in loop order, by a reduction)
    for line in configured_ir.splitlines():
        func = _FUNC.match(line)
        if func is not None:
            inline = _INLINE.search(line)
            name = func.group("name")
            pipeline = inline.group("pipeline") if inline else aliases.get(func.group("info") or "", "")
            written = {}
            continue
        if not pipeline or pipeline in _SYNCHRONIZED:
            continue
        d = _LINALG_DEF.match(line)
        if d is None:
            continue
        rest = d.group("rest")
        ins, outs = _INS.search(rest), _OUTS.search(rest)
        operands = _VALUE.findall(ins.group("ins")) if ins else []
        accumulators = _VALUE.findall(outs.group("outs")) if outs else []
        op_maps = _op_maps(rest, maps)
        iterators = _iterators(rest)
        generic = d.group("op") == "generic"
        reader_reduces = not generic or "reduction" in iterators
        for i, v in enumerate(operands + accumulators):
            base, _, number = v.partition("#")
            if base not in written:
                continue
            k = int(number or 0)
            producer_ordered, producer_reduces = written[base][k] if k < len(written[base]) else (False, True)
            reader_ordered = (generic and i < len(op_maps) and _in_loop_order(op_maps[i], iterators)) or \
                d.group("op") == "fill"
            fill_into_accumulator = i >= len(operands) and d.group("op") != "fill"
            # Only where a reduction (or a convolution) is involved: an elementwise op reading another
            # one's value out of loop order (a broadcast of a computed row) is common (integer pow,
            # image preprocessing) and gave no wrong value; flagging it sent such graphs op by op.
            if not (producer_ordered and reader_ordered) and (producer_reduces or reader_reduces
                                                              or fill_into_accumulator):
                found.append(f"{name} ({pipeline}): {line.strip()[:300]}")
                break
        if generic:
            reduces = "reduction" in iterators
            written[d.group("result")] = [(_in_loop_order(m, iterators), reduces) for m in op_maps[len(operands):]]
        elif not op_maps:  # a named op (a fill): its loops are its result's dims, in order
            fill = d.group("op") == "fill"
            written[d.group("result")] = [(fill, not fill)] * max(1, len(accumulators))
    return found


def _iterators(rest: str) -> list[str]:
    """A generic's iterator types, in loop order ([] for a named op)."""
    if "iterator_types" not in rest:
        return []
    return re.findall(r'"(parallel|reduction)"', rest.split("iterator_types", 1)[1].split("]", 1)[0])


def _in_loop_order(m: tuple[list[str], list[str]] | None, iterators: list[str]) -> bool:
    """Whether an op with ``iterators`` reaches a value through map ``m`` with dim k as loop k, and
    only reduction loops past the value's rank."""
    if m is None:
        return False
    dims, exprs = m
    return exprs == dims[:len(exprs)] and all(it == "reduction" for it in iterators[len(exprs):])


def _parse_map(m: re.Match) -> tuple[list[str], list[str]]:
    """(dims, result expressions) of an ``affine_map`` match."""
    return ([x.strip() for x in m.group("dims").split(",") if x.strip()],
            [x.strip() for x in m.group("exprs").split(",") if x.strip()])


def _op_maps(rest: str, aliases: dict[str, tuple[list[str], list[str]]]) -> list:
    """An op's indexing maps as (dims, results), None for one not understood; [] for a named op."""
    m = _MAPS.search(rest)
    if m is None:
        return []
    out = []
    for item in _MAP_ITEM.finditer(m.group("maps")):
        out.append(aliases.get(item.group(0)) if item.group(0).startswith("#") else _parse_map(item))
    return out


def isolate_reductions(global_opt_ir: str) -> str | None:
    """``global_opt_ir`` (IREE's ``global-optimization`` phase) with a barrier (barriers.py)
    on every used result of a reduction (``_reduces``) and on each of its inputs another linalg op
    computes, or None where there is none. Its inputs: fills too (a kernel of ones), not its
    accumulators (a fill behind a barrier there becomes a splat IREE writes into in place and merges
    with others, see miscompiles.py: wrong values). Softmax is expanded first so its reductions show."""
    return isolate(global_opt_ir, results_of=_reduces, inputs_of=_reduces, expand_softmax=True)


def _reduces(op) -> bool:  # noqa: ANN001 - an iree.compiler.ir operation
    """A ``linalg.generic`` with a reduction loop, or a named linalg op other than a fill
    (convolutions, contractions, pooling: each has reduction loops)."""
    if not op.name.startswith("linalg.") or op.name in ("linalg.fill", "linalg.yield", "linalg.index"):
        return False
    return op.name != "linalg.generic" or "reduction" in str(op.attributes["iterator_types"])
