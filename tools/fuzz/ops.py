"""Op templates of the fuzzer, grouped in switchable categories.

Each template takes the ``Generator`` (the CPU values so far) and returns one
``Line`` or None when no operand fits. Categories (``CATEGORIES``) can be
turned off one by one (``--skip``), so a bug whose fix is pending elsewhere
does not hide every other finding; turning one off removes exactly that
category's lines, nothing else:

- ``nan``: NaN operands of NaN-sensitive ops (clamp, max/min, argmax, sort,
  topk, kthvalue, maximum, cummax). Off: those ops still run, on NaN-free operands.
- ``inplace_cast``: in-place and ``out=`` ops whose result type cannot be cast
  to the destination (PyTorch raises). Off: only castable in-place ops.
- ``view_inplace``: in-place ops through a view (the base must change too).
- ``scatter``: index_put / index_add / index_copy / scatter / ``a[idx] = c`` into a tensor or
  a slice of it.
- ``linear``: ``F.linear``/``addmm``/``mm`` (zeros inputs are common).
- ``conv``: ``convolution_backward`` of 2-d convolutions on small-integer data (exact in float32).
- ``special``: NaN and +-inf as scalar constants.
- ``inexact``: scalar constants a float32/float16 tensor cannot hold exactly
  (0.1, 1/3, 70000 ...), which expose where a number is rounded.
- ``subnormal``: float32 subnormal constants (1e-40); left out on a backend that
  declares ``flushes_subnormals`` (driver.py).
- ``data_error``: errors only the data reveal (an index out of range, an
  integer division by zero): lazy must raise them at the read at the latest.
- ``errors``: any other line that eager PyTorch rejects (a dtype it does not
  support, a bad dim): lazy must raise the same exception type. Off: such
  lines are dropped (a lazy error where eager has none is always a finding).
- ``collide``: twin programs whose constants collide in Python (driver.py).
- ``strided``: ``as_strided`` (read and written through) and channels-last copies: values
  that depend on the storage's layout, not only on the tensor's value.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from . import values
from .program import Generator, Line, opposite_zeros

Template = Callable[[Generator], Line | None]

_registry: list[tuple[str, Template]] = []


def op(category: str) -> Callable[[Template], Template]:
    def register(fn: Template) -> Template:
        _registry.append((category, fn))
        return fn

    return register


def templates(categories: set[str]) -> list[tuple[str, Template]]:
    """The templates whose home category is enabled (a template may still pick another)."""
    return [(c, f) for c, f in _registry if c in categories]


def _float(t: torch.Tensor) -> bool:
    return t.is_floating_point()


def _int(t: torch.Tensor) -> bool:
    return not t.is_floating_point() and t.dtype != torch.bool


def _nd(n: int) -> Callable[[torch.Tensor], bool]:
    return lambda t: t.dim() >= n


def _nan_free(t: torch.Tensor) -> bool:
    return not (t.is_floating_point() and bool(t.isnan().any()))


def _has_nan(t: torch.Tensor) -> bool:
    return t.is_floating_point() and bool(t.isnan().any())


def _broadcasts(a: torch.Tensor) -> Callable[[torch.Tensor], bool]:
    def ok(t: torch.Tensor) -> bool:
        try:
            torch.broadcast_shapes(a.shape, t.shape)
            return True
        except RuntimeError:
            return False

    return ok


def input_line(g: Generator) -> Line:
    """A fresh input: a literal tensor, or a factory whose dtype comes from a colliding scalar."""
    out = g.fresh()
    shape = g.rng.choice(values.SHAPES)
    r = g.rng.random()
    if r < 0.7:
        dtype = g.rng.choice(values.DTYPES)
        src = values.input_source(g.rng, shape, dtype, specials="special" in g.categories)
        return Line(f"{out} = {src}", (), (out,), "input")
    if r < 0.85:
        fn = g.rng.choice(["zeros", "ones"])
        dtype = g.rng.choice(values.DTYPES)
        return Line(f"{out} = torch.{fn}({{0}}, dtype={dtype}, device=DEV)", (shape,), (out,), "input")
    return Line(f"{out} = torch.full({{0}}, {{1}}, device=DEV)", (shape, g.scalar()), (out,), "input")


# -- elementwise ---------------------------------------------------------------------------
_BIN_FUNCS = ["add", "sub", "mul", "div", "remainder", "pow", "eq", "lt", "ge", "ne", "logical_and",
              "logical_or", "bitwise_and", "bitwise_or", "atan2", "fmod", "true_divide", "floor_divide"]
_BIN_OPS = ["+", "-", "*", "/", "<", "==", ">=", "&", "|", "**", "//", "%"]


def _divides(expr: str) -> bool:
    return any(k in expr for k in ("div", "remainder", "fmod", "//", "%"))


def _zero_int_divisor(g: Generator, fn: str, a: torch.Tensor, b: object) -> bool:
    """An integer division by zero: an error that only the data reveal (category data_error)."""
    if not _divides(fn) or "true_div" in fn or fn == "/" or fn == "div":
        return False
    if isinstance(b, torch.Tensor):
        return _int(a) and _int(b) and bool((b == 0).any())
    return _int(a) and isinstance(b, int) and b == 0


@op("binary")
def binary_tensor(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    b = g.var(_broadcasts(g.t(a)))
    out = g.fresh()
    form = g.rng.random()
    if form < 0.5:
        fn = g.rng.choice(_BIN_FUNCS)
        line = Line(f"{out} = torch.{fn}({a}, {b})", (), (out,), "binary")
        op_name = fn
    else:
        fn = g.rng.choice(_BIN_OPS)
        line = Line(f"{out} = {a} {fn} {b}", (), (out,), "binary")
        op_name = fn
    if _zero_int_divisor(g, op_name, g.t(a), g.t(b)):
        return Line(line.template, (), line.touched, "data_error")
    return line


@op("binary")
def binary_scalar(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    out, c = g.fresh(), g.scalar()
    r = g.rng.random()
    if r < 0.35:
        fn = g.rng.choice(_BIN_FUNCS)
        line = Line(f"{out} = torch.{fn}({a}, {{0}})", (c,), (out,), "binary")
        name = fn
    elif r < 0.7:
        name = g.rng.choice(_BIN_OPS)
        line = Line(f"{out} = {a} {name} {{0}}", (c,), (out,), "binary")
    elif r < 0.85:
        name = g.rng.choice(["+", "-", "*", "/"])
        line = Line(f"{out} = {{0}} {name} {a}", (c,), (out,), "binary")
    else:
        # A 0-d CPU tensor is allowed beside a lazy one (and promotes like a scalar).
        name = g.rng.choice(["+", "*", "-"])
        line = Line(f"{out} = {a} {name} torch.tensor({{0}})", (c,), (out,), "binary")
    if _zero_int_divisor(g, name, g.t(a), c):
        return Line(line.template, line.consts, line.touched, "data_error")
    return line


@op("binary")
def add_alpha(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    b = g.var(_broadcasts(g.t(a)))
    out = g.fresh()
    fn = g.rng.choice(["add", "sub"])
    return Line(f"{out} = torch.{fn}({a}, {b}, alpha={{0}})", (g.scalar(),), (out,), "binary")


_UNARY = ["neg", "abs", "exp", "log", "sqrt", "relu", "sigmoid", "tanh", "sign", "floor", "ceil", "round",
          "reciprocal", "logical_not", "bitwise_not", "isnan", "isinf", "nan_to_num", "sin", "square",
          "trunc", "frac", "rsqrt", "expm1", "log1p", "erf", "exp2", "signbit", "isfinite", "sgn"]


@op("unary")
def unary(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    out, fn = g.fresh(), g.rng.choice(_UNARY)
    if fn == "signbit":
        # The sign bit of a NaN is not specified (IEEE 754 leaves it to the operation;
        # x86 makes a negative NaN of inf - inf, a compiler may not): fuzz seed 301
        # program 21. Only the sign bits of numbers are compared.
        return Line(f"{out} = torch.signbit({a}) & ~torch.isnan({a})", (), (out,), "unary")
    if g.rng.random() < 0.5:
        return Line(f"{out} = torch.{fn}({a})", (), (out,), "unary")
    return Line(f"{out} = {a}.{fn}()", (), (out,), "unary")


# -- reductions, scans, softmax --------------------------------------------------------------
_REDUCE = ["sum", "mean", "prod", "any", "all", "std", "var", "logsumexp", "nansum", "count_nonzero"]


@op("reduce")
def reduce(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    t, out, fn = g.t(a), g.fresh(), g.rng.choice(_REDUCE)
    r = g.rng.random()
    if r < 0.2 and fn not in ("logsumexp",):
        return Line(f"{out} = {a}.{fn}()", (), (out,), "reduce")
    if r < 0.6:
        return Line(f"{out} = {a}.{fn}({{0}})", (g.dim(t),), (out,), "reduce")
    if r < 0.85 and fn != "count_nonzero":
        return Line(f"{out} = torch.{fn}({a}, {{0}}, keepdim={{1}})", (g.dim(t), g.rng.random() < 0.5),
                    (out,), "reduce")
    d1, d2 = g.dim(t), g.dim(t)
    return Line(f"{out} = torch.{fn}({a}, ({{0}}, {{1}}))", (d1, d2), (out,), "reduce")


@op("reduce")
def reduce_dtype(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    out = g.fresh()
    fn = g.rng.choice(["sum", "cumsum", "prod", "mean"])
    dtype = g.rng.choice([torch.float64, torch.int64, torch.float32])
    if _undefined_as_integer(g.t(a), dtype):
        return None
    return Line(f"{out} = torch.{fn}({a}, {{0}}, dtype={{1}})", (g.dim(g.t(a)), dtype), (out,), "reduce")


@op("cumsum")
def scan(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    out, fn = g.fresh(), g.rng.choice(["cumsum", "cumprod", "logcumsumexp"])
    return Line(f"{out} = torch.{fn}({a}, {{0}})", (g.dim(g.t(a)),), (out,), "cumsum")


@op("softmax")
def softmax(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    out = g.fresh()
    fn = g.rng.choice(["torch.softmax", "F.log_softmax", "torch.log_softmax"])
    if g.rng.random() < 0.2:
        return Line(f"{out} = {fn}({a}, {{0}}, dtype=torch.float64)", (g.dim(g.t(a)),), (out,), "softmax")
    return Line(f"{out} = {fn}({a}, {{0}})", (g.dim(g.t(a)),), (out,), "softmax")


# -- NaN-sensitive ops ----------------------------------------------------------------------
def _nan_operand(g: Generator, pred=None) -> str | None:
    """An operand for a NaN-sensitive op; with ``nan`` off, only NaN-free ones; with it on, prefer NaN."""
    if not g.nan_ok():
        return g.var(lambda t: _nan_free(t) and (pred is None or pred(t)))
    if g.rng.random() < 0.6:
        name = g.var(lambda t: _has_nan(t) and (pred is None or pred(t)))
        if name is not None:
            return name
    return g.var(pred)


def _nan_line(g: Generator, template: str, consts: tuple, touched: tuple[str, ...], *operands: str,
              ties: bool = False) -> Line | None:
    """``ties``: a maximum/minimum or a max/min reduction, undefined where opposite zeros
    meet (Line.tie_operands); such a line is not generated then."""
    nan = any(_has_nan(g.t(o)) for o in operands) or any(
        isinstance(c, float) and c != c for c in consts)
    if ties and opposite_zeros(*(g.t(o) for o in operands)):
        return None
    return Line(template, consts, touched, "nan" if nan else "minmax", operands if ties else ())


@op("minmax")
def clamp(g: Generator) -> Line | None:
    a = _nan_operand(g)
    if a is None:
        return None
    out = g.fresh()
    lo, hi = g.scalar(), g.scalar()
    if not g.nan_ok():
        lo, hi = (v if not (isinstance(v, float) and v != v) else 0.5 for v in (lo, hi))
    r = g.rng.random()
    if r < 0.4:
        return _nan_line(g, f"{out} = torch.clamp({a}, {{0}}, {{1}})", (lo, hi), (out,), a)
    if r < 0.7:
        fn = g.rng.choice(["clamp_min", "clamp_max"])
        return _nan_line(g, f"{out} = {a}.{fn}({{0}})", (lo,), (out,), a)
    b = _nan_operand(g, _broadcasts(g.t(a)))
    if b is None:
        return None
    return _nan_line(g, f"{out} = torch.clamp({a}, min={b})", (), (out,), a, b, ties=True)


@op("minmax")
def maximum(g: Generator) -> Line | None:
    a = _nan_operand(g)
    if a is None:
        return None
    b = _nan_operand(g, _broadcasts(g.t(a)))
    if b is None:
        return None
    out, fn = g.fresh(), g.rng.choice(["maximum", "minimum", "fmax", "fmin"])
    return _nan_line(g, f"{out} = torch.{fn}({a}, {b})", (), (out,), a, b, ties=True)


@op("minmax")
def max_reduce(g: Generator) -> Line | None:
    a = _nan_operand(g)
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    r = g.rng.random()
    if r < 0.25:
        fn = g.rng.choice(["max", "min", "argmax", "argmin", "amax", "amin"])
        return _nan_line(g, f"{out} = {a}.{fn}()", (), (out,), a, ties=True)
    if r < 0.55:
        fn = g.rng.choice(["argmax", "argmin", "amax", "amin"])
        return _nan_line(g, f"{out} = torch.{fn}({a}, {{0}})", (g.dim(t),), (out,), a, ties=True)
    if r < 0.75:
        fn = g.rng.choice(["max", "min"])
        idx = g.fresh()
        return _nan_line(g, f"{out}, {idx} = torch.{fn}({a}, {{0}}, keepdim={{1}})",
                         (g.dim(t), g.rng.random() < 0.5), (out, idx), a, ties=True)
    fn = g.rng.choice(["cummax", "cummin"])
    return _nan_line(g, f"{out} = torch.{fn}({a}, {{0}}).values", (g.dim(t),), (out,), a, ties=True)


@op("minmax")
def sort_topk(g: Generator) -> Line | None:
    a = _nan_operand(g)
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    if g.rng.random() < 0.5:
        idx = g.fresh()
        # stable=True: ties keep their order, so the indices are defined too.
        return _nan_line(g, f"{out}, {idx} = torch.sort({a}, {{0}}, descending={{1}}, stable=True)",
                         (g.dim(t), g.rng.random() < 0.5), (out, idx), a)
    k = g.rng.choice([1, 2])
    dim, draw = g.dim(t), g.rng.random()
    # topk's and kthvalue's indices among ties are unspecified: compare the values only. One
    # draw picks largest and, past 0.9, kthvalue (so seeds from before it draw the same).
    if draw >= 0.9:
        return _nan_line(g, f"{out} = torch.kthvalue({a}, {{0}}, {{1}}).values", (k, dim), (out,), a, ties=True)
    return _nan_line(g, f"{out} = torch.topk({a}, {{0}}, {{1}}, largest={{2}}).values",
                     (k, dim, draw < 0.7), (out,), a, ties=True)


# -- indexing ---------------------------------------------------------------------------------
@op("index")
def basic_index(g: Generator) -> Line | None:
    a = g.var(_nd(1))
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    n = t.shape[0]
    i = g.ints([-1, -2, 0, 1, n - 1, -n])
    r = g.rng.random()
    if r < 0.3:
        return Line(f"{out} = {a}[{{0}}]", (i,), (out,), "index")
    if r < 0.5 and t.dim() >= 2:
        j = g.ints([-1, -2, 0, 1])
        return Line(f"{out} = {a}[:, {{0}}]", (j,), (out,), "index")
    if r < 0.65:
        return Line(f"{out} = {a}[..., {{0}}]", (g.ints([-1, -2, 0]),), (out,), "index")
    if r < 0.8:
        return Line(f"{out} = {a}.select({{0}}, {{1}})", (g.dim(t), g.ints([-1, -2, 0, 1])), (out,),
                    "index")
    lo, hi = g.ints([None, -2, -1, 0, 1]), g.ints([None, -1, 2, 3, 10])
    return Line(f"{out} = {a}[{{0}}:{{1}}]", (lo, hi), (out,), "index")


@op("index")
def tensor_index(g: Generator) -> Line | None:
    a = g.var(_nd(1))
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    idx = g.var(lambda x: x.dtype == torch.int64 and x.dim() == 1)
    if idx is None:
        return None
    iv = g.t(idx)
    d = g.dim(t, allow_bad=False)
    size = t.shape[d] if t.dim() else 1
    in_range = bool(((iv >= -size) & (iv < size)).all())
    fn = g.rng.choice(["index_select", "getitem", "getitem_int32"])
    if fn == "index_select":
        nonneg = bool((iv >= 0).all())
        ok = in_range and nonneg
        line = Line(f"{out} = torch.index_select({a}, {{0}}, {idx})", (d,), (out,), "index")
    else:
        # int32 indices too: they failed to lower on every compiled backend (adversarial sweep).
        ok = in_range if t.dim() else False
        cast = ".int()" if fn == "getitem_int32" else ""
        line = Line(f"{out} = {a}[{idx}{cast}]", (), (out,), "index")
    return line if ok else Line(line.template, line.consts, line.touched, "data_error")


@op("scatter")
def scatter_into(g: Generator) -> Line | None:
    """An index_put / index_add / index_copy / scatter / ``a[idx] = c`` into ``a`` or a slice
    of it: IREE fused a slice's copy into the scatter (a compile failure), and a first fix let
    two scatters of one slice write into one buffer (a wrong value). The value written is one
    constant, so duplicate indices leave nothing to the order of writes."""
    a = g.var(lambda x: x.dim() >= 1 and x.shape[0] >= 1)
    idx = g.var(lambda x: x.dtype == torch.int64 and x.dim() == 1 and x.numel() >= 1)
    if a is None or idx is None:
        return None
    t, iv = g.t(a), g.t(idx)
    slices = ["", "[1:]", "[::2]"] + (["[:, :2]", "[:, 1:]"] if t.dim() >= 2 else [])
    dst = a + g.rng.choice(slices)
    view = eval(dst, {}, {a: t})  # noqa: S307 - a slice expression built above
    if view.dim() == 0 or view.shape[0] == 0:
        return None
    n = view.shape[0]
    wrapped, nonneg = bool(((iv >= -n) & (iv < n)).all()), bool(((iv >= 0) & (iv < n)).all())
    out, c = g.fresh(), g.scalar()
    src = f"{dst}.new_full(({idx}.numel(), *{dst}.shape[1:]), {{0}})"
    form = g.rng.choice(["index_put", "index_put_acc", "index_add", "index_copy", "scatter", "setitem"])
    if form.startswith("index_put"):
        acc = form == "index_put_acc"
        line, ok = Line(f"{out} = {dst}.index_put(({idx},), {dst}.new_full((), {{0}}), accumulate={acc})",
                        (c,), (out,), "scatter"), wrapped
    elif form in ("index_add", "index_copy"):
        line, ok = Line(f"{out} = {dst}.{form}(0, {idx}, {src})", (c,), (out,), "scatter"), nonneg
    elif form == "scatter":
        shape = (iv.numel(), *[1] * (view.dim() - 1))
        line, ok = Line(f"{out} = {dst}.scatter(0, {idx}.view{shape}, {{0}})", (c,), (out,), "scatter"), nonneg
    else:
        if not _writable(t) or iv.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
            # An index sharing the written tensor's memory: eager's kernel reads indices it has
            # already overwritten (``v[::2][v] = 0``), so its answer is its loop order's, which
            # PyTorch documents no value for and a functional graph cannot have (fuzz seeds
            # 9512, 9513): not generated.
            return None
        line, ok = Line(f"{dst}[{idx}] = {{0}}", (c,), (a,), "scatter"), wrapped
    return line if ok else Line(line.template, line.consts, line.touched, "data_error")


# -- views and in-place ops -----------------------------------------------------------------------
@op("view")
def view(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    choices = [
        (f"{out} = {a}.reshape(-1)", ()),
        (f"{out} = {a}.unsqueeze({{0}})", (g.rng.choice([0, -1, t.dim()]),)),
        (f"{out} = {a}.view(-1)", ()),
        (f"{out} = {a}.flatten()", ()),
        (f"{out} = {a}.contiguous()", ()),
    ]
    if t.dim() >= 1:
        choices += [(f"{out} = {a}.squeeze({{0}})", (g.dim(t),)),
                    (f"{out} = {a}[::2]", ()),
                    (f"{out} = {a}.narrow({{0}}, {{1}}, 1)", (g.dim(t), g.rng.choice([0, 1, -1]))),
                    (f"{out} = {a}.expand(2, *{a}.shape)", ())]
    if t.dim() >= 2:
        choices += [(f"{out} = {a}.transpose({{0}}, {{1}})", (g.dim(t), g.dim(t))),
                    (f"{out} = {a}.movedim(0, -1)", ()),
                    (f"{out} = {a}.diagonal()", ()),
                    (f"{out} = {a}.mT", ())]
    if t.dim() == 2:
        choices.append((f"{out} = {a}.t()", ()))
    if t.dim() == 3:
        choices.append((f"{out} = {a}.permute(2, 0, 1)", ()))
    template, consts = g.rng.choice(choices)
    return Line(template, consts, (out,), "view")


@op("view")
def roll(g: Generator) -> Line | None:
    """``torch.roll`` by shifts up to twice the size either way, with or without dims: a shift
    of the size or more rolled by the shift as is (adversarial sweep)."""
    a = g.var()
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    if t.dim() == 0 or g.rng.random() < 0.3:
        n = max(t.numel(), 1)
        return Line(f"{out} = torch.roll({a}, {{0}})", (g.rng.randint(-2 * n, 2 * n),), (out,), "view")
    d = g.dim(t, allow_bad=False)
    n = max(t.shape[d], 1)
    return Line(f"{out} = torch.roll({a}, {{0}}, {{1}})", (g.rng.randint(-2 * n, 2 * n), d), (out,), "view")


_INPLACE = ["add_", "sub_", "mul_", "div_", "clamp_min_", "remainder_", "pow_"]


def _castable(g: Generator, target: torch.Tensor, other: object) -> bool:
    try:
        return torch.can_cast(torch.result_type(target, other), target.dtype)
    except (RuntimeError, TypeError):
        return True


def _reads_what_it_writes(dst: torch.Tensor, src: torch.Tensor) -> bool:
    """Whether eager's in-place/``out=`` kernel may read ``src`` elements it already wrote to
    ``dst``: they share memory in a layout ATen does not classify (its overlap status is
    TOO_HARD when either is not non-overlapping and dense, and then it does not check).
    The result depends on eager's loop order (``torch.mul(v, v.narrow(3, 0, 1), out=v)``);
    a functional graph cannot have it, and PyTorch documents no value: not generated."""
    from torch._prims_common import is_non_overlapping_and_dense_or_false as dense

    if dst is src or dst.untyped_storage().data_ptr() != src.untyped_storage().data_ptr():
        return False
    if dense(dst) and dense(src):
        return False  # classified: eager refuses a partial overlap, lazy_core.overlap too
    size = dst.element_size()
    span = [(t.storage_offset() * size,
             (t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True)) + 1) * size)
            for t in (dst, src)]
    return span[0][0] < span[1][1] and span[1][0] < span[0][1]


def _writable(t: torch.Tensor) -> bool:
    """Not a tensor whose elements share memory in a layout ATen cannot classify (an
    ``as_strided`` with strides (1, 1)): eager writes it element by element, so an element
    reached twice is updated twice, a loop-order result PyTorch documents no value for. A
    stride-0 dimension stays writable: eager refuses it (an error to match)."""
    if any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride())):
        return True
    index = torch.zeros((), dtype=torch.int64)
    for d, (n, st) in enumerate(zip(t.shape, t.stride())):
        index = index.unsqueeze(-1) + torch.arange(n) * st if d else torch.arange(n) * st
    return index.numel() == index.unique().numel()


def _inplace_category(g: Generator, target: str, castable: bool) -> str:
    if not castable:
        return "inplace_cast"
    t = g.t(target)
    return "view_inplace" if t._base is not None else "inplace"


@op("inplace")
def inplace(g: Generator) -> Line | None:
    a = g.var(_writable)
    if a is None:
        return None
    t = g.t(a)
    r = g.rng.random()
    if r < 0.45:
        fn, c = g.rng.choice(_INPLACE), g.scalar()
        return Line(f"{a}.{fn}({{0}})", (c,), (a,), _inplace_category(g, a, _castable(g, t, c)))
    if r < 0.6:
        b = g.var(lambda x: _broadcasts(t)(x) and torch.broadcast_shapes(t.shape, x.shape) == t.shape)
        if b is None:
            return None
        if _reads_what_it_writes(t, g.t(b)):
            return None
        fn = g.rng.choice(_INPLACE[:4] + ["copy_"])
        castable = fn == "copy_" or _castable(g, t, g.t(b))
        return Line(f"{a}.{fn}({b})", (), (a,), _inplace_category(g, a, castable))
    if r < 0.75:
        op_ = g.rng.choice(["+=", "*=", "-="])
        c = g.scalar()
        return Line(f"{a} {op_} {{0}}", (c,), (a,), _inplace_category(g, a, _castable(g, t, c)))
    if r < 0.85:
        fn = g.rng.choice(["zero_()", "fill_({0})", "relu_()", "neg_()", "abs_()", "logical_not_()"])
        return Line(f"{a}.{fn}", (g.scalar(),) if "{0}" in fn else (), (a,), _inplace_category(g, a, True))
    if t.dim() >= 1:
        i = g.ints([-1, -2, 0, 1])
        return Line(f"{a}[{{0}}] = {{1}}", (i, g.scalar()), (a,), _inplace_category(g, a, True))
    return None


@op("view_inplace")
def inplace_through_view(g: Generator) -> Line | None:
    a = g.var(lambda x: x.dim() >= 1 and _writable(x))
    if a is None:
        return None
    t = g.t(a)
    c = g.scalar()
    castable = _castable(g, t, c)
    views = ["[0]", "[-1]", "[::2]", ".view(-1)", ".unsqueeze(0)"]
    if t.dim() >= 2:
        views += [".transpose(0, -1)", ".t()" if t.dim() == 2 else ".mT", "[:, -1]", ".diagonal()", "[:, 1:]"]
    v = g.rng.choice(views)
    fn = g.rng.choice(["add_({0})", "mul_({0})", "fill_({0})", "zero_()", "logical_not_()", "sub_({0})"])
    if fn.startswith(("fill_", "zero_", "logical_not_")):
        castable = True
    consts = (c,) if "{0}" in fn else ()
    return Line(f"{a}{v}.{fn}", consts, (a,), "view_inplace" if castable else "inplace_cast")


@op("inplace")
def out_variant(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    b = g.var(_broadcasts(g.t(a)))
    dst = g.var(lambda x: x.shape == torch.broadcast_shapes(g.t(a).shape, g.t(b).shape) and _writable(x))
    if dst is None:
        return None
    if _reads_what_it_writes(g.t(dst), g.t(a)) or _reads_what_it_writes(g.t(dst), g.t(b)):
        return None
    fn = g.rng.choice(["add", "mul", "sub", "maximum"])
    # maximum where 0.0 meets -0.0 is eager's loop's choice (fuzz seed 1205 p400: -0.0 from
    # its vectorized loop, 0.0 from its scalar one): see ``opposite_zeros``.
    if fn == "maximum" and opposite_zeros(g.t(a), g.t(b)):
        return None
    try:
        result = getattr(torch, fn)(g.t(a), g.t(b))
    except RuntimeError:
        return None
    castable = torch.can_cast(result.dtype, g.t(dst).dtype)
    return Line(f"torch.{fn}({a}, {b}, out={dst})", (), (dst,), _inplace_category(g, dst, castable),
                (a, b) if fn == "maximum" else ())


# -- storage layout ------------------------------------------------------------------------------
def _storage_numel(t: torch.Tensor) -> int:
    return t.untyped_storage().nbytes() // t.element_size()


@op("strided")
def strided(g: Generator) -> Line | None:
    """``as_strided`` addresses the storage, not the value: of a view, of a tensor written
    in another layout (``copy_`` of a transpose), of a channels-last copy; read, or written
    through when the elements it addresses are distinct. Sometimes past the storage's end
    (eager's error). Also a channels-last ``contiguous`` whose later ops keep the layout."""
    a = g.var(lambda x: x.numel() > 0 and not x.is_complex())
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    if t.dim() == 4 and g.rng.random() < 0.3:
        return Line(f"{out} = {a}.contiguous(memory_format=torch.channels_last)", (), (out,), "strided")
    n = _storage_numel(t)
    size = tuple(g.rng.randint(1, 3) for _ in range(g.rng.choice([1, 2])))
    stride = tuple(g.rng.choice([0, 1, 1, 2, 3, n // 2 or 1]) for _ in size)
    reach = sum((k - 1) * st for k, st in zip(size, stride))
    past = g.rng.random() < 0.05
    if reach >= n and not past:
        return None
    offset = g.rng.randint(0, max(n - 1 - reach, 0)) if not past else n - reach
    implicit = not past and g.rng.random() < 0.3 and t.storage_offset() + reach < n
    args = "({0}, {1})" if implicit else "({0}, {1}, {2})"
    consts = (size, stride) if implicit else (size, stride, offset)
    distinct = all(st > 0 for st in stride) and (
        len(size) == 1 or stride[0] >= (size[1] - 1) * stride[1] + 1 or stride[1] >= (size[0] - 1) * stride[0] + 1)
    if distinct and g.rng.random() < 0.3:
        fn = g.rng.choice(["mul_({3})", "add_({3})", "zero_()"])
        consts = (size, stride, offset, g.scalar()) if not implicit else (size, stride, None, g.scalar())
        if implicit:
            args = "({0}, {1})"
        return Line(f"{a}.as_strided{args}.{fn}", consts, (a,),
                    "strided" if fn == "zero_()" or _castable(g, t, consts[3]) else "inplace_cast")
    return Line(f"{out} = {a}.as_strided{args}", consts, (out,), "strided")


# -- casts, where, cat ----------------------------------------------------------------------------
def _undefined_as_integer(t: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether converting floating ``t`` to integer ``dtype`` is undefined behaviour in C++ and so
    in PyTorch itself (a NaN, an infinity, a value outside the integer's range): eager's answer is
    then whatever the CPU's conversion instruction gives (INT64_MIN on x86), not a rule to match.
    A reduction with ``dtype=`` converts its input first (fuzz seed 2200 p1177)."""
    if not t.is_floating_point() or dtype.is_floating_point or dtype == torch.bool:
        return False
    info, x = torch.iinfo(dtype), t.double()
    return not bool(((x > info.min - 1.0) & (x < info.max + 1.0)).all())


_CAST_DTYPES = [torch.float32, torch.float64, torch.int64, torch.int32, torch.bool, torch.float16]


@op("cast")
def cast(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    dtype = g.rng.choice(_CAST_DTYPES)
    if _undefined_as_integer(t, dtype):
        return None
    r = g.rng.random()
    if r < 0.5:
        return Line(f"{out} = {a}.to({{0}})", (dtype,), (out,), "cast")
    if r < 0.8:
        fn = {torch.float32: "float", torch.float64: "double", torch.int64: "long", torch.int32: "int",
              torch.bool: "bool", torch.float16: "half"}[dtype]
        return Line(f"{out} = {a}.{fn}()", (), (out,), "cast")
    b = g.var()
    if _undefined_as_integer(t, g.t(b).dtype):
        return None
    return Line(f"{out} = {a}.type_as({b})", (), (out,), "cast")


@op("where")
def where(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    out = g.fresh()
    cond = g.var(lambda x: x.dtype == torch.bool and _broadcasts(g.t(a))(x))
    cond_src = cond if cond is not None else f"{a} > 0"
    r = g.rng.random()
    if r < 0.4:
        b = g.var(_broadcasts(g.t(a)))
        return Line(f"{out} = torch.where({cond_src}, {a}, {b})", (), (out,), "where")
    if r < 0.75:
        return Line(f"{out} = torch.where({cond_src}, {a}, {{0}})", (g.scalar(),), (out,), "where")
    return Line(f"{out} = torch.where({cond_src}, {{0}}, {{1}})", (g.scalar(), g.scalar()), (out,), "where")


@op("where")
def masked_fill(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    out = g.fresh()
    return Line(f"{out} = {a}.masked_fill({a} > {{0}}, {{1}})", (g.scalar(), g.scalar()), (out,), "where")


@op("cat")
def cat(g: Generator) -> Line | None:
    a = g.var(_nd(1))
    if a is None:
        return None
    t = g.t(a)
    b = g.var(lambda x: x.dim() == t.dim()) or a
    out = g.fresh()
    if g.rng.random() < 0.7:
        return Line(f"{out} = torch.cat([{a}, {b}], {{0}})", (g.dim(t),), (out,), "cat")
    return Line(f"{out} = torch.stack([{a}, {b}], {{0}})", (g.rng.choice([0, -1, 1]),), (out,), "cat")


# -- matmul and linear -----------------------------------------------------------------------------
@op("matmul")
def matmul(g: Generator) -> Line | None:
    a = g.var(_nd(1))
    if a is None:
        return None
    t, out = g.t(a), g.fresh()
    if t.dim() >= 2 and g.rng.random() < 0.6:
        b = g.var(lambda x: x.shape == t.shape) or a
        return Line(f"{out} = {a} @ {b}.mT", (), (out,), "matmul")
    b = g.var(_nd(1))
    return Line(f"{out} = torch.matmul({a}, {b})", (), (out,), "matmul")


@op("linear")
def linear(g: Generator) -> Line | None:
    a = g.var(lambda x: x.dim() >= 1 and x.is_floating_point())
    if a is None:
        return None
    k, out = g.t(a).shape[-1], g.fresh()
    w = g.var(lambda x: x.dim() == 2 and x.shape[-1] == k)
    n = g.rng.choice([2, 4, 8])
    w_src = w if w is not None else f"torch.full(({n}, {k}), 0.5, device=DEV)"
    rows = g.t(w).shape[0] if w is not None else n
    bias = g.var(lambda x: tuple(x.shape) == (rows,))
    r = g.rng.random()
    if r < 0.15:
        # linear of zeros (every RNN's first step): a computed zero tensor ...
        return Line(f"{out} = F.linear(torch.zeros_like({a}), {w_src}, {bias})", (), (out,), "linear")
    if r < 0.3:
        # ... and a zeros factory, which the compiler sees as a constant
        shape = tuple(g.t(a).shape)
        return Line(f"{out} = F.linear(torch.zeros({{0}}, device=DEV), {w_src}, {bias})", (shape,), (out,),
                    "linear")
    if r < 0.7:
        return Line(f"{out} = F.linear({a}, {w_src}, {bias})", (), (out,), "linear")
    if g.t(a).dim() == 2 and bias is not None:
        return Line(f"{out} = torch.addmm({bias}, {a}, {w_src}.t(), beta={{0}}, alpha={{1}})",
                    (g.scalar(), g.scalar()), (out,), "linear")
    return Line(f"{out} = F.linear({a}, {w_src})", (), (out,), "linear")


# -- convolution gradients ---------------------------------------------------------------------------
def _conv_size(n: int, k: int, s: int, p: int, d: int) -> int:
    return (n + 2 * p - d * (k - 1) - 1) // s + 1


@op("conv")
def conv_gradients(g: Generator) -> Line | None:
    """``aten.convolution_backward`` (what autograd calls for ``conv2d``) of a float32 value
    reshaped to ``[N, C, H, W]``: random sizes, strides, padding, dilation, groups and output
    mask. The data are small integers (rounded and clamped to [-4, 4], the weight and the output
    gradient from ``arange``), so every product and sum is exact in float32 and any summation
    order gives eager's bits: iree-cpu computes these gradients as matmuls over an im2col
    (lowering/conv_matmuls.py). NaN stays NaN through ``round``."""
    a = g.var(lambda x: x.dtype == torch.float32 and x.numel() >= 1)
    if a is None:
        return None
    rng = g.rng
    n, c, f = rng.choice([1, 2, 3]), rng.choice([1, 2, 8, 9]), rng.choice([1, 2, 8])
    size = [rng.choice([1, 2, 3, 5, 7]), rng.choice([1, 2, 4, 6])]
    kernel = [rng.choice([1, 2, 3]) for _ in range(2)]
    stride = [rng.choice([1, 1, 2, 3]) for _ in range(2)]
    padding = [rng.choice([0, 0, 1, 2]) for _ in range(2)]
    dilation = [rng.choice([1, 1, 2]) for _ in range(2)]
    groups = 2 if c % 2 == 0 and f % 2 == 0 and rng.random() < 0.2 else 1
    out = [_conv_size(size[d], kernel[d], stride[d], padding[d], dilation[d]) for d in range(2)]
    if min(out) < 1:
        return None
    mask = [rng.random() < 0.8 for _ in range(3)]
    if not any(mask):
        mask[1] = True
    numel = n * c * size[0] * size[1]
    reps = -(-numel // g.t(a).numel())
    # float32 even where a twin's constant made ``a`` an integer: eager's errors for mixed dtypes
    # depend on the kernel it picks (RuntimeError or NotImplementedError), not a rule to match.
    x = (f"{a}.reshape(-1).to(torch.float32).round().clamp(-4, 4).repeat({reps})[:{numel}]"
         f".reshape({n}, {c}, {size[0]}, {size[1]})")
    wn, gn = f * (c // groups) * kernel[0] * kernel[1], n * f * out[0] * out[1]
    w = (f"(torch.arange({wn}, device=DEV, dtype=torch.float32) % 7 - 3)"
         f".reshape({f}, {c // groups}, {kernel[0]}, {kernel[1]})")
    go = f"(torch.arange({gn}, device=DEV, dtype=torch.float32) % 5 - 2).reshape({n}, {f}, {out[0]}, {out[1]})"
    # Only the results the mask asks for: eager's CPU kernels compute some others anyway (the
    # weight gradient of a one-channel convolution with a stride), autograd never reads them.
    names = tuple(g.fresh() for m in mask if m)
    return Line(f"{', '.join(names)}, = [t for t, m in zip(torch.ops.aten.convolution_backward({go}, {x}, {w}, "
                f"[{f}], {stride}, {padding}, {dilation}, False, [0, 0], {groups}, {mask}), {mask}) if m]",
                (), names, "conv")


# -- reading a value in the middle (a graph break) ----------------------------------------------------
@op("read")
def read_item(g: Generator) -> Line | None:
    a = g.var()
    if a is None:
        return None
    b, out = g.var(), g.fresh()
    fn = g.rng.choice(["sum", "max", "min"])
    if fn != "sum" and opposite_zeros(g.t(a)):
        return None
    return Line(f"{out} = {b} * {a}.{fn}().item()", (), (out,), "read", (a,) if fn != "sum" else ())


CATEGORIES = sorted({c for c, _ in _registry} | {"nan", "inplace_cast", "special", "data_error", "errors",
                                                  "collide", "inexact", "subnormal"})
