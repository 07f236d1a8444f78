"""OpInfo coverage in CI: one float32 sample per op, lazy vs eager CPU, per backend.

PyTorch's OpInfo database (``op_db``) is how LTC and PyTorch/XLA test op
coverage. Here each op's first sample runs on ``lazy`` and on the CPU and
the results (and inputs, for in-place writes) must agree; an op that should
trace must not fall back to eager. On ``eager`` every op in ``op_db`` runs
(tracer coverage: tracing costs milliseconds); on compiled backends a
curated list of common ops runs, because each op costs a compile (0.1-1 s).
The full sweep over all samples and dtypes is ``tools/opinfo_sweep.py``.

Everything special about an op (excluded, values undefined, looser
tolerance, known failure on a backend) is in ``test/opinfo_exclusions.py``.
"""

from __future__ import annotations

import os

import opinfo_exclusions as ex
import opinfo_util as u
import pytest
import torch
from conftest import backend_unavailable_reason, requested_backends

import lazy_core

#: The tracer-only backend runs every op; compiled ones run these.
COMPILED_SUBSET = (
    # elementwise
    "abs", "neg", "exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "sin", "cos", "erf", "floor",
    "reciprocal", "clamp", "sign", "log1p", "pow", "nn.functional.relu", "nn.functional.gelu",
    "nn.functional.silu", "nn.functional.leaky_relu", "nn.functional.hardtanh",
    "add", "sub", "mul", "div.no_rounding_mode", "maximum", "minimum", "where", "eq", "lt", "ne",
    "remainder", "atan2", "lerp", "masked_fill", "addcmul",
    # reductions
    "sum", "mean", "amax", "amin", "max.reduction_with_dim", "argmax", "prod", "var", "std",
    "logsumexp", "cumsum", "softmax", "log_softmax", "norm", "all", "any",
    # linear algebra
    "mm", "bmm", "matmul", "addmm", "nn.functional.linear", "einsum", "baddbmm",
    # shapes and indexing
    "reshape", "view", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze", "cat",
    "stack", "split", "chunk", "narrow", "select", "flip", "roll", "repeat", "tril", "triu",
    "gather", "scatter", "index_select", "__getitem__",
    # nn
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
    "nn.functional.adaptive_avg_pool2d", "nn.functional.layer_norm", "nn.functional.batch_norm",
    "nn.functional.embedding", "nn.functional.cross_entropy", "nn.functional.mse_loss",
    "nn.functional.pad.constant", "nn.functional.scaled_dot_product_attention",
    "nn.functional.dropout",
    # factories and conversions
    "zeros_like", "ones_like", "full", "arange", "to", "clone",
)

#: IREE compiles cost ~1 s per op (iree-compile per graph, cold cache in CI): the
#: core of the list above, so that iree-cpu and iree-vulkan each stay near a minute.
#: ``LAZY_OPINFO_FULL_SUBSET=1`` runs all of COMPILED_SUBSET there too.
IREE_SUBSET = (
    "abs", "exp", "log", "rsqrt", "sigmoid", "tanh", "erf", "pow", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "add", "mul", "div.no_rounding_mode", "maximum",
    "where", "lt", "masked_fill", "clamp",
    "sum", "mean", "amax", "max.reduction_with_dim", "var", "softmax", "log_softmax", "cumsum", "logsumexp",
    "mm", "bmm", "matmul", "addmm", "nn.functional.linear",
    "reshape", "permute", "transpose", "expand", "cat", "split", "select", "gather", "scatter",
    "index_select",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.layer_norm",
    "nn.functional.batch_norm", "nn.functional.embedding", "nn.functional.cross_entropy",
    "nn.functional.scaled_dot_product_attention",
    "full", "to",
)

_SAMPLE_TIMEOUT_S = 120.0


def _subset(backend: str, all_ops: list[str]) -> tuple[str, ...] | list[str]:
    if backend == "eager":
        return all_ops
    if backend.startswith("iree") and os.environ.get("LAZY_OPINFO_FULL_SUBSET", "0") in ("", "0"):
        return IREE_SUBSET
    return COMPILED_SUBSET


def _dtype(op: object) -> torch.dtype | None:
    for dtype in u.SWEEP_DTYPES:
        if u.supports_dtype(op, dtype):
            return dtype
    return None


def _params() -> list:
    ops = u.ops_by_name()
    params = []
    for backend in requested_backends():
        names = _subset(backend, sorted(ops))
        for name in names:
            marks = []
            reason = ex.excluded_reason(name)
            if reason:
                marks.append(pytest.mark.skip(reason=f"excluded: {reason}"))
            elif _dtype(ops[name]) is None:
                marks.append(pytest.mark.skip(
                    reason=f"no float32/int64/bool CPU samples (dtypes {sorted(map(str, ops[name].dtypes))})"))
            else:
                xfail = ex.xfail_reason(name, backend)
                if xfail:
                    marks.append(pytest.mark.xfail(reason=xfail[0], strict=xfail[1]))
            params.append(pytest.param(backend, name, marks=marks, id=f"{backend}-{name}"))
    return params


_instances: dict[str, lazy_core.BackendImpl] = {}


def _activate(name: str) -> None:
    """Activate ``name`` with an empty cache (one instance per backend: IREE's takes seconds)."""
    reason = backend_unavailable_reason(name)
    if reason:
        pytest.skip(f"backend {name} unavailable: {reason}")
    if name not in _instances:
        _instances[name] = lazy_core.create_backend(name)
    lazy_core.init(_instances[name])
    lazy_core.executor().clear_cache()


@pytest.mark.parametrize(("backend_name", "name"), _params())
def test_opinfo(backend_name: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")  # a compile failure is a failure, not an eager rerun
    _activate(backend_name)
    op = u.ops_by_name()[name]
    dtype = _dtype(op)
    assert dtype is not None
    samples = u.samples(op, dtype, 1)
    assert samples, f"{name} has no {dtype} sample"
    with u.time_limit(_SAMPLE_TIMEOUT_S):
        result = u.run_sample(op, samples[0], dtype, backend_name, metadata_only=name in ex.METADATA_ONLY)
    if result.status == "skip":
        pytest.skip(f"the {dtype} sample is invalid on the CPU too: {result.message}")
    assert result.status in ("pass", "expected_fallback"), f"{result.status}: {result.message} {result.detail}"
