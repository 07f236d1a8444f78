"""Every OpInfo op or variant the lazy tests do not check normally, and why.

This is the only place where the OpInfo tests (``test/test_opinfo.py``) and
the sweep (``tools/opinfo_sweep.py``) learn that an op is special; nothing is
skipped anywhere else. Keys are OpInfo names as ``opinfo_util.op_name``
spells them (``name`` or ``name.variant_test_name``).

* ``EXCLUDED``: not run at all (no meaningful comparison with eager exists).
* ``METADATA_ONLY``: run, but only shapes and dtypes are compared (the values
  are undefined, e.g. ``torch.empty``).
* ``CPU_ARGS``: tensor arguments that must stay on the CPU (shapes, not data).
* ``VALUES_ONLY``: of a (values, indices) result only the values are compared.
* ``TOLERANCES``: looser float tolerances than the defaults, with the reason.
* ``XFAIL``: known failures of the CI subset per backend (``"*"`` = every
  backend); the test is marked ``xfail(strict=True)`` so a fix is noticed.
  Each reason is the first line of the error (or the mismatch) seen.
* ``FLAKY``: (op, backend) pairs that fail only sometimes: ``strict=False``.
"""

from __future__ import annotations

_SPARSE = "sparse layout: lazy tensors are strided only (sparse inputs cannot move to lazy)"

EXCLUDED: dict[str, str] = {
    "sparse.mm.reduce": _SPARSE,
    "sparse.sampled_addmm": _SPARSE,
    "to_sparse": _SPARSE,
    "resize_": "resizing storage in place: lazy tensors have fixed shapes, the tracer raises "
               "NotImplementedError by design (lazy_core/fallback.py)",
    **{name: "CUDA-only (jiterator): no CPU reference" for name in (
        "jiterator_2inputs_2outputs", "jiterator_4inputs_with_extra_args", "jiterator_binary",
        "jiterator_binary_return_by_ref", "jiterator_unary")},
    **{name: "GPU-only op: no CPU dtypes" for name in (
        "nn.functional.batch_norm.without_cudnn", "torch.ops.aten._efficient_attention_forward",
        "torch.ops.aten._flash_attention_forward")},
    **{name: "complex-only op: the swept dtypes are float32/int64/bool" for name in (
        "imag", "istft", "view_as_real", "nn.functional.silu.complex")},
    **{name: "float8-only op: the swept dtypes are float32/int64/bool" for name in (
        "torch._scaled_mm", "torch._scaled_mm_v2")},
}

_UNINITIALIZED = "uninitialized memory: values are undefined, only shape and dtype are compared"

METADATA_ONLY: dict[str, str] = {
    "empty": _UNINITIALIZED,
    "empty_like": _UNINITIALIZED,
    "empty_strided": _UNINITIALIZED,
    "empty_permuted": _UNINITIALIZED,
    "new_empty": _UNINITIALIZED,
    "new_empty_strided": _UNINITIALIZED,
}

# Ops whose non-input tensor arguments must stay on the CPU (they are shapes, not data).
CPU_ARGS: dict[str, str] = {
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor (PyTorch checks it)",
}

# Ops returning (values, indices) whose indices are any of several equal
# elements (ties, common in int64 samples): only the values are compared.
VALUES_ONLY: dict[str, str] = {
    "kthvalue": "the index of a tied k-th value is implementation-defined",
    "topk": "the indices of tied top-k values are implementation-defined",
}

# name -> (rtol, atol, reason)
TOLERANCES: dict[str, tuple[float, float, str]] = {}

_NO_META = "runs eagerly: {} has no meta kernel in torch 2.13, so its shape cannot be inferred"

# (name, backend) -> reason; backend "*" means every backend.
XFAIL: dict[tuple[str, str], str] = {
    ("histogram", "*"): _NO_META.format("aten.histogram.bin_ct"),
    ("histogramdd", "*"): _NO_META.format("aten._histogramdd_bin_edges"),
    # nn.functional.adaptive_avg_pool2d failed on reference ("'tensor.cast' op operand type
    # 'tensor<1x8x7x7xf32>' and result type 'tensor<1x8x5x7xf32>' are cast incompatible"); uneven
    # windows are averaging matrices now (lowering/pooling.py).
    # nn.functional.max_pool2d failed to compile on IREE ("'linalg.generic' op inferred
    # input/output operand #1 has shape's dimension #0 to be 5, but found 3"); it passes since
    # max_pool2d_with_indices is eager's scan (lowering/pooling.py).
}

FLAKY: dict[tuple[str, str], str] = {}


def excluded_reason(name: str) -> str | None:
    return EXCLUDED.get(name)


def xfail_reason(name: str, backend: str) -> tuple[str, bool] | None:
    """(reason, strict) if ``name`` is known to fail on ``backend`` in the CI subset."""
    for key in ((name, backend), (name, "*")):
        if key in FLAKY:
            return FLAKY[key], False
        if key in XFAIL:
            return XFAIL[key], True
    return None
