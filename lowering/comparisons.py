"""Comparisons with a Python number, in a form torch-mlir folds correctly.

torch-mlir's folder for ``aten.{eq,ne,lt,le,gt,ge}.Scalar``
(``comparisonScaleFolder``, TorchOps.cpp; 20261001 and HEAD) runs once the
tensor operand is a constant, and picks its integer or float path from the
*number's* type, not the tensor's:

* a float tensor with an int (``zeros(()) < 1``, which ``clamp(x, 1, 2.0)``
  decomposes into once ``x`` folds to a constant) reads the float's bits as an
  integer: undefined behaviour; it folded to False, so clamp returned 0;
* an integer tensor with a float dereferences an integer as a float: the
  process died with SIGSEGV (fuzz seed 7100);
* a bool tensor is read as a *signed* 1-bit integer: True is -1, so
  ``mask > 0`` folded to all False.

The fix must see every comparison, not only the ones the user wrote: a
decomposition (clamp, the NaN-aware extrema) or a rewrite emits its own.
So this is a pass over the finished FX graph, before import. Each number is
first converted to the dtype PyTorch compares in (``torch.result_type``,
exactly as eager wraps it), then:

* float tensor: the Scalar form with that value as a float (the folder's
  float path is right; an f16 constant needs no f64-to-f16 conversion in the
  compiled code);
* integer tensor with an int: left alone (one kind: the folder is right);
* bool tensor: converted to the compare dtype first (int64 against a bool);
* integer tensor with a float or a bool: the Tensor form against a 0-d
  constant, which has no such folder (``eq.Tensor`` folds only equal types).

Two tensors, a bool one and an integer one: torch-mlir's lowering of the
Tensor forms compares them *unsigned* when ``self`` is the bool
(``bools >= ints`` read -1 as 2^64 - 1: ``False >= -1`` was False on every
compiled backend, fuzz seed 1204 p1487). The bool operand is converted to
the compare dtype first (``torch.result_type``, as eager promotes).

``aten.eq.Tensor`` folds to all-true when both operands are one SSA value
(``AtenEqTensorOp::fold``, 20261001), NaN included. The operands can become
one value only inside torch-mlir, after its canonicalizer folded what made
them differ: ``torch.where(x > 0, x, x) == x`` was True at a NaN on every
backend (fuzz seed 2200 p1169), ``isclose`` too. So every floating
``a == b`` is emitted as ``not (a != b)``; ``ne.Tensor`` has no such folder,
and its unordered compare is true at a NaN.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, Node

from lazy_core.ir import TensorMeta

from .fx_meta import meta_tensor, set_meta
from .fx_rewrite import call_like

aten = torch.ops.aten

#: The Scalar comparisons and the Tensor form each is rewritten to.
SCALAR_COMPARISONS = {
    aten.eq.Scalar: aten.eq.Tensor,
    aten.ne.Scalar: aten.ne.Tensor,
    aten.lt.Scalar: aten.lt.Tensor,
    aten.le.Scalar: aten.le.Tensor,
    aten.gt.Scalar: aten.gt.Tensor,
    aten.ge.Scalar: aten.ge.Tensor,
}


def _is_number(x: Any) -> bool:
    return isinstance(x, bool | int | float)


def _runtime_number(x: Any) -> bool:
    """The ``item`` of a 0-d tensor node (how a scalar parameter reaches an op taking a number)."""
    return (isinstance(x, Node) and x.op == "call_function"
            and x.target in (aten.item.default, aten._local_scalar_dense.default)
            and isinstance(x.args[0], Node) and _tensor_dtype(x.args[0]) is not None
            and x.args[0].meta["val"].dim() == 0)


def _tensor_dtype(x: Any) -> torch.dtype | None:
    val = x.meta.get("val") if isinstance(x, Node) else None
    return val.dtype if isinstance(val, torch.Tensor) else None


def _new(g: Graph, before: Node, op: Any, args: tuple, kwargs: dict, meta: TensorMeta) -> Node:
    with g.inserting_before(before):
        node = g.call_function(op, args, kwargs)
    set_meta(node, meta_tensor(meta))
    if "stack_trace" in before.meta:
        node.meta["stack_trace"] = before.meta["stack_trace"]
    return node


#: The Tensor comparisons (see the module docstring: a bool against an integer tensor).
TENSOR_COMPARISONS = frozenset(SCALAR_COMPARISONS.values())


def _promote_bool_operand(g: Graph, node: Node) -> bool:
    """The operands of a mixed Tensor comparison converted to the compare dtype: a bool one
    (see the module docstring), and any other whose dtype differs from it (torch-mlir compares
    float32 with a 0-d float64 in float64; eager rounds the 0-d operand to float32 first)."""
    vals = [a.meta.get("val") if isinstance(a, Node) else None for a in node.args[:2]]
    if len(vals) != 2 or not all(isinstance(v, torch.Tensor) for v in vals):
        return False
    dtypes = {v.dtype for v in vals}
    if len(dtypes) == 1 or any(d.is_complex for d in dtypes):
        return False
    dtype = torch.result_type(*(torch.empty(v.shape, dtype=v.dtype, device="meta") for v in vals))
    args = list(node.args)
    for i, v in enumerate(vals):
        if v.dtype != dtype:
            args[i] = _new(g, node, aten._to_copy.default, (args[i],), {"dtype": dtype},
                           TensorMeta(tuple(v.shape), dtype, tuple(v.stride())))
    node.args = tuple(args)
    return True


#: Integer dtypes whose comparisons with a number this pass converts the number for (8-bit
#: ones are computed in int32 by lowering/small_ints.py, which converts their numbers first).
_WRAPPED_HERE = (torch.int16, torch.int32)


def rewrite_number_comparisons(g: Graph) -> int:
    """Rewrite every ``tensor <cmp> number`` (and bool against integer tensor) of ``g`` in
    place; returns how many changed."""
    changed = 0
    for node in list(g.nodes):
        if node.op == "call_function" and node.target in TENSOR_COMPARISONS:
            changed += _promote_bool_operand(g, node)
            continue
        if node.op != "call_function" or node.target not in SCALAR_COMPARISONS or len(node.args) != 2:
            continue
        tensor, number = node.args
        self_dtype = _tensor_dtype(tensor)
        if _runtime_number(number) and self_dtype is not None and not self_dtype.is_complex:
            # A number passed at run time (a scalar parameter: ``x == 0.1``) arrives as the
            # ``item`` of a 0-d float64/int64 tensor, which torch-mlir compared in float64
            # with the tensor extended: ``tensor([0.1]) == 0.1`` was False (eager rounds 0.1
            # to float32 first). The Tensor form against that 0-d tensor, promoted as eager does.
            source = number.args[0]
            kind = source.meta["val"].dtype
            sample = 0.5 if kind.is_floating_point else True if kind == torch.bool else 1
            dtype = torch.result_type(torch.empty((1,), dtype=self_dtype), sample)  # as a number, not a 0-d tensor
            if not dtype.is_floating_point and dtype not in _WRAPPED_HERE:
                continue  # (int64 and bool: exact either way; 8-bit ints: lowering/small_ints.py)
            # An int16/int32 tensor and an int: eager converts the number to the tensor's
            # dtype, wrapping (``int32 < 3_000_000_000`` compares with -1294967296); torch-mlir
            # compared the extended tensor with the int64 number (adversarial sweep). The 0-d
            # number is converted first, as the floats are.
            operands = []
            for x in (tensor, source):
                val = x.meta["val"]
                if val.dtype != dtype:
                    x = _new(g, node, aten._to_copy.default, (x,), {"dtype": dtype},
                             TensorMeta(tuple(val.shape), dtype, tuple(val.stride())))
                operands.append(x)
            node.target = SCALAR_COMPARISONS[node.target]
            node.args = tuple(operands)
            changed += 1
            continue
        if self_dtype is None or not _is_number(number) or self_dtype.is_complex:
            continue
        if self_dtype != torch.bool and not self_dtype.is_floating_point and type(number) is int:
            # A number outside an int16/int32 tensor's dtype compares as eager wraps it (above).
            wrapped = torch.tensor(number, dtype=torch.int64).to(self_dtype).item() \
                if self_dtype in _WRAPPED_HERE and -2**63 <= number < 2**63 else number
            if wrapped != number:
                node.args = (tensor, wrapped)
                changed += 1
            continue
        dtype = torch.result_type(torch.empty((1,), dtype=self_dtype), number)
        value = torch.tensor(number, dtype=dtype).item()
        val = tensor.meta["val"]
        if self_dtype == torch.bool:
            if dtype == torch.bool:  # bool against bool: as 0/1 integers, never a signed i1
                dtype, value = torch.int64, int(value)
            cast = _new(g, node, aten._to_copy.default, (tensor,), {"dtype": dtype},
                        TensorMeta(tuple(val.shape), dtype, tuple(val.stride())))
            node.args = (cast, value)
        elif self_dtype.is_floating_point:
            node.args = (tensor, float(value))
        else:
            const = _new(g, node, aten.scalar_tensor.default, (value,), {"dtype": dtype}, TensorMeta((), dtype, ()))
            node.target = SCALAR_COMPARISONS[node.target]
            node.args = (tensor, const)
        changed += 1
    return changed


def _floating(x: Any) -> bool:
    dtype = _tensor_dtype(x)
    return dtype is not None and dtype.is_floating_point


def rewrite_float_equalities(g: Graph) -> int:
    """Emit each floating ``eq.Tensor`` of ``g`` as ``logical_not(ne.Tensor)`` (see the module
    docstring); returns how many changed."""
    changed = 0
    for node in list(g.nodes):
        if node.op != "call_function" or node.target is not aten.eq.Tensor or len(node.args) != 2:
            continue
        if not any(_floating(a) for a in node.args):
            continue
        out = node.meta["val"]
        with g.inserting_before(node):
            ne = call_like(g, aten.ne.Tensor, node.args, out, node)
            eq = call_like(g, aten.logical_not.default, (ne,), out, node)
        node.replace_all_uses_with(eq)
        g.erase_node(node)
        changed += 1
    return changed
