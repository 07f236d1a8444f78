"""Refuse flow-level IR that IREE 3.13 is known to miscompile into wrong values.

A reduction whose combined value does not depend on its input. IREE folds
``arith.cmpi sge %x, %x`` to ``true``, ``arith.muli %x, 0`` to ``0`` and so
on, then folds the resulting constant (a ``linalg.fill``, or a runtime scalar
broadcast) into the consuming reduction's body, which becomes
``%out + c`` with no use of its input. The linalg vectorizer then treats the
loop-invariant ``c`` as a 0-d value and combines it once instead of once per
iteration: ``(x >= x).sum()`` over 3 integers gave 1, ``(x * 0 + 2).sum()``
over 17 gave 10, on llvm-cpu and Vulkan alike (a reduction written directly as
``linalg.generic`` with body ``addi %out, %c2`` over 17 elements gives 10, so
the fold is not needed to trigger it, only to reach it from PyTorch).

A splat literal is reduced correctly (``rewrites.py`` turns constant fills
into literals for another miscompile), so only constants IREE itself derives
from data-dependent code reach this (a sum of a tensor filled with a value read at run time
never does: ``lowering/constant_sums.py`` sums one element times the count). The compile writes IREE's ``flow``-phase
IR, every ``linalg.generic`` with a reduction loop is checked, and a body
whose yielded values use no input (nor ``linalg.index``) fails the compile
with a ``CompileError`` (``--iree-opt-const-eval=false``, see config.py, keeps
such code visible instead of evaluated at compile time). The lazy runtime
then runs that graph op by op instead of returning a wrong number; folding
the identities (``x >= x``, ``x * 0`` on integers) before IREE sees them
would keep such graphs compiled, and is not done yet. ``test/test_iree_correctness.py`` keeps a test
that compiles the pattern, so an IREE that fixes it shows up.

A floating remainder on a SPIR-V target. Vulkan requires of ``OpFRem`` only
the precision of ``x - y * trunc(x / y)`` and lavapipe computes exactly that:
``fmod(5.5, 0.1)`` is 0.0 there, eager 0.0999999 (the result is off by a
multiple of y wherever x / y rounds). fmod, remainder and floating floor
division all reach ``arith.remf``, so a Vulkan graph holding one is refused and
runs op by op on the CPU, where it is exact.

Two sorts writing in place into one value. ``iree_linalg_ext.sort`` sorts its
operands in place: its dispatch's results are tied to the values it sorts and
to an index tensor (an iota), and two sorts of one shape along one dim share
that iota (CSE), as ``sort(y)`` and ``sort(y, descending=True)`` share ``y``.
IREE 3.13 then inserts the copies each in-place write needs
(``MaterializeCopyOnWrite``), its canonicalizer turns the copy of a dispatch's
result into a second run of that dispatch, and the next CSE merges the two
runs back: both sorts write into one buffer and the second one reads the
first one's output. ``topk(x, k, largest=False)`` next to ``topk(x, k)`` gave
the largest values (fuzz seed 601), and the second of any two ``argsort``s of
equal shapes got the first one's permutation. A flow-phase graph with a value
tied to two dispatches of which one sorts is refused.

An in-place write into a shared constant: the same fault as the sorts', from
any in-place-capable write. IREE computes a value it can derive without
tensor inputs (``fmin(z, z)`` of zeros, ``x == x`` folded to true, a tensor
filled with a number the graph reads from a tensor) by a dispatch with no
tensor operands; a ``select_scatter`` or a fill through a slice then writes
into it in place (``flow.tensor.update`` or a tied dispatch result) while
another result or dispatch still uses the original. The copy the write needs
is turned into a second run of that dispatch (after ``ElideAsyncCopies``)
and CSE merges the two runs back into one buffer: the results
came back swapped (fuzz seed 1101) or the write showed in the other result
(seed 1205 p366: ``v2 = eq(v0, v0); v3 = fmin(v2, v2); v3[1] = 0`` set half of
``v2`` False; seed 1700 p317, ``v0 = full(True); v4 = fmax(v0, v0);
v4[::2].logical_not_()`` changed ``v0``, whose fill reads its value from a
lifted scalar). Such a graph is refused (``writes_into_a_shared_constant``);
a write into a constant nothing else uses is right and compiles. A
``flow.tensor.splat`` written in place while another op reads it is refused
too (fuzz seed 4603 p356: ``v1 = full(2); v5 = v1 | v1`` folded to ``v1``,
then ``v1[1].fill_(0)`` reached ``v5``). Splats
count too where two or more of one number into as many elements exist: the
stream phase merges such ``flow.tensor.splat``s (CSE), so a write into one
lands in another one's result (fuzz seed 0 p245:
``v1 = full((2, 3), 0); v3 = where(m, v1, v1); v1.diagonal().logical_not_()``
with a ``fmin`` and a ``prod`` of ``v1`` after it gave ``v3`` the new
diagonal). Only a class of which one splat is read is refused: splats that
are only written in place (a pooling backward's zeros) and one splat
written twice (sorts' index columns) compile right. A 64-bit splat constant (``dense<1> :
tensor<2x3x4xi64>``, a folded ``maximum(v3, v3)`` returned) joins the splats of its number: HAL
fills take patterns of at most 4 bytes, so IREE makes a 64-bit splat whose 8 bytes are not a
4-byte pattern twice (1, 2, 1.0; not 0 or -1) with a ``__builtin_splat_i64`` dispatch, CSE merges
two of one number and size, and one buffer is never filled (iree-vulkan fuzz seed 4403:
``w = maximum(v3, v3)`` of ``v3 = ones ** 0`` came back zeros after ``v3[-1] = 5``, in float64
and int64 only). For the same reason two values written in place into such splats must not be
alive at once (p486: the copy each write needs is such a dispatch too); writes in turn, read
before the next one starts (sorts' index columns), are right. The same write into a dispatch that reads a
tensor keeps its copy; the order of that copy against the write is
config.py's ``--iree-stream-partitioning-favor=debug``.

A barrier's alias. ``util.optimization_barrier`` returns its operand's buffer,
yet IREE 3.13's copy-on-write takes the result for a value of its own: a write
in place into the operand (or into another barrier's result on the same
value) while the result is still read reaches that reader. The rewrites put
values behind barriers (``rewrites.materialize_self_updates``,
``hide_zero_literals``, donation) and IREE then merges equal ops under them:
``y = x[:-1].clone(); z = x[:-1].clone(); x[1:] = y; z[0] = 100`` gave
``y[0] == 100``. ``rewrites.merge_duplicates`` merges equal ops first; a
graph that still writes into such a shared buffer is refused
(``writes_through_a_barrier_alias``). On lavapipe two equal zero literals,
each behind its own barrier (``rewrites.hide_zero_literals``), are one
buffer too: a write into one reached the other (stateful fuzz seed 9301);
merged first, they are one literal behind one barrier.

A floating multiplication or division with a constant zero on a SPIR-V
target. lavapipe's shader compiler (gallivm) shortcuts a constant zero
operand whatever the shader declares: ``x * 0.0`` and ``0.0 / x`` are 0
(``nan * 0`` gave 0, ``0 / -2.5`` gave +0.0: fuzz seed 1401, from
``x * t.min().item()``, ``x.mul_(False)``, ``0 / x``, ``sub(alpha=0)``) and
``x / 0.0`` is undefined, garbage (``t / torch.zeros(3)`` gave other values'
bits, ``t / (ones - 1)`` gave ``t``: fuzz seed 1400). The same ops with a zero
the data hold are right. The lowering writes a division by a literal zero
as ``x * inf`` (the same number for every x), which stays compiled; any other
zero operand, the user's or one IREE folds, reaches here and the graph is
refused (it runs op by op): a zero divisor on every Vulkan target (SPIR-V
leaves that division undefined), a zero factor or numerator on lavapipe only
(``--iree-vulkan-target=llvmpipe``; other drivers keep IEEE semantics under
the float-controls layer). A contraction (``linalg.matmul``, ``batch_matmul``,
a convolution) with a zero fill as an input multiplies by that constant just
the same: ``F.linear(torch.zeros(2, 3), w)`` gave 0 where ``w`` holds a NaN
(fuzz seed 1402 p7). On lavapipe the zeros tensors of a graph
(``torch.zeros``, Adam's fresh moments, an RNN's initial state) therefore go
behind ``util.optimization_barrier`` before iree-compile sees them
(``rewrites.hide_zero_literals``): IREE cannot fold them, the shaders read
them from a buffer, and those graphs compile. What is left here are zeros
IREE makes itself (``x * 0`` of a literal scalar, ``sub(alpha=0)``).
An addition of a constant +0.0 is shortcut the same way: gallivm returns
``x`` where IEEE gives +0.0 for ``x = -0.0`` (``x + torch.zeros(3)``,
``x.add_(zeros_bool)``, ``sub(x, zeros, alpha=0)``: fuzz seeds 4302 p696 and
4303 p75), and ``0.0 - x`` is ``-x`` (-0.0 for ``x = +0.0``). Those graphs are
refused on lavapipe too. The shortcuts that are exact stay compiled: ``x + -0.0``
and ``x - 0.0`` are ``x``, ``-0.0 - x`` is ``-x``, and ``x + 0.0`` is ``x`` for an
``x`` that is never -0.0 (an ``exp``, ``abs``, square or converted integer: a
one-element sum in ``softmax`` folds to ``exp(x) + 0.0``). A literal ``x + 0.0``
or ``0.0 - x`` in the program, and a floating sum or mean (of -0.0 values, which
eager makes +0.0), get ``select(r == 0, +0.0, r)`` from the lowering
(``positive_zero_sums``), which is recognized here and compiles.
"""

from __future__ import annotations

import re
import struct
from collections import Counter

#: One linalg.generic as IREE prints it at the flow phase (no lowering configs yet).
_GENERIC = re.compile(
    r"linalg\.generic\s*\{(?P<attrs>[^{}]*?)\}\s*(?:ins\((?P<ins>[^)]*)\)\s*)?outs\((?P<outs>[^)]*)\)"
    r"(?:\s*attrs\s*=\s*\{[^{}]*\})?\s*\{\s*\^bb0\((?P<args>[^)]*)\):(?P<body>.*?)linalg\.yield(?P<yield>[^\n]*)",
    re.S,
)
_VALUE = re.compile(r"%[\w.$-]+")
_DEF = re.compile(r"^\s*(?P<results>%[^=]+?)\s*=\s*(?P<rhs>.*)$")
#: A location, ``loc("file":3:0)`` or nested (``loc(callsite(... at ...))``), up to three levels deep.
_LOC = re.compile(r"\s*loc\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\)")


#: Combiners for which once is as good as n >= 1 times: ``c | c | c == c``, ``max(c, c) == c``.
_IDEMPOTENT = re.compile(r"^arith\.(?:ori|andi|maxsi|minsi|maxui|minui|maximumf|minimumf|maxnumf|minnumf)\s")
#: A tensor type with a dim of size 0: its loops may run zero times.
_EMPTY_DIM = re.compile(r"tensor<(?:[\d?]+x)*0x")


def invariant_reductions(flow_ir: str) -> list[str]:
    """The bodies (as text) of reductions in ``flow_ir`` whose result ignores their input.

    A yielded value that ignores the input is harmless where combining it once gives what
    combining it once per element does: a plain overwrite, or an idempotent combiner with its own
    accumulator (``any(zeros < 0)``, an embedding index guard over ``torch.zeros`` token types,
    became ``ori %c, %out``: MobileBERT's training step was refused for it), unless a loop may run
    zero times."""
    found = []
    for m in _GENERIC.finditer(_LOC.sub("", flow_ir)):
        if '"reduction"' not in m.group("attrs"):
            continue
        args = [a.split(":")[0].strip() for a in m.group("args").split(",") if a.strip()]
        n_outs = len(_VALUE.findall(m.group("outs").split(":")[0]))
        inputs = set(args[: len(args) - n_outs])
        outs = args[len(args) - n_outs:]
        # No inputs at all (a folded producer fused into the reduction, as without hoisting
        # ``(x == x).sum()`` became): every yielded value is then invariant unless it uses
        # ``linalg.index``.
        variant = set(inputs)
        accumulated = set(outs)  # values that read an accumulator
        defs: dict[str, str] = {}
        for line in m.group("body").splitlines():
            d = _DEF.match(line)
            if d is None:
                continue
            rhs = d.group("rhs")
            operands = _VALUE.findall(rhs.split(":")[0])
            results = _VALUE.findall(d.group("results"))
            defs.update(dict.fromkeys(results, rhs))
            if "linalg.index" in rhs or any(v in variant for v in operands):
                variant.update(results)
            if any(v in accumulated for v in operands):
                accumulated.update(results)
        yielded = _VALUE.findall(m.group("yield").split(":")[0])
        if not yielded or any(v in variant for v in yielded) or all(v in outs for v in yielded):
            continue
        if _EMPTY_DIM.search(m.group(0).split("^bb0")[0]) is None and all(
                y in variant or y == out or y not in accumulated
                or (_IDEMPOTENT.match(defs.get(y, "")) is not None
                    and not (set(_VALUE.findall(defs[y].split(":")[0])) - {out}) & accumulated)
                for y, out in zip(yielded, outs)):
            continue
        found.append(m.group(0))
    return found


def inexact_on_spirv(flow_ir: str) -> list[str]:
    """The lines of ``flow_ir`` whose floating remainder SPIR-V computes inexactly."""
    return [line.strip() for line in _LOC.sub("", flow_ir).splitlines() if "arith.remf" in line]


#: A floating zero constant, scalar or splat: ``%cst = arith.constant 0.000000e+00 : f32``
#: (``sign`` is ``-`` for -0.0).
_ZERO = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.constant\s+(?:dense<)?(?P<sign>-?)0\.0+e\+00>?\s*:", re.M)
#: The float ops lavapipe shortcuts when an operand is a constant zero: ``x * 0`` (0), ``x / 0``
#: (undefined: garbage), ``0 / x`` (0: ``0 / -2`` lost its sign, ``0 / 0`` its NaN), ``x + 0``
#: (``x``: -0.0 kept) and ``0 - x`` (``-x``: -0.0 for +0.0).
_FLOAT_OP = re.compile(r"arith\.(?P<op>mulf|divf|addf|subf)\s+(?P<lhs>%[\w.$-]+)\s*,\s*(?P<rhs>%[\w.$-]+)")


#: A fill with a floating constant: ``%3 = linalg.fill ins(%cst : f32) outs(%2 : ...)``.
_ZERO_FILL = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*linalg\.fill\s+ins\((?P<value>%[\w.$-]+)\s*:", re.M)
#: A named structured op (``linalg.matmul``, ``batch_matmul``, ``conv_*``...) and its inputs: a
#: contraction multiplies them, so a zero input is a multiplication by a constant zero.
_NAMED_OP = re.compile(r"=\s*linalg\.(?!generic\b|fill\b|yield\b|index\b)[\w.]+\b.*?\bins\((?P<ins>[^:)]*)")


def _shortcut_is_wrong(op: str, lhs: str | None, rhs: str | None, lavapipe: bool) -> bool:
    """Whether a driver's shortcut of ``lhs op rhs`` differs from IEEE (``None``: not a constant
    zero; ``""``: +0.0; ``"-"``: -0.0). Only a zero divisor is wrong off lavapipe."""
    if op == "divf" and rhs is not None:
        return True
    if not lavapipe:
        return False
    if op in ("mulf", "divf"):
        return lhs is not None or rhs is not None
    if op == "addf":
        return lhs == "" or rhs == ""
    return lhs == "" or rhs == "-"  # subf: 0 - x is -x, x - (-0) is x


#: Values that are never -0.0, so ``x + 0.0`` is ``x`` for them: ``exp``, ``exp2``, ``abs``,
#: ``x * x`` (a one-element sum inside ``softmax``, which IREE folds to ``exp(x) + 0.0``), an
#: integer converted (``zeros(3) + t.item()``).
_NEVER_MINUS_ZERO = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*(?:math\.(?P<fn>exp|exp2|absf)\s+(?P<x>%[\w.$-]+)"
                               r"|arith\.(?:sitofp|uitofp)\s"
                               r"|arith\.(?P<op>mulf)\s+(?P<a>%[\w.$-]+)\s*,\s*(?P<b>%[\w.$-]+))")
#: ``%c = arith.cmpf oeq, %a, %b`` and ``%r = arith.select %c, %t, %f``.
_CMP_EQ = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.cmpf\s+oeq\s*,\s*(?P<a>%[\w.$-]+)\s*,\s*(?P<b>%[\w.$-]+)")
_EXTF = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.extf\s+(?P<x>%[\w.$-]+)")
_SELECT = re.compile(r"arith\.select\s+(?P<c>%[\w.$-]+)\s*,\s*(?P<t>%[\w.$-]+)\s*,\s*(?P<f>%[\w.$-]+)")


def _zero_made_positive(line: str, lines: list[str], signs: dict[str, str]) -> bool:
    """Whether the result of the addition or subtraction on ``line`` is only read by the
    lowering's guard ``select(r == 0, +0.0, r)`` (``lowering/positive_zero_sums.py``), which
    gives IEEE's +0.0 whatever sign lavapipe's shortcut left."""
    d = _DEF.match(line)
    if d is None:
        return False
    result = d.group("results").strip()
    at = next(i for i, other in enumerate(lines) if other is line)
    start = next((i for i in range(at, -1, -1) if "^bb0" in lines[i]), at)
    end = next((i for i in range(at, len(lines)) if "linalg.yield" in lines[i]), len(lines) - 1)
    block = lines[start:end + 1]  # the payload region: names repeat outside it

    def uses(name: str) -> list[str]:
        return [other for other in block if not other.lstrip().startswith(name + " ")
                and re.search(re.escape(name) + r"\b", other)]

    # The comparison may read the value widened (``arith.extf``: torch-mlir compares with the
    # literal in float64), a copy read by nothing else.
    widened = {e["name"]: uses(e["name"]) for u in uses(result) if (e := _EXTF.match(u)) is not None}
    compared = {result, *widened}
    compares = {m["name"] for u in block if (m := _CMP_EQ.match(u)) is not None
                and ({m["a"], m["b"]} & compared) and ({m["a"], m["b"]} - compared) <= set(signs)}
    if not compares or any(any((c := _CMP_EQ.match(u)) is None or c["name"] not in compares for u in read)
                           for read in widened.values()):
        return False
    for use in uses(result):
        if (c := _CMP_EQ.match(use)) is not None and c["name"] in compares or _EXTF.match(use) is not None:
            continue
        s = _SELECT.search(use)
        if s is None or s["c"] not in compares or s["f"] != result or signs.get(s["t"]) != "":
            return False
    return True


#: A comparison of a value with itself that is false whatever the value (NaN included), and an
#: integer-to-float conversion: SPIR-V code generation folds the comparison, so the converted
#: value is a constant +0.0 by the time lavapipe sees ``x * float(x < x)`` (fuzz seed 4601:
#: ``torch.mul(v0 < v0, v0, out=v0)`` lost the sign of ``-2.5 * 0``).
_SELF_FALSE = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.cmp(?:f\s+(?:olt|ogt|one)|i\s+(?:slt|sgt|ult|ugt|ne))"
                         r"\s*,\s*(?P<a>%[\w.$-]+)\s*,\s*(?P<b>%[\w.$-]+)\s*:", re.M)
_TO_FLOAT = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.(?:uitofp|sitofp)\s+(?P<x>%[\w.$-]+)\s*:", re.M)


def _derived_zeros(func: str) -> dict[str, str]:
    """The +0.0 values of ``func`` that are a conversion of an always-false self-comparison."""
    false = {m["name"] for m in _SELF_FALSE.finditer(func) if m["a"] == m["b"]}
    return {m["name"]: "" for m in _TO_FLOAT.finditer(func) if m["x"] in false}


def zero_operands_on_spirv(flow_ir: str, lavapipe: bool = True) -> list[str]:
    """The lines of ``flow_ir`` that divide by a constant floating zero (and on ``lavapipe``
    multiply with one, or divide one), or by a zero splat fed to a ``linalg.generic`` (function
    by function: SSA names repeat across dispatches). A division by zero is undefined in SPIR-V
    on every driver; the other shortcuts are lavapipe's."""
    found = []
    for func in _LOC.sub("", flow_ir).split("func.func ")[1:]:
        # Each zero's sign: an addition of -0.0 or a subtraction of +0.0 is exact even shortcut.
        signs = {m.group("name"): m.group("sign") for m in _ZERO.finditer(func)} | _derived_zeros(func)
        if not signs:
            continue
        signs |= {m.group("name"): signs[m.group("value")] for m in _ZERO_FILL.finditer(func)
                  if m.group("value") in signs}
        for m in _GENERIC.finditer(func):
            ins = _VALUE.findall((m.group("ins") or "").split(":")[0])
            args = _VALUE.findall(m.group("args"))
            signs |= {arg: signs[value] for value, arg in zip(ins, args) if value in signs}
        zeros = set(signs)
        lines = func.splitlines()
        never_minus_zero = {d["name"] for line in lines if (d := _NEVER_MINUS_ZERO.match(line)) is not None
                            and (d["op"] != "mulf" or d["a"] == d["b"])}
        found += [line.strip() for line in lines
                  if (f := _FLOAT_OP.search(line)) is not None
                  and _shortcut_is_wrong(f["op"], signs.get(f["lhs"]), signs.get(f["rhs"]), lavapipe)
                  and not (f["op"] == "addf" and {f["lhs"], f["rhs"]} - set(signs) <= never_minus_zero)
                  and not (f["op"] in ("addf", "subf") and _zero_made_positive(line, lines, signs))]
        if lavapipe:
            found += [line.strip() for line in func.splitlines()
                      if (n := _NAMED_OP.search(line)) is not None
                      and any(v in zeros for v in _VALUE.findall(n.group("ins")))]
    return found


#: A dispatch at the flow phase: its executable entry, operands and results (tied ones are ``%names``).
_DISPATCH = re.compile(r"flow\.dispatch @(?P<entry>[^(\s\[]+)(?:\[[^\]]*\])?\((?P<operands>[^)]*)\)\s*:\s*\(.*?\)\s*->\s*(?P<results>.*)$")


def shared_in_place_sorts(flow_ir: str) -> list[str]:
    """The dispatch lines of ``flow_ir`` that write in place into a value another dispatch also
    writes into, where one of them sorts (see the module docstring)."""
    tied: dict[str, list[str]] = {}
    for line in _LOC.sub("", flow_ir).splitlines():
        m = _DISPATCH.search(line)
        if m is None:
            continue
        results = m.group("results").split("{")[0]  # attributes after the types are not results
        for value in set(_VALUE.findall(results)):
            tied.setdefault(value, []).append(line.strip())
    for lines in tied.values():
        if len(lines) > 1 and any("sort" in _DISPATCH.search(line).group("entry") for line in lines):
            return lines
    return []


#: A dispatch with no tensor operands: a value IREE computes from nothing or from scalars only (a
#: fill, an iota, a folded comparison, a broadcast of a number read from a tensor). Its copy is
#: what IREE recomputes and merges back.
_SCALAR_DISPATCH = re.compile(r"^\s*(?P<name>%[\w.$-]+)(?::\d+)?\s*=\s*flow\.dispatch @[^(\s\[]+(?:\[[^\]]*\])?\([^)]*\)\s*:\s*\((?P<types>[^)]*)\)")


def _constant_dispatch(line: str) -> str | None:
    """The result name of a dispatch in ``line`` that reads no tensor, or None."""
    m = _SCALAR_DISPATCH.match(line)
    return m["name"] if m is not None and "tensor<" not in m["types"] else None


_RESHAPE = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*flow\.tensor\.reshape\s+(?P<source>%[\w.$-]+)")
_UPDATE = re.compile(r"flow\.tensor\.update\s+%[\w.$-]+\s*,\s*(?P<target>%[\w.$-]+)\[")


def writes_into_a_shared_constant(flow_ir: str) -> list[str]:
    """The lines of ``flow_ir`` that write in place into a value a dispatch with no tensor
    operands computes while that value has another use (see the module docstring)."""
    found = []
    for func in re.split(r"\b(?:util|func)\.func ", _LOC.sub("", flow_ir))[1:]:  # SSA names repeat across functions
        found += _shared_constant_writes([line.strip() for line in func.splitlines()])
    return found


#: ``%4 = flow.tensor.splat %3 : tensor<2x3xi64>``: a tensor of one number.
_SPLAT = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*flow\.tensor\.splat\s+(?P<value>%[\w.$-]+)\s*:\s*"
                    r"tensor<(?P<type>[^>]*)>")


#: A scalar constant, ``%cst = arith.constant 1.000000e+00 : f64``, and a splat tensor constant,
#: ``%cst_0 = arith.constant dense<1> : tensor<2x3x4xi64>``.
_SCALAR_CONSTANT = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.constant\s+(?P<value>[^:\s]+)\s*:\s*(?P<type>\w+)\s*$")
_DENSE_SPLAT = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.constant\s+dense<(?P<value>[^\[\]<>\"]+)>\s*:\s*"
                          r"tensor<(?P<type>[^>]*)>\s*$")
#: Element types IREE splats through its ``__builtin_splat_i64`` dispatch (HAL fills take at
#: most 4-byte patterns).
_WIDE_ELEMENTS = ("i64", "si64", "ui64", "f64")
_WIDE_CLASS = " (64-bit)"


def _needs_splat_dispatch(value: str, element: str) -> bool:
    """Whether IREE fills a 64-bit splat of ``value`` (a literal's text, or an SSA name: not
    known) with its ``__builtin_splat_i64`` dispatch: only when the 8-byte pattern is not a
    4-byte one repeated (0 and -1 are native HAL fills; 1, 2 and 1.0 are dispatches)."""
    try:
        if element == "f64":
            bits = struct.unpack("<Q", struct.pack("<d", float(value)))[0] if not value.startswith("0x") \
                else int(value, 16)
        else:
            bits = int(value, 0) & (2 ** 64 - 1)
    except ValueError:
        return True  # a value computed at run time
    return bits >> 32 != bits & 0xFFFFFFFF


def _splat_class(line: str, literals: dict[str, str]) -> tuple[str, str] | None:
    """(result name, the splats it is merged with) for a ``flow.tensor.splat`` line, or None.
    Splats of one number into as many elements of one type are one buffer in the stream phase
    (CSE), whatever their shapes. A 64-bit one is keyed by its number (``literals``: scalar
    constants' text), and a splat tensor constant of 64-bit elements (``dense<1>``) joins it:
    both become ``__builtin_splat_i64`` dispatches, which CSE merges."""
    dense = False
    if (m := _SPLAT.match(line)) is None:
        if (m := _DENSE_SPLAT.match(line)) is None:
            return None
        dense = True
    *dims, element = m["type"].split("x")
    value = m["value"] if dense else literals.get(m["value"], m["value"])
    wide = element in _WIDE_ELEMENTS and _needs_splat_dispatch(value, element)
    if dense and not wide:
        return None  # a narrow constant is filled on its own (a HAL fill), not merged
    if not wide:
        value = m["value"]
    tail = _WIDE_CLASS if wide else ""
    count = 1
    for d in dims:
        if not d.isdigit():
            return m["name"], f"splat {value} {m['type']} {m['name']}{tail}"  # dynamic: its own class
        count *= int(d)
    return m["name"], f"splat {value} {count} {element}{tail}"


def _shared_constant_writes(lines: list[str]) -> list[str]:
    root: dict[str, str] = {}
    literals = {m["name"]: m["value"] for line in lines if (m := _SCALAR_CONSTANT.match(line)) is not None}
    for line in lines:
        if (name := _constant_dispatch(line)) is not None:
            root[name] = name
        elif (splat := _splat_class(line, literals)) is not None:
            # Merged splats (the stream phase makes them one buffer), and a lone splat too: an
            # in-place update of one that is also read gave the reader the written values
            # (fuzz seed 4603 p356: ``v5 = v1 | v1`` folded to ``v1``, then ``v1[1].fill_(0)``).
            root[splat[0]] = splat[1]
        elif (m := _RESHAPE.match(line)) is not None and m["source"].split("#")[0] in root:
            root[m["name"]] = root[m["source"].split("#")[0]]
    if not root:
        return []
    uses: Counter[str] = Counter()
    reads: Counter[str] = Counter()  # uses by a line that does not write the value it uses
    writes: list[tuple[str, str]] = []
    for line in lines:
        d = _DEF.match(line)
        rhs = d["rhs"] if d is not None else line
        if (_RESHAPE.match(line) is not None or _constant_dispatch(line) is not None or _SPLAT.match(line)
                or _DENSE_SPLAT.match(line)):
            continue  # an alias or the constant itself, not a use
        targets = []
        if (u := _UPDATE.search(rhs)) is not None:
            targets.append(u["target"])
        if (m := _DISPATCH.search(line)) is not None:
            targets += _VALUE.findall(m["results"].split("{")[0])
        values = {v for v in _VALUE.findall(rhs) if v in root}
        uses.update({root[v] for v in values})
        reads.update({root[v] for v in values if v not in targets})
        writes += [(root[t], line) for t in targets if t in root]
    # A dispatch's constant: written while used elsewhere. Merged splats: written while one of
    # them is read (splats only written, each once, as a pooling backward's zeros, compile right),
    # and 64-bit splats also when two values written into them are alive at once.
    return [line for r, line in writes if uses[r] > 1 and (not r.startswith("splat ") or reads[r] > 0)] \
        + _overlapping_wide_writes(lines, root)


def _overlapping_wide_writes(lines: list[str], root: dict[str, str]) -> list[str]:
    """The in-place writes into a 64-bit splat made while a value written earlier into a splat of
    its class (one number, as many elements) is still used. Each write's copy is a second
    ``__builtin_splat_i64`` dispatch that CSE merges with the first, so both values live in one
    buffer (fuzz seed 4403 p486: ``v2 = minimum(v0, v0)`` of a filled int64 ``v0``, then writes
    into both). Writes that follow each other (a sort's index columns, filled by a chain of
    copies and read before the next sort's chain starts) share that buffer harmlessly."""
    chain: dict[str, tuple[str, int]] = {}  # value -> (class, line of the chain's first write)
    end: dict[tuple[str, int], int] = {}  # chain -> last line that uses one of its values
    for i, line in enumerate(lines):
        if (m := _RESHAPE.match(line)) is not None and m["source"].split("#")[0] in chain:
            chain[m["name"]] = chain[m["source"].split("#")[0]]
            continue
        d = _DEF.match(line)
        rhs = d["rhs"] if d is not None else line
        for v in _VALUE.findall(rhs):
            if v in chain:
                end[chain[v]] = i
        targets = [u["target"]] if (u := _UPDATE.search(rhs)) is not None else []
        if (m := _DISPATCH.search(line)) is not None:
            targets += _VALUE.findall(m["results"].split("{")[0])
        for t in targets:
            if t in chain:
                key = chain[t]
            elif root.get(t, "").endswith(_WIDE_CLASS):
                key = (root[t], i)
                end[key] = i
            else:
                continue
            if d is not None:
                chain.update({r: key for r in _VALUE.findall(d["results"])})
    return [lines[start] for cls, start in end
            if any(other == cls and first < start < last for (other, first), last in end.items())]


#: ``%3 = util.optimization_barrier %2 : tensor<5xf32>`` (and ``%3:2 = ... %a, %b : ...``).
_BARRIER = re.compile(r"^\s*(?P<results>%[^=]+?)\s*=\s*util\.optimization_barrier\s+(?P<operands>[^:]*):")


def writes_through_a_barrier_alias(flow_ir: str) -> list[str]:
    """The lines of ``flow_ir`` that write in place into a value whose buffer a
    ``util.optimization_barrier`` shares with another value still in use (see the module
    docstring, a barrier's alias)."""
    found = []
    for func in re.split(r"\b(?:util|func)\.func ", _LOC.sub("", flow_ir))[1:]:
        found += _barrier_alias_writes([line.strip() for line in func.splitlines()])
    return found


def _barrier_alias_writes(lines: list[str]) -> list[str]:
    parent: dict[str, str] = {}

    def find(v: str) -> str:
        while parent.get(v, v) != v:
            v = parent[v]
        return v

    for line in lines:
        if (m := _BARRIER.match(line)) is not None:
            # A barrier's results are its operands' buffers; a multi-result barrier's results
            # (``%3#0``) all go by ``%3``, which joins every operand: conservative.
            for operand in _VALUE.findall(m["operands"]):
                for result in _VALUE.findall(m["results"].split(":")[0]):
                    parent.setdefault(operand, operand)
                    parent[find(result)] = find(operand)
        elif (m := _RESHAPE.match(line)) is not None and m["source"].split("#")[0] in parent:
            parent[m["name"]] = find(m["source"].split("#")[0])
    if not parent:
        return []
    last_read: dict[str, int] = {}
    writes: list[tuple[str, int]] = []
    for i, line in enumerate(lines):
        d = _DEF.match(line)
        rhs = d["rhs"] if d is not None else line
        targets = [u["target"]] if (u := _UPDATE.search(rhs)) is not None else []
        if (m := _DISPATCH.search(line)) is not None:
            targets += _VALUE.findall(m["results"].split("{")[0])
        last_read.update({v: i for v in _VALUE.findall(rhs) if v in parent and v not in targets})
        writes += [(t, i) for t in targets if t in parent]
    # A write is safe when the value written is itself read later (IREE copies it first), or
    # when nothing sharing its buffer is read after it: reads before it run first (config.py's
    # ``--iree-stream-partitioning-favor=debug`` keeps the program's order), as a scatter into
    # its own copy of a slice of a state then updated in place does.
    return [lines[i] for t, i in writes if last_read.get(t, -1) <= i
            and any(v != t and find(v) == find(t) and at > i for v, at in last_read.items())]


#: A tensor constant: ``%cst = arith.constant dense<0x7FC00000> : tensor<2x3xf32>``.
_TENSOR_CONSTANT = re.compile(r"^\s*(?P<name>%[\w.$-]+)\s*=\s*arith\.constant\s+(?P<value>.*?)\s*:\s*tensor<", re.M)
_SOFTMAX_INPUT = re.compile(r"linalg\.softmax\b[^\n]*?\bins\((?P<input>%[\w.$-]+)")


def softmax_of_a_special_constant(flow_ir: str) -> list[str]:
    """The ``linalg.softmax`` lines of ``flow_ir`` whose input is a constant IREE prints in hex
    (NaN, an infinity, or elements as a blob). ``softmax`` of a NaN splat gave 0.0, not NaN, on
    every IREE target (fuzz seed 4301 p764: ``softmax(clamp(mask, nan, False), 2)``), while the
    same values passed at run time, and infinite splats, came out right."""
    found = []
    for func in _LOC.sub("", flow_ir).split("func.func ")[1:]:
        special = {m["name"] for m in _TENSOR_CONSTANT.finditer(func) if "0x" in m["value"].lower()
                   or "nan" in m["value"].lower()}
        found += [line.strip() for line in func.splitlines()
                  if (m := _SOFTMAX_INPUT.search(line)) is not None and m["input"] in special]
    return found


#: A floating literal as IREE prints it: ``%cst = arith.constant 0x7FC00000 : f32`` or
#: ``arith.constant dense<0x7FC00000> : tensor<2x3xf32>`` (NaN and infinities are printed in hex).
_HEX_FLOAT = re.compile(r"(?P<name>%[\w.$-]+)\s*=\s*arith\.constant\s+(?P<dense>dense<)?(?P<bits>0x[0-9A-Fa-f]+)>?"
                        r"\s*:\s*(?:tensor<(?:[\d?]+x)*)?(?P<type>bf16|f16|f32|f64)\b")
#: ``math`` ops (and ``linalg.softmax``), whose expansions may convert a float to an integer
#: (``exp``'s exponent bits; ``cosh`` and ``powf`` are made of ``exp``).
_MATH_OP = re.compile(r"\bmath\.(\w+)|\blinalg\.softmax\b")
#: The ``math`` ops measured right on a folded NaN (iree-cpu, float32 and float16, after a max
#: reduction of a NaN splat); any other one beside a foldable NaN literal is refused.
_RIGHT_ON_A_FOLDED_NAN = frozenset({"absf", "sqrt", "rsqrt", "floor", "round", "roundeven", "log", "log1p",
                                    "sin", "cos", "tanh", "erf", "atan"})


#: (exponent mask, mantissa mask) of each float type: a NaN has every exponent bit and some mantissa bit.
_NAN_MASKS = {"f64": (0x7FF0000000000000, 0xFFFFFFFFFFFFF), "f32": (0x7F800000, 0x7FFFFF),
              "f16": (0x7C00, 0x3FF), "bf16": (0x7F80, 0x7F)}


def _is_nan(bits: str, kind: str) -> bool:
    raw, (exponent, mantissa) = int(bits, 16), _NAN_MASKS[kind]
    return raw & exponent == exponent and raw & mantissa != 0


def _foldable_nan(m: re.Match, section: str) -> bool:
    """Whether the NaN literal ``m`` can fold into what reads it: a NaN tensor always (its
    reduction is NaN); a scalar unless only ``arith.select``s read it (a run-time choice)."""
    if not _is_nan(m["bits"], m["type"]):
        return False
    if m["dense"]:
        return True
    use = re.compile(re.escape(m["name"]) + r"(?![\w.$-])")
    readers = [line for line in section.splitlines() if use.search(line) and "arith.constant" not in line]
    return any("arith.select" not in line for line in readers)


def nan_literal_into_an_int_conversion(flow_ir: str) -> list[str]:
    """The dispatches of ``flow_ir`` that hold a NaN literal next to an op whose expansion
    converts floats to integers (``exp`` and ops made of it: sigmoid, softplus, SiLU, cosh, ...;
    every ``math`` op not measured right, ``_RIGHT_ON_A_FOLDED_NAN``).
    LLVM defines ``fptosi`` of NaN as poison, and a NaN IREE's folds reach through a reduction
    (``max(nan, x)`` is NaN) makes ``exp``'s exponent conversion poison: the store of the result
    is deleted and the dispatch leaves the stale contents of its output buffer
    (``(t - t.amax(2, True)).exp()`` of ``t = clamp(mask, nan, nan)`` gave ``[0.0, 0.14, 0.29,
    ...]``, the previous graph's values, on iree-cpu; sigmoid, expm1, softplus and silu alike).
    The same NaN arriving at run time, a NaN only selected at run time, and infinite literals
    come out right. (Casts to integers get a guard from the lowering instead,
    ``lowering/float_to_int.py``.)"""
    found = []
    for section in re.split(r"\bflow\.executable\b", _LOC.sub("", flow_ir))[1:]:
        section = section.split("util.func", 1)[0]
        nans = [m.group(0) for m in _HEX_FLOAT.finditer(section) if _foldable_nan(m, section)]
        if not nans:
            continue
        ops = [m.group(0) for m in _MATH_OP.finditer(section) if m.group(1) not in _RIGHT_ON_A_FOLDED_NAN]
        if ops:
            found.append(f"{nans[0]} with {ops[0]}")
    return found


#: The longest sort measured right on SPIR-V (lavapipe, f32 and i32, 1-d and rows of 2-d
#: tensors: every length up to 264 right, 288 and longer wrong), rounded down.
_SPIRV_SORT_LIMIT = 256
_SORT = re.compile(r"iree_linalg_ext\.sort\s+dimension\((\d+)\)[^:]*:\s*tensor<([^>]*)>")


def long_sorts_on_spirv(flow_ir: str) -> list[str]:
    """The sorts of ``flow_ir`` along more than ``_SPIRV_SORT_LIMIT`` elements (or a dynamic
    number). IREE 3.13's SPIR-V code for ``iree_linalg_ext.sort`` returns them out of order:
    ``torch.randn(288).sort()`` had 58 elements out of place on lavapipe, ``randn(1024)`` 960,
    ``randn(2, 300).sort(1)`` 157. The same sorts on llvm-cpu are right."""
    bad = []
    for m in _SORT.finditer(flow_ir):
        dims = m.group(2).split("x")[:-1]
        d = int(m.group(1))
        if d < len(dims) and (dims[d] == "?" or int(dims[d]) > _SPIRV_SORT_LIMIT):
            bad.append(m.group(0))
    return bad


def refusal(flow_ir: str, target_backend: str, flags: tuple[str, ...] = (),
            before_isolation: str = "") -> tuple[str, str, str] | None:
    """Why ``flow_ir`` must not be compiled for ``target_backend``, or None:
    (metrics counter, reason, the offending IR). ``before_isolation`` is the flow-phase IR of
    the first compile when reductions were then put behind barriers (backends/iree/barriers.py
    expands a ``linalg.softmax`` there, so its constant input is seen in this one). Kept here,
    not in the compiler, so that the cache key (``_RULES_DIGEST``, this module's source)
    changes with it."""
    bad = invariant_reductions(flow_ir)
    if bad:
        return ("iree_refused_miscompile",
                "a reduction whose combined value ignores its input (IREE folded it to a constant): "
                "IREE 3.13's vectorizer combines it once instead of once per element, a wrong value, "
                "so the graph is not compiled", bad[0])
    special = softmax_of_a_special_constant(flow_ir + "\n" + before_isolation)
    if special:
        return ("iree_refused_miscompile",
                "a softmax of a constant holding NaN or an infinity: IREE 3.13 folds the softmax of a NaN "
                "constant to 0.0, a wrong value, so the graph is not compiled", special[0])
    poisoned = nan_literal_into_an_int_conversion(flow_ir)
    if poisoned:
        return ("iree_refused_miscompile",
                "a NaN literal in a dispatch with exp, or another math op whose expansion may convert it to "
                "an integer: IREE 3.13's folds make that conversion poison and the dispatch returns its "
                "output buffer's stale contents, a wrong value, so the graph is not compiled", poisoned[0])
    shared = shared_in_place_sorts(flow_ir)
    if shared:
        return ("iree_refused_shared_sort",
                "two sorts write in place into one buffer (IREE merges the copy each needs): the second "
                "would read the first one's output, a wrong value, so the graph is not compiled",
                "\n".join(shared))
    written = writes_into_a_shared_constant(flow_ir)
    if written:
        return ("iree_refused_shared_constant",
                "an in-place write into a constant IREE computes that is also used elsewhere: IREE "
                "recomputes the constant for the copy the write needs and merges the two, so the write "
                "lands in the shared buffer, a wrong value, so the graph is not compiled", "\n".join(written))
    aliased = writes_through_a_barrier_alias(flow_ir)
    if aliased:
        return ("iree_refused_barrier_alias",
                "an in-place write into a value an optimization barrier shares its buffer with, while "
                "the other is still used: IREE 3.13 takes a barrier's result for a value of its own, so "
                "the write reaches the other value, a wrong value, so the graph is not compiled",
                "\n".join(aliased))
    long_sorts = long_sorts_on_spirv(flow_ir) if target_backend == "vulkan-spirv" else []
    if long_sorts:
        return ("iree_refused_long_sort",
                f"a sort along more than {_SPIRV_SORT_LIMIT} elements: IREE 3.13's SPIR-V sort misorders "
                "them (lavapipe: 58 of 288, 960 of 1024 elements out of place), so the graph is not "
                "compiled for Vulkan", long_sorts[0])
    inexact = inexact_on_spirv(flow_ir) if target_backend == "vulkan-spirv" else []
    if inexact:
        return ("iree_refused_inexact",
                "a floating remainder (fmod, %, //): Vulkan computes it only as x - y * trunc(x / y), "
                "off by a multiple of y where x / y rounds, so the graph is not compiled for it", inexact[0])
    lavapipe = any("llvmpipe" in f for f in flags)
    zero = zero_operands_on_spirv(flow_ir, lavapipe) if target_backend == "vulkan-spirv" else []
    if zero:
        return ("iree_refused_zero_operand",
                "a floating multiplication, division, addition or subtraction with a constant zero: "
                "lavapipe's shader compiler returns 0 for x * 0.0 and 0.0 / x (NaN, infinities and signs "
                "lost), x for x + 0.0 and -x for 0.0 - x (signs of zeros lost) and garbage for x / 0.0, "
                "so the graph is not compiled for Vulkan", zero[0])
    return None
