"""What the tracer needs to know about each ATen op, computed once per op.

The dispatcher hands us an ``OpOverload``; its schema says whether it
mutates an argument (in-place or ``out=``), whether its result aliases its
input (a view), which arguments are ``Scalar`` (candidates for scalar
parameters), and its tags say whether its output shape depends on data or it
draws random numbers. Reading the schema every call would dominate tracing
cost, so ``plan(op)`` caches an ``OpPlan`` per op.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

#: Arguments that hold indices. The CPU stand-ins that ask a kernel for its verdict
#: (tensor, out_dtype, overlap) fill them with zeros, always in range; a bool mask of
#: that name stays ones (it selects everything).
INDEX_ARGS = ("index", "indices")

aten = torch.ops.aten

# Scalar-typed arguments whose value decides the output shape: never lifted.
_SHAPE_DEPENDENT_SCALARS = {"arange", "range", "linspace", "logspace", "full", "new_full"}
#: Ops whose Scalar only fills ``self`` (cast to its dtype): every value is lifted, bools and 0
#: and 1 too, as no fold or type rule depends on it. HF's stopping criteria build
#: ``torch.full((batch,), is_done)``: a baked True compiled the last decode step again.
_EVERY_VALUE_LIFTED = {"fill", "fill_"}
# Exponents stay constants too: with a runtime exponent, pow must take the
# general exp(y*log(x)) path, which gives NaN for negative bases (x ** 2 of a
# negative x on IREE; garbage on the reference backend), and the compiler can
# no longer turn x ** 2 into x * x.
_CONSTANT_SCALAR_OPS = {"pow", "pow_", "float_power", "float_power_"}
# Fixed hyperparameters of activations and losses (a leaky ReLU's slope, a
# Huber delta) stay constants as well: they never change between steps, and
# a backend may need them constant to lower the op (torch-mlir computed
# leaky_relu_backward wrongly with a runtime slope, and lowering only
# decomposes ops whose scalars are constants).
_CONSTANT_SCALAR_OPS |= {
    "leaky_relu", "leaky_relu_", "leaky_relu_backward", "rrelu_with_noise_backward",
    "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss", "huber_loss_backward",
    "multi_margin_loss", "multi_margin_loss_backward",
}
# A norm's order picks the algorithm: a runtime ``ord`` made torch-mlir emit the generic
# ``sum(|x| ** p) ** (1 / p)``, so ``vector_norm(x, inf)`` gave 1 (reference) or NaN (iree-cpu)
# where eager gives ``max(|x|)``, and ``p = 2`` took the exp/log pow instead of a square.
_CONSTANT_SCALAR_OPS |= {"linalg_vector_norm", "norm", "renorm", "renorm_", "dist", "_foreach_norm",
                         "_cdist_forward", "_cdist_backward"}
# So is a variance's correction: torch-mlir lowers only a constant one (``x.var(0, correction=2)``
# failed to compile and ran eagerly).
_CONSTANT_SCALAR_OPS |= {"var", "std", "var_mean", "std_mean"}
# Clamp bounds too: their NaN-aware lowering is a decomposition, and
# decompositions take constant scalars only (lowering/decompositions.py).
_CONSTANT_SCALAR_OPS |= {"clamp", "clamp_", "clamp_min", "clamp_min_", "clamp_max", "clamp_max_",
                         "hardtanh", "hardtanh_"}
# And a histogram's range: it picks eager's path (the data's range when min == max); and
# segment_reduce's ``initial`` (decomposed with it: lowering/segment_reduce.py).
_CONSTANT_SCALAR_OPS |= {"histc", "segment_reduce"}


# Ops whose meta kernels skip the dtype checks their CPU kernels make (found
# by running each with mixed dtypes on "meta" and on the CPU): ``mm(float32,
# int64)`` raises on the CPU and passes on meta, so lazy raised only at the
# read, after a compile failure. When such an op's tensor operands have mixed
# dtypes, the tracer asks the CPU kernel (lazy_core.tensor._cpu_dtype_check).
_CPU_DTYPE_CHECKED = {
    "mm", "bmm", "addmm", "addmv", "mv", "baddbmm", "addbmm", "addr", "dot", "vdot",
    "convolution", "_convolution", "index_put", "index_put_", "index_add", "index_copy",
    "nll_loss_forward", "nll_loss2d_forward", "nll_loss_backward", "nll_loss2d_backward",
    "native_layer_norm", "native_group_norm",
    # Mixed dtypes pass, with another result dtype: the CPU kernel promotes (int64 grad,
    # float32 input -> float32), the meta kernel keeps grad's (torch-mlir e2e
    # ``ThresholdBackward*MixedModule``: int64 zeros for eager's float32 values).
    "threshold_backward",
    # The same, found by running OpInfo samples with one operand of another dtype on meta
    # and on the CPU: the loss keeps the input's dtype on the CPU, meta promotes;
    # binary_cross_entropy raises on the CPU ("Found dtype Double but expected Float").
    "huber_loss", "huber_loss_backward", "soft_margin_loss", "soft_margin_loss_backward",
    "native_dropout_backward", "binary_cross_entropy", "binary_cross_entropy_backward",
    # Not a dtype mix: ``empty.max()`` and ``empty.max(0)`` pass on meta; the CPU raises.
    "max", "min",
    # An index of a dtype other than int64/int32 (``index_select(x, 0, mask)``) passes on
    # meta for these (fuzz seed 7); index_put and index_add/copy are listed above.
    "index_select", "index_fill",
    # Not a dtype mix: ``int_tensor ** -1`` raises on the CPU ("Integers to
    # negative integer powers are not allowed") and passes on meta.
    "pow",
    # Not dtypes: arguments the CPU kernel refuses (tensor._CPU_CHECK_WHEN says which).
    "bucketize", "masked_scatter", "masked_scatter_", "as_strided_scatter",
}

# Ops defined only on integers and bools. Their meta kernels accept floats
# (``bitwise_and`` of two float tensors passes on meta), so without a CPU
# check the error would surface only when the graph compiles, as a lowering
# error, where eager raises NotImplementedError ("bitwise_and_cpu" not
# implemented for 'Float') at the call. In-place forms share the base name.
_INTEGRAL_ONLY = {
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
    "bitwise_right_shift", "__and__", "__or__", "__xor__", "__lshift__", "__rshift__",
    "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "gcd", "lcm",
}

_INTEGRAL_ONLY_STRIPPED = {n.rstrip("_") for n in _INTEGRAL_ONLY}

# Ops whose CPU kernel refuses bool tensors while their meta kernel accepts
# them: ``mask.argmax()`` returned an index where eager raises "argmax(): does
# not support bool input", ``mask.abs()`` a tensor where eager raises
# NotImplementedError. A bool operand runs the CPU check (``_cpu_dtype_check``).
# In-place forms share the base name.
_BOOL_REFUSED = {
    "argmax", "argmin", "topk", "kthvalue", "abs", "floor", "round", "trunc", "remainder", "fmod",
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot", "lerp", "addcmul",
    "addcdiv", "relu", "sub", "rsub", "subtract",
    "max_pool2d_with_indices", "max_pool3d_with_indices",
    # ``mask ** mask`` raises on the CPU; ``mask ** True`` is a bool there and
    # int64 on meta (the check's dtype wins: lazy_core.tensor._with_cpu_dtypes).
    "pow",
    # ``div(mask, mask, rounding_mode="trunc")`` raises on the CPU ("div_trunc_cpu" not
    # implemented for 'Bool'; floor mode's meta kernel refuses too) and returned a bool tensor
    # here (adversarial sweep). True division of bools passes the check (a float result).
    "div",
}

# Ops whose CPU kernel refuses integer or bool operands (most compute in
# floating point only) while their meta kernel accepts them: ``int_t.var(0)``
# returned a value where eager raises "std and var only support floating
# point and complex dtypes" (fuzz seed 8100). Found by running OpInfo samples
# of every op on "meta" and on the CPU. A non-floating operand runs the CPU
# check, which raises only if the kernel itself refuses (avg_pool2d takes
# int64 and refuses int32). In-place forms share the base name.
_NON_FLOAT_CHECKED = {
    "var", "std", "var_mean", "std_mean", "frac", "hypot", "logaddexp", "logaddexp2", "nextafter",
    "lerp", "_softmax", "_log_softmax", "elu", "celu", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_no_training", "avg_pool2d", "avg_pool3d", "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d", "adaptive_max_pool2d", "adaptive_max_pool3d", "igamma", "igammac",
    "logcumsumexp", "grid_sampler_2d", "grid_sampler_3d", "median", "nanmedian", "cumsum", "cross",
    "linalg_cross", "ceil", "clamp", "clamp_min", "clamp_max",
    # Not implemented for integers on the CPU; leaky_relu computed on reference (found
    # while checking numbers out of an integer range, the inexact fuzz constants).
    "leaky_relu", "softplus", "hardshrink", "softshrink",
    # ``tanh_backward`` of integer or bool operands: "tanh_backward_cpu" not implemented for
    # 'Long' on the CPU; its decomposition computed an integer result (adversarial sweep).
    "tanh_backward",
}

# Ops with an ``alpha`` the CPU kernel checks against the result dtype
# ("Boolean alpha only supported for Boolean results", "For integral input
# tensors, argument alpha must not be a floating point number"); meta
# kernels check neither (fuzz seed 8100: ``torch.add(a, b, alpha=False)``).
# An alpha that is not a plain int runs the CPU check.
_ALPHA_CHECKED = {"add", "sub", "rsub", "subtract", "addmm", "addmv", "addr", "baddbmm", "addbmm"}

# Ops whose meta kernel accepts a ``dim`` out of range that the CPU kernel
# refuses with IndexError (found by calling every ATen op that takes a
# ``dim`` with 5, -3 on a matrix and 1, -2 on a 0-d tensor, on "meta" and on
# the CPU). ``torch.softmax(v, -2)`` of a vector was traced, and compiling
# it hung torch-mlir's DecomposeComplexOps (fuzz seed 21). A ``dim`` outside
# ``[-max(rank, 1), max(rank, 1) - 1]`` of the first operand runs the CPU check.
_DIM_CHECKED = {"_softmax", "sort", "cummax", "cummin", "index_select", "select_scatter", "slice_scatter"}


@dataclass(slots=True)
class OpPlan:
    op: Any
    name: str
    # Names of arguments that the op writes (self for in-place, out for out=).
    mutated: tuple[str, ...] = ()
    is_out_variant: bool = False
    is_view: bool = False
    # Argument names typed Scalar / Scalar? / Scalar[] that may become parameters.
    scalar_args: frozenset[str] = frozenset()
    scalar_positions: frozenset[int] = frozenset()
    # Arguments that may carry a Python number the CPU kernel converts to an operand's dtype
    # with c10's overflow check (lazy_core.tensor._check_numbers_fit): positions and names.
    number_positions: frozenset[int] = frozenset()
    number_names: frozenset[str] = frozenset()
    has_device_arg: bool = False
    # Whether 0, 1 and bools are lifted too (_EVERY_VALUE_LIFTED; a bool as 0 or 1).
    lifts_every_value: bool = False
    # Positional index of each argument name.
    arg_index: dict[str, int] = field(default_factory=dict)
    dynamic_shape: bool = False
    random: bool = False
    returns_python_scalar: bool = False
    inplace_view: bool = False
    functional: Any = None
    # Where the functional variant takes the arguments in another order (_REORDERED): the
    # argument names it takes, in its order.
    functional_args: tuple[str, ...] = ()
    decompose: bool = False
    # Whether the written results follow PyTorch's canCast rule (in-place ops,
    # and out= variants of pointwise ops): see ``check_cast``.
    casts_result: bool = False
    # Whether the CPU kernel checks dtypes the meta kernel skips (see above).
    cpu_dtype_check: bool = False
    # Whether the op is defined on integers and bools only (_INTEGRAL_ONLY).
    integral_only: bool = False
    # Whether the CPU kernel refuses bool operands (_BOOL_REFUSED).
    bool_refused: bool = False
    # Whether the CPU kernel may refuse integer or bool operands (_NON_FLOAT_CHECKED).
    non_float_checked: bool = False
    # Positional index of an ``alpha`` the CPU kernel checks (_ALPHA_CHECKED), or -1.
    alpha_index: int = -1
    # Positional index of a ``dim`` the meta kernel does not check (_DIM_CHECKED), or -1.
    dim_index: int = -1
    # Positional index of a Scalar the CPU kernel converts to self's dtype (_VALUE_CONVERTED), or -1.
    value_index: int = -1
    # Whether eager refuses an input that partially overlaps the written tensor
    # (TensorIterator's check, for pointwise ops; lazy_core.overlap).
    checks_overlap: bool = False
    # How many values the op returns (``_schema.returns`` is a binding call: read once).
    n_returns: int = 0
    # The functional variant's own plan (looked up once, not per traced write).
    functional_plan: Any = None


# Keyed by id(op): OpOverload.__hash__ is a Python function, and this lookup
# runs on every traced op. The plan holds the op, so the id stays valid.
_plans: dict[int, OpPlan] = {}


#: Ops whose result shares its input's storage in eager although their schema has no alias
#: annotation (autograd treats ``_unsafe_view``'s result as a new tensor; its memory is the
#: input's): a write through the result changes the input, and ``as_strided`` on it addresses
#: the input's storage (torch-mlir e2e ``AtenAsStridedAfterUnsafeView*``).
_UNANNOTATED_VIEWS = frozenset({"_unsafe_view"})


def plan(op: Any) -> OpPlan:
    """The cached OpPlan of ``op``."""
    p = _plans.get(id(op))
    if p is None:
        p = _make_plan(op)
        _plans[id(op)] = p
    return p


def _make_plan(op: Any) -> OpPlan:
    schema = op._schema
    tags = set(getattr(op, "tags", ()))
    base_name = schema.name.split("::")[-1]
    p = OpPlan(op=op, name=str(op))
    p.arg_index = {a.name: i for i, a in enumerate(schema.arguments)}
    p.mutated = tuple(
        a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write
    )
    p.is_out_variant = bool(p.mutated) and all(
        schema.arguments[p.arg_index[m]].kwarg_only for m in p.mutated
    )
    p.is_view = not p.mutated and (any(
        r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
    ) or base_name in _UNANNOTATED_VIEWS)
    if base_name not in _SHAPE_DEPENDENT_SCALARS and base_name not in _CONSTANT_SCALAR_OPS:
        p.scalar_args = frozenset(
            # Tensor-typed too: ``x * 0.1`` arrives as mul.Tensor(x, 0.1), a wrapped number.
            a.name for a in schema.arguments
            if str(a.type) in ("number", "Optional[number]", "List[number]", "Tensor", "Optional[Tensor]")
        )
    p.scalar_positions = frozenset(p.arg_index[n] for n in p.scalar_args)
    p.number_names = frozenset(
        a.name for a in schema.arguments
        if str(a.type) in _NUMBER_TYPES and a.name not in INDEX_ARGS and a.name != "out")
    p.number_positions = frozenset(p.arg_index[n] for n in p.number_names) - {0}
    p.lifts_every_value = base_name in _EVERY_VALUE_LIFTED
    p.has_device_arg = "device" in p.arg_index
    p.dynamic_shape = torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags
    p.random = torch.Tag.nondeterministic_seeded in tags
    p.inplace_view = torch.Tag.inplace_view in tags
    p.returns_python_scalar = any(
        str(r.type) in ("bool", "int", "float", "number", "complex", "SymInt") for r in schema.returns
    )
    p.decompose = base_name.startswith("_foreach_") and torch._C._dispatch_has_kernel_for_dispatch_key(
        op.name(), "CompositeExplicitAutograd"
    )
    p.n_returns = len(schema.returns)
    if p.mutated:
        p.functional = _functional_variant(op, p)
        if p.functional is not None:
            p.functional_plan = plan(p.functional)
        p.casts_result = not p.is_out_variant or torch.Tag.pointwise in tags
    p.checks_overlap = torch.Tag.pointwise in tags or (
        # ``where.self_out`` lacks the tag its functional form has.
        p.functional is not None and torch.Tag.pointwise in getattr(p.functional, "tags", ()))
    stripped = base_name.rstrip("_")
    p.integral_only = stripped in _INTEGRAL_ONLY_STRIPPED
    p.bool_refused = stripped in _BOOL_REFUSED
    p.non_float_checked = stripped in _NON_FLOAT_CHECKED
    if stripped in _ALPHA_CHECKED and "alpha" in p.arg_index:
        p.alpha_index = p.arg_index["alpha"]
    if stripped in _DIM_CHECKED and "dim" in p.arg_index:
        p.dim_index = p.arg_index["dim"]
    value = _VALUE_CONVERTED.get(stripped)
    if value is not None and value in p.arg_index and str(schema.arguments[p.arg_index[value]].type) == "number":
        p.value_index = p.arg_index[value]
    p.cpu_dtype_check = (base_name in _CPU_DTYPE_CHECKED or p.integral_only or p.bool_refused
                         or p.non_float_checked or p.alpha_index >= 0 or p.dim_index >= 0)
    return p


#: Schema types that can carry a Python number (a Tensor one as a wrapped number).
_NUMBER_TYPES = frozenset({"number", "Optional[number]", "float", "Optional[float]", "Tensor", "Optional[Tensor]"})

# Ops whose CPU kernel converts a Scalar to the dtype of ``self`` with c10's checked
# conversion: ``int_t.fill_(inf)`` and ``half_t.fill_(1e6)`` raise "value cannot be
# converted to type ... without overflow" at the call, while the meta kernels take any
# value (lazy raised at the read, fuzz seed 0). Name -> the Scalar argument.
_VALUE_CONVERTED = {"fill": "value", "masked_fill": "value", "index_fill": "value",
                    "fill_diagonal": "fill_value", "scatter": "value"}  # scatter.value: fuzz seed 9512


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """c10's name of ``dtype`` (``Float``, ``Long``, ``Bool``), as PyTorch's errors write it."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        text = torch.empty(0, dtype=dtype).type()  # "torch.LongTensor"
        name = _DTYPE_NAMES[dtype] = text.removeprefix("torch.").removesuffix("Tensor")
    return name


def check_cast(result: torch.dtype, out: torch.dtype) -> None:
    """Raise PyTorch's error when an op computing ``result`` may not write it
    into a tensor of dtype ``out``.

    TensorIterator's rule for in-place and ``out=`` results
    (``c10::canCast``, ``torch.can_cast``): no float into an integer, no
    complex into a real, nothing but bool into bool. ``int_t.add_(1.5)``
    computes a float, and a lazy write-back would otherwise truncate it
    silently where the CPU raises.
    """
    if result is not out and not torch.can_cast(result, out):
        raise RuntimeError(f"result type {dtype_name(result)} can't be cast to the desired output type "
                           f"{dtype_name(out)}")


def _sig(schema: Any, drop: set[str]) -> tuple:
    return tuple((a.name, str(a.type).replace("(a!)", "")) for a in schema.arguments if a.name not in drop)


#: In-place ops whose functional variant takes the same arguments in another order:
#: ``x.polygamma_(n)`` is ``polygamma(n, x)``.
_REORDERED = {"polygamma_": "polygamma"}


def _functional_variant(op: Any, p: OpPlan) -> Any:
    """The side-effect-free op computing what ``op`` writes, or None."""
    schema = op._schema
    base_name = schema.name.split("::")[-1]
    reordered = _REORDERED.get(base_name)
    if reordered is not None and not p.is_out_variant:
        cand = getattr(getattr(aten, reordered), schema.overload_name or "default")
        if sorted(_sig(cand._schema, set())) == sorted(_sig(schema, set())):
            p.functional_args = tuple(a.name for a in cand._schema.arguments)
            return cand
        return None
    if p.is_out_variant:
        packet = getattr(aten, base_name, None)
        want = _sig(schema, set(p.mutated))
    else:
        packet = getattr(aten, base_name.rstrip("_"), None) if base_name.endswith("_") else None
        want = _sig(schema, set())
    if packet is None:
        return None
    # Prefer the same overload name (add_.Tensor -> add.Tensor).
    overload = schema.overload_name
    candidates = [overload] if overload in packet.overloads() else []
    candidates += [o for o in packet.overloads() if o != overload]
    for name in candidates:
        cand = getattr(packet, name)
        cs = cand._schema
        if any(a.alias_info is not None and a.alias_info.is_write for a in cs.arguments):
            continue
        if _sig(cs, set()) == tuple((n, t.replace("(a!)", "").replace("(a)", "")) for n, t in want):
            return cand
    return None
