"""Which ATen ops the torch dialect can express.

The importer maps ``aten.foo.overload`` to ``torch.aten.foo.overload`` (or
``torch.aten.foo``); an op without such a definition cannot be imported at
all, so the executor must run it eagerly instead of failing the whole graph,
unless the lowering context replaces it by a decomposition before import
(``can_lower``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def torch_dialect_ops() -> frozenset[str]:
    """Names like ``aten.add.Tensor`` and ``aten.relu`` defined by the torch dialect."""
    from torch_mlir.dialects import _torch_ops_gen as gen

    names = set()
    for obj in vars(gen).values():
        name = getattr(obj, "OPERATION_NAME", None)
        if isinstance(name, str) and name.startswith("torch."):
            names.add(name[len("torch."):])
    return frozenset(names)


#: Ops the torch dialect defines but torch-mlir 20261001 lowers in no form: a graph holding one
#: failed to compile ("failed to legalize operation"), and without strict mode ran op by op
#: whole, so they run eagerly at the call instead and the rest of the graph compiles.
#: ``linalg_qr``: ``nn.init.orthogonal_``, ``torch.linalg.qr`` (small matrices are decomposed:
#: lowering/householder.py, through ``CALL_CONDITIONS``). (Not ``as_strided_copy``, which
#: also failed: the tracer records it as ``as_strided`` of the storage and a copy instead,
#: lazy_core/strided.py; test_zoo_ops.py::test_as_strided_copy_of_a_view_reads_its_storage.)
NOT_LOWERED = frozenset({"aten.linalg_qr"})


@lru_cache(maxsize=4096)
def _importable(packet: str, overload: str) -> bool:
    if f"aten.{packet}" in NOT_LOWERED:
        return False
    ops = torch_dialect_ops()
    if overload and overload != "default" and f"aten.{packet}.{overload}" in ops:
        return True
    return f"aten.{packet}" in ops or f"aten.{packet}.{overload}" in ops


_by_op: dict[Any, bool] = {}


def is_importable(op: Any) -> bool:
    """Whether ``op`` (an OpOverload) has a torch-dialect definition."""
    # Asked once per traced op: reading the schema each time cost ~3 µs/op.
    known = _by_op.get(op)
    if known is None:
        known = _by_op[op] = _is_importable(op)
    return known


def _is_importable(op: Any) -> bool:
    schema = op._schema
    ns, _, packet = schema.name.partition("::")
    if ns != "aten":
        return ns == "prims"
    return _importable(packet, schema.overload_name)


def can_lower(op: Any) -> bool:
    """Whether a graph holding ``op`` can be lowered: the torch dialect defines
    it, or the lowering context decomposes it before import
    (``decompositions.DECOMPOSED_OPS``) or lowers its Tensor form
    (``decompositions.TENSOR_FORMS``). An in-place op is recorded as its
    functional variant, so ``x ^= 3`` can lower when ``x ^ 3`` can. What
    backends answer in ``supports_op``."""
    known = _lowerable.get(op)
    if known is None:
        from lazy_core.op_schema import plan

        from .decompositions import DECOMPOSED_OPS, TENSOR_FORMS

        def added(o: Any) -> bool:  # lowered here, though the torch dialect lacks it
            return o in DECOMPOSED_OPS or o in TENSOR_FORMS

        functional = plan(op).functional
        # The functional variant may be importable where the in-place op is not
        # (``remainder_``): it is what the graph holds.
        known = _lowerable[op] = added(op) or is_importable(op) or (
            functional is not None and (added(functional) or is_importable(functional)))
    return known


_lowerable: dict[Any, bool] = {}


def _polygamma_order(n: Any) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n >= 0


#: Ops lowered for some arguments only, by a condition on the call's Python arguments (ints,
#: floats, bools; the tensors themselves are not read): ``polygamma`` of a non-negative order is
#: decomposed (lowering/gamma.py, lowering/zeta.py); a negative one runs eagerly at the call (for
#: eager's error), the graph continuing after it. Without the condition the op would be
#: "supported", and a graph holding ``polygamma(-1, x)`` would fail to compile.
CALL_CONDITIONS: dict[Any, Any] = {}


def _checks_on() -> bool:
    from lazy_core import checks

    return checks.enabled()


def _conditions() -> dict[Any, Any]:
    if not CALL_CONDITIONS:
        import torch

        from . import (
            distances,
            frexp,
            grouped_mm,
            histc,
            hurwitz_zeta,
            linalg,
            mode,
            multilabel_margin,
            nextafter,
            segment_reduce,
            special,
            trig,
            upsample_aa,
        )

        aten = torch.ops.aten

        def reduced_trig_result(args: tuple, kwargs: dict) -> bool:
            x = args[0] if args else kwargs.get("self")
            dtype = x.dtype if isinstance(x, torch.Tensor) and x.is_floating_point() else torch.get_default_dtype()
            return trig.reduced_dtype(dtype)

        # The Bessel functions J and Y take a cosine, decomposed for float32 and narrower only
        # (lowering/trig.py): float64 keeps the ATen op, which nothing lowers.
        CALL_CONDITIONS.update(dict.fromkeys(special.TRIG_OPS, reduced_trig_result))
        # Small float matrices only (lowering/linalg.py): reads the lazy tensors' shapes and
        # dtypes, which are known without running anything.
        CALL_CONDITIONS.update({op: linalg.applies_call(op) for op in linalg.OPS})
        small_det = linalg.applies_call(linalg.DET)
        CALL_CONDITIONS[linalg.DET] = lambda args, kwargs: (
            (isinstance(args[0], torch.Tensor) and args[0].dim() >= 2 and args[0].shape[-1] == 0)
            or small_det(args, kwargs))
        # Recorded only to be checked on the device (lazy_core.checks); with LAZY_CHECKS=0 the
        # CPU's check runs at the call, as an unsupported op (a host read, but never a lost error).
        CALL_CONDITIONS[aten._linalg_check_errors.default] = lambda args, kwargs: _checks_on()
        # Not of a bfloat16 operand (lowering/nextafter.py, lowering/frexp.py): it stays the ATen
        # op, which nothing lowers. The in-place and out= forms too: they record the functional
        # op. (The inputs' dtypes only: ``torch.result_type`` would run on lazy tensors.)
        def inputs_in(dtypes: Any, names: tuple[str, ...]) -> Any:
            def condition(args: tuple, kwargs: dict) -> bool:
                inputs = [*args[:len(names)], *(kwargs[n] for n in names[len(args):] if n in kwargs)]
                return all(isinstance(a, torch.Tensor) and a.dtype in dtypes for a in inputs)
            return condition

        CALL_CONDITIONS.update(dict.fromkeys((aten.nextafter.default, aten.nextafter_.default, aten.nextafter.out),
                                             inputs_in(nextafter.BITS, ("self", "other"))))
        CALL_CONDITIONS.update(dict.fromkeys((aten.frexp.Tensor, aten.frexp.Tensor_out),
                                             inputs_in(frexp.FORMATS, ("self",))))
        # float32/float64 only (decompositions._logit_backward): eager's half kernels round by step.
        CALL_CONDITIONS[aten.logit_backward.default] = inputs_in((torch.float32, torch.float64),
                                                                 ("grad_output", "self"))
        CALL_CONDITIONS[aten._pdist_forward.default] = distances.pdist_applies
        CALL_CONDITIONS[aten.mode.default] = mode.applies_call
        CALL_CONDITIONS[aten.histc.default] = histc.applies_call
        CALL_CONDITIONS[aten.multilabel_margin_loss_forward.default] = multilabel_margin.applies_call
        CALL_CONDITIONS[aten.segment_reduce.default] = segment_reduce.applies_call
        CALL_CONDITIONS[aten._grouped_mm.default] = grouped_mm.applies_call
        CALL_CONDITIONS[aten._upsample_bilinear2d_aa.default] = upsample_aa.applies_call
        CALL_CONDITIONS[aten.special_zeta.default] = hurwitz_zeta.applies_call
        CALL_CONDITIONS.update({
            aten.polygamma.default: lambda args, kwargs: _polygamma_order(kwargs.get("n", args[0] if args else None)),
            aten.polygamma_.default: lambda args, kwargs: _polygamma_order(
                kwargs.get("n", args[1] if len(args) > 1 else None)),
        })
    return CALL_CONDITIONS


def depends_on_arguments(op: Any) -> bool:
    """Whether ``can_lower_call`` must be asked for each call of ``op``."""
    return op in _conditions()


def can_lower_call(op: Any, args: tuple, kwargs: dict) -> bool:
    """Whether this call of ``op`` (its Python arguments) can be lowered; ``can_lower`` says the
    op can be for some arguments."""
    condition = _conditions().get(op)
    return condition is None or bool(condition(args, kwargs))
