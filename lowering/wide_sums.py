"""Float32 sums and means accumulate in float64 on the CPU backends, rounded once at the end.

torch-mlir lowers ``sum``/``mean`` to a loop adding each element to one float32
total, and reference and iree-cpu keep that order. A running float32 total
drifts: once it is large, every small addend is rounded the same way.
``torch.full((2**20,), 0.1).sum()`` of uploaded data came out 105,891.8 on iree-cpu
for eager's 104,857.6 (1% off), and the mean of 2**20 values of 1.0986 1.1114 (a
mean loss over a million elements, 1.2% off); on random data 16,384 values were 70x
and 2**20 values 1,000x further from the exact sum than eager's, whose kernel sums
in cascades of vector lanes (found by an adversarial run over long dims).

With ``wide_sums`` (the reference and iree-cpu backends), a ``sum``/``mean`` of a
float32 value to a float32 result is computed with ``dtype=torch.float64`` (the
conversion fuses into the reduction's loop) and rounded to float32 once: the exact
sum, correctly rounded up to float64's own drift (about 1e-16 per element), within
an ulp of eager's. The rewrite does not depend on sizes, so a graph seen at two
sizes keeps one structure (automatic dynamic dimensions; a staged sum would not).
A sum already widened from float16/bfloat16 (``half_accumulation``) keeps eager's
float32 accumulation.

torch-mlir decomposes some ops into sums of its own, out of this pass's reach:
``cross_entropy``'s ``nll_loss`` over 2**20 rows was 0.15% off the exact loss
(eager: 8e-8), ``log_softmax`` along 131,072 elements 7e-4 off (eager: 1.2e-5).
``widen_decomposed_sums`` writes those ops (float32 ``nll_loss_forward`` with a
reduction, ``_softmax``, ``_log_softmax``) as the ops they are made of, with the
sum in float64. Norms and ``var`` still accumulate in float32
(``docs/conformance.md``).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import meta_tensor, set_meta
from .fx_rewrite import calls_on_tensors, reroute_uses, splice_traced

__all__ = ["accumulate_sums_in_float64", "widen_decomposed_sums"]

aten = torch.ops.aten

_REDUCTIONS = (aten.sum.default, aten.sum.dim_IntList, aten.mean.default, aten.mean.dim)
_CASTS = (aten._to_copy.default, torch.ops.prims.convert_element_type.default, aten.to.dtype)


def _widened_from_half(x: FxNode) -> bool:
    if x.op != "call_function" or x.target not in _CASTS or not x.args:
        return False
    src = x.args[0].meta.get("val") if isinstance(x.args[0], FxNode) else None
    return isinstance(src, torch.Tensor) and src.dtype in (torch.float16, torch.bfloat16)


def _typed(node: FxNode, val: torch.Tensor, dtype: torch.dtype) -> None:
    set_meta(node, meta_tensor(TensorMeta(tuple(val.shape), dtype, tuple(val.stride()))))


def accumulate_sums_in_float64(g: Graph) -> bool:
    """Rewrite ``g`` in place (see the module docstring); True if it changed."""
    changed = False
    for node, x, val in calls_on_tensors(g, _REDUCTIONS):
        out = node.meta.get("val")
        if (not isinstance(out, torch.Tensor) or val.dtype != torch.float32 or out.dtype != torch.float32
                or node.kwargs.get("dtype") not in (None, torch.float32) or _widened_from_half(x)):
            continue
        node.kwargs = {**node.kwargs, "dtype": torch.float64}
        _typed(node, out, torch.float64)

        def narrow(v: FxNode, out: torch.Tensor = out) -> FxNode:
            n = g.call_function(aten._to_copy.default, (v,), {"dtype": torch.float32})
            _typed(n, out, torch.float32)
            if "stack_trace" in v.meta:
                n.meta["stack_trace"] = v.meta["stack_trace"]
            return n

        reroute_uses(g, node, narrow)
        changed = True
    return changed


# -- Ops torch-mlir decomposes into float32 sums ---------------------------------------------

def _nll_loss(reduction: int, ignore_index: int, has_weight: bool) -> Callable[..., tuple]:
    def run(x: torch.Tensor, target: torch.Tensor, *weight: torch.Tensor) -> tuple:
        w = weight[0] if has_weight else None
        losses, _ = aten.nll_loss_forward.default(x, target, w, 0, ignore_index)  # one per row
        valid = target != ignore_index
        if w is None:
            counted = valid.to(torch.float64)
        else:
            counted = aten.index_select.default(w, 0, torch.where(valid, target, 0)).to(torch.float64) * valid
        total_weight = counted.sum()
        loss = losses.sum(dtype=torch.float64)
        if reduction == 1:
            loss = loss / total_weight
        return loss.to(torch.float32), total_weight.to(torch.float32)
    return run


def _softmax(log: bool, dim: int) -> Callable[..., torch.Tensor]:
    def run(x: torch.Tensor) -> torch.Tensor:
        shifted = x - aten.amax.default(x, [dim], True)
        exps = shifted.exp()
        total = exps.sum([dim], keepdim=True, dtype=torch.float64).to(torch.float32)
        return shifted - total.log() if log else exps / total
    return run


_SOFTMAXES = (aten._softmax.default, aten._log_softmax.default)


def _reads_a_non_finite_literal(x: FxNode, limit: int = 64) -> bool:
    """Whether a node within ``limit`` steps above ``x`` takes a NaN or infinite literal (a
    ``full_like(x, nan)``). Such softmaxes keep their ``_softmax`` form: IREE 3.13 folds a NaN
    splat's softmax wrongly, and ``backends/iree/miscompiles.py`` refuses a ``linalg.softmax``
    of such a constant (fuzz seed 4301); written as its parts, the same graph returned stale
    memory on iree-cpu (``[0.17, 0.33, 0.5, ...]`` for NaNs)."""
    seen: set[FxNode] = set()
    todo = [x]
    while todo and len(seen) < limit:
        n = todo.pop()
        if n in seen or n.op != "call_function":
            continue
        seen.add(n)
        for a in (*n.args, *n.kwargs.values()):
            if isinstance(a, float) and not math.isfinite(a):
                return True
            if isinstance(a, FxNode):
                todo.append(a)
    return False


def _decomposed(node: FxNode) -> tuple[Callable[..., Any], tuple[FxNode, ...], tuple] | None:
    """The function ``widen_decomposed_sums`` writes ``node`` as, its tensor operands and its
    cache key; None if ``node`` is not a float32 op it rewrites."""
    args = node.args
    vals = [a.meta.get("val") if isinstance(a, FxNode) else None for a in args]
    if not isinstance(vals[0], torch.Tensor) or vals[0].dtype != torch.float32:
        return None
    if node.target in _SOFTMAXES:
        if len(args) > 2 and args[2] or vals[0].dim() == 0:  # half_to_float: not a float32 input then
            return None
        if _reads_a_non_finite_literal(args[0]):
            return None
        dim = args[1] % vals[0].dim()
        return _softmax(node.target is aten._log_softmax.default, dim), (args[0],), (node.target, dim)
    if node.target is aten.nll_loss_forward.default:
        x, target, weight, reduction, ignore_index = (*args, *[None] * 5)[:5]
        if reduction not in (1, 2) or vals[0].dim() != 2 or not isinstance(vals[1], torch.Tensor):
            return None
        if weight is not None and not isinstance(vals[2], torch.Tensor):
            return None
        has_weight = weight is not None
        tensors = (x, target, weight) if has_weight else (x, target)
        return _nll_loss(reduction, ignore_index, has_weight), tensors, (node.target, reduction, ignore_index)
    return None


#: Traced rewrites, by op, constants and operand types.
_traced: dict[tuple, Any] = {}


def widen_decomposed_sums(g: Graph) -> bool:
    """Write the float32 ops torch-mlir would decompose into float32 sums as their parts with
    float64 sums (the module docstring); True if ``g`` changed."""
    changed = False
    for node in list(g.nodes):
        if node.op != "call_function" or node.target not in (*_SOFTMAXES, aten.nll_loss_forward.default):
            continue
        found = _decomposed(node)
        if found is None:
            continue
        run, operands, key = found
        result = splice_traced(g, node, list(operands), _traced, key, lambda run=run: run)
        if isinstance(result, (list, tuple)):  # nll_loss_forward: its users read the results by index
            for user in list(node.users):
                if user.target is operator.getitem:
                    user.replace_all_uses_with(result[user.args[1]])
                    g.erase_node(user)
        else:
            node.replace_all_uses_with(result)
        if not node.users:
            g.erase_node(node)
        changed = True
    return changed
