"""Which arguments a compiled IREE function may write into, so we can protect them.

Lazy device data are immutable: one buffer may back several tensors (views,
memoized scalars, the old value of a tensor updated in place), so a
computation must never write into its inputs. IREE 3.13 sometimes does
(iree-org/iree#16168): an op whose destination operand is a function argument
(scatter, index_put, sort, topk, slice_scatter ...) is bufferized in place
into the caller's buffer, through reshapes too.

``written_arguments(mlir)`` finds, in the torch-dialect text handed to
iree-compile, the arguments that can reach the destination (first) operand
of such an op through any chain of ops. The set over-approximates (it
follows every op, not just views) so it never misses one; the backend gives
those arguments a private device-side copy before each call. Graphs without
such ops, every ordinary training step included, copy nothing.
"""

from __future__ import annotations

import re

# Ops IREE lowers to destination-passing kernels that may reuse the
# destination's buffer: scatters and index writes (iree_linalg_ext.scatter,
# tensor.insert_slice) and sorts (iree_linalg_ext.sort / topk). A superset of
# the ones observed to write into an argument.
_IN_PLACE_OP = re.compile(
    r"^torch\.aten\.(?:\w*scatter\w*|_?index_put\w*|_index_put_impl\w*|index_(?:add|copy|fill|reduce)\w*"
    r"|\w*sort\w*|topk|kthvalue|median\w*|nanmedian\w*|mode|put\w*|unique\w*)(?:\.\w+)?$"
)
# Ops that read only their operands' shape and dtype (or make a scalar): their
# results are new buffers that can never be an argument's, so what reaches
# them does not reach what they make. Without this, ``grad.new_zeros(...)``
# as the destination of a scatter (every decomposed select/slice backward)
# marked each weight feeding ``grad`` as written, and every step copied them.
_FRESH_OP = re.compile(
    r"^torch\.aten\.(?:new_(?:zeros|ones|empty|full)\w*|\w+_like|empty\w*|zeros|ones|full|size|dim|numel|item)"
    r"(?:\.\w+)?$"
)
_ARG = re.compile(r"%(arg\d+)\b")
_VALUE = re.compile(r"%([\w.$-]+)(?:#\d+)?")
_RESULTS = re.compile(r"^\s*((?:%[\w.$-]+(?::\d+)?)(?:\s*,\s*%[\w.$-]+)*)\s*=\s*([\w.]+)(.*)$")
_SIGNATURE = re.compile(r"func\.func\s+@[\w$.-]+\((.*?)\)\s*(?:->|\{|attributes)", re.S)


def _operands(rest: str) -> list[str]:
    """SSA names used by an op, in order (the text before its type signature)."""
    body = rest.split(" : ", 1)[0]
    body = body.split(" loc(", 1)[0]
    return [m.group(1) for m in _VALUE.finditer(body)]


def written_arguments(mlir: str) -> frozenset[int]:
    """Indices of function arguments an in-place-capable op could write into."""
    sig = _SIGNATURE.search(mlir)
    if sig is None:
        return frozenset()
    arg_index = {name: i for i, name in enumerate(_ARG.findall(sig.group(1)))}
    deps: dict[str, frozenset[int]] = {name: frozenset([i]) for name, i in arg_index.items()}
    written: set[int] = set()
    for line in mlir.splitlines():
        m = _RESULTS.match(line)
        if m is None:
            continue
        results, op, rest = m.groups()
        operands = _operands(rest)
        if not operands or _FRESH_OP.match(op):
            reach: frozenset[int] = frozenset()
        else:
            reach = frozenset().union(*(deps.get(o, frozenset()) for o in operands))
        for r in results.split(","):
            deps[r.strip().lstrip("%").split(":")[0]] = reach
        if operands and _IN_PLACE_OP.match(op):
            written |= deps.get(operands[0], frozenset())
    return frozenset(written)
