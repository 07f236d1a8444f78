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
float32 accumulation. Reductions torch-mlir decomposes itself (``nll_loss``'s
mean, softmax's sum, norms) still accumulate in float32 (``docs/conformance.md``).
"""

from __future__ import annotations

import torch
from torch.fx import Graph
from torch.fx import Node as FxNode

from lazy_core.ir import TensorMeta

from .fx_meta import meta_tensor, set_meta
from .fx_rewrite import calls_on_tensors, reroute_uses

__all__ = ["accumulate_sums_in_float64"]

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
