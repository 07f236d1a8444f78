"""Pass pipelines from the imported torch dialect to each backend contract.

``lower(computation, target)`` runs torch-mlir's pipelines on a copy of the
module and verifies the result. On failure it writes a repro (the input MLIR
with locations, and the pipeline) and raises ``LoweringError`` naming the
failing op and the user's source line from the MLIR diagnostic location.

Reaching the torch backend contract has two routes. The full one
(``torch-function-to-torch-backend-pipeline``) re-derives every shape and
dtype with torch-mlir's abstract-interpretation library, which costs about a
second per graph however small. The importer already gives every value a
static shape and dtype, so the fast route (the dynamo-export pipeline) is
enough for most graphs and takes milliseconds; the full route runs only when
the fast one leaves the contract unsatisfied (some decompositions create
tensors of unknown rank) or the next stage fails on its output.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import replace
from typing import Any

from lazy_core import metrics

from .computation import Computation
from .errors import LoweringError, repro_dir
from .tensor_bitcasts import view_dtype_as_linalg

# torch-function-to-torch-backend-pipeline, not torchdynamo-export-...: its
# backend-contract loop refines shapes after decomposing, which ops like
# nll_loss_forward need (their decomposition makes unranked 0-d tensors).
TORCH_BACKEND = (
    "builtin.module(func.func(torch-match-quantized-custom-ops), "
    "torch-function-to-torch-backend-pipeline)"
)
#: Ops the fast route keeps whole on the way to linalg: their decompositions
#: make tensors of unknown rank that only the full route's shape refinement
#: can type, while torch-mlir lowers them to linalg directly. The "torch"
#: target keeps nothing extra whole, so its consumers (IREE's torch input)
#: see the same op set as the full route gives.
FAST_ROUTE_LEGAL_OPS = ("aten.nll_loss_forward", "aten.nll_loss_backward")
_KEEP_WHOLE = {"linalg-on-tensors": FAST_ROUTE_LEGAL_OPS}


def fast_torch_backend_pipeline(keep_whole: tuple[str, ...] = ()) -> str:
    """The fast route, checked by torch-mlir's own contract verifier."""
    legal = f"{{backend-legal-ops={','.join(keep_whole)}}}" if keep_whole else ""
    return (
        "builtin.module(func.func(torch-match-quantized-custom-ops), "
        f"torchdynamo-export-to-torch-backend-pipeline{legal}, "
        "torch-verify-backend-contract-no-decompositions)"
    )


TORCH_BACKEND_FAST = fast_torch_backend_pipeline()

#: The full route's ``convolution_backward`` decomposition takes only 2-d convolutions: a 1-d or
#: 3-d one stayed, "marked as backend illegal", and a graph that needed the full route (a
#: cross-entropy loss, whose decomposition needs its shape refinement) failed whole: every
#: Whisper training step (Conv1d front end) ran op by op. Kept whole instead, it is lowered by
#: torch-mlir's own conversion, as on the fast route, where it stays whole anyway.
_CONV_BACKWARD_TYPE = re.compile(r"torch\.aten\.convolution_backward [^:]*: !torch\.vtensor<\[([^\]]*)\]")
TORCH_BACKEND_KEEPING_CONV_BACKWARD = (
    "builtin.module(func.func(torch-match-quantized-custom-ops), "
    "torch-function-to-torch-backend-pipeline{backend-legal-ops=aten.convolution_backward})"
)


def full_torch_backend_pipeline(source: str) -> str:
    """The full route for the imported ``source``: ``TORCH_BACKEND``, keeping
    ``convolution_backward`` whole where one is not 2-d."""
    if any(len(m.group(1).split(",")) != 4 for m in _CONV_BACKWARD_TYPE.finditer(source)):
        return TORCH_BACKEND_KEEPING_CONV_BACKWARD
    return TORCH_BACKEND
_BACKEND_PIPELINES = {
    "linalg-on-tensors": "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)",
    "tosa": "builtin.module(torch-backend-to-tosa-backend-pipeline)",
    "stablehlo": "builtin.module(torch-backend-to-stablehlo-backend-pipeline)",
}
TARGETS = ("raw", "torch", *_BACKEND_PIPELINES)


def pipeline_for(target: str) -> list[str]:
    """The pipelines (in order) that take imported torch IR to ``target``.

    This is the authoritative (full) route; ``lower`` may take the fast one
    to the torch contract first when it gives a valid result.
    """
    if target == "raw":
        return []
    if target == "torch":
        return [TORCH_BACKEND]
    if target not in _BACKEND_PIPELINES:
        raise ValueError(f"unknown lowering target {target!r}; choose one of {', '.join(TARGETS)}")
    return [TORCH_BACKEND, _BACKEND_PIPELINES[target]]


_LOC = re.compile(r'loc\("([^"]+)":(\d+):\d+\)')
_DIAG_LOC = re.compile(r'"([^"]+)":(\d+):\d+')
_OP = re.compile(r"'?(torch\.aten\.[\w.]+|torch\.prims\.[\w.]+)'?")
_UNKNOWN_OP = re.compile(r'name = "((?:aten|prims)\.[\w.]+)"')


def _location_of(diag_loc: str) -> str | None:
    m = _LOC.search(diag_loc) or _DIAG_LOC.search(diag_loc)
    return f"{m.group(1)}:{m.group(2)}" if m else None


def _run(module: Any, pipeline: str, form: str) -> None:
    """Run ``pipeline`` on ``module`` in place (raises MLIRError)."""
    from torch_mlir.passmanager import PassManager

    if pipeline == _BACKEND_PIPELINES["linalg-on-tensors"]:
        view_dtype_as_linalg(module, pipeline)  # torch-mlir has no linalg lowering of view.dtype
    with module.context:
        pm = PassManager.parse(pipeline)
        with metrics.timed(f"pipeline:{form}"):
            pm.run(module.operation)
        module.operation.verify()


def run_pipeline(computation: Computation, pipeline: str, form: str) -> Computation:
    """Run one pass pipeline on a copy of ``computation``'s module."""
    from torch_mlir.ir import MLIRError

    module = computation.clone_module()
    try:
        _run(module, pipeline, form)
    except MLIRError as e:
        raise _failure(computation, pipeline, form, e, partial=module) from None
    return replace(computation, module=module, form=form)


#: Torch-dialect ops a conversion leaves behind only because a user of theirs
#: was not converted (a shared constant, a list of operands): never the culprit.
_BYSTANDERS = ("torch.constant.", "torch.prim.ListConstruct", "torch.prim.NumToTensor", "torch_c.")


def _ops(module: Any) -> Any:
    """Every operation of ``module``, in order."""
    stack = [module.operation]
    while stack:
        op = stack.pop()
        children = [o.operation for r in op.regions for b in r.blocks for o in b.operations]
        yield from children
        stack.extend(reversed(children))


def leftover_op(module: Any) -> tuple[str, str | None] | None:
    """The first torch-dialect op that a failed conversion left in ``module``
    (not a constant it kept for it), with its user's ``file:line``.

    A conversion that cannot lower an op leaves it and its constants behind,
    and the backend-contract check then reports the first leftover, which is
    usually a constant that the importer shares between ops and so carries
    no location (``loc(unknown)``). The real culprit is the op that needed it.
    """
    first_any = None
    for op in _ops(module):
        name = op.name
        if not name.startswith("torch."):
            continue
        location = _location_of(str(op.location))
        if name.startswith(_BYSTANDERS):
            continue
        if name == "torch.operator":  # an op without a definition: name it by its own name
            name = str(op.attributes["name"]).strip('"')
        if first_any is None:
            first_any = (name, location)
        if location is not None:
            return name, location
    return first_any


def explain(computation: Computation) -> tuple[str, str | None] | None:
    """Why ``computation`` cannot be compiled, as (op, ``file:line``), or None.

    For compilers whose own diagnostics name no op (iree-compile reports the
    shared constant it could not legalize): torch-mlir's linalg conversion
    is run on a copy, and the first op it could not convert is named.
    """
    from torch_mlir.ir import MLIRError

    if computation.form != "torch":
        return None
    try:
        # Imported and backend-contract forms are both "torch"; the pipeline
        # takes either to the contract.
        torch_form = to_torch_backend(computation)
    except LoweringError as e:
        op = getattr(e, "op", None)
        return (op, e.location) if op else None
    module = torch_form.clone_module()
    try:
        _run(module, _BACKEND_PIPELINES["linalg-on-tensors"], "explain")
    except MLIRError:
        return leftover_op(module)
    return None


def _failure(computation: Computation, pipeline: str, form: str, e: Exception,
             partial: Any = None) -> LoweringError:
    """A LoweringError naming the op and user line, with the repro written to disk.

    ``partial`` is the module as the failed pipeline left it: when the
    diagnostic blames a constant (or has no location), the op that was left
    unconverted there is named instead.
    """
    diags = getattr(e, "error_diagnostics", None) or []
    first = diags[0] if diags else None
    message = first.message if first is not None else str(e)
    location = _location_of(str(first.location)) if first is not None else None
    op = None
    texts = [message] + [n.message for n in getattr(first, "notes", [])] if first is not None else [str(e)]
    for text in texts:
        # The op is named in the message or the notes ("failed to legalize 'torch.aten.x'"),
        # or, for an op without a torch-dialect definition, as torch.operator's name.
        m = _UNKNOWN_OP.search(text) or _OP.search(text)
        if m:
            op = m.group(1)
            break
    if partial is not None and (op is None or location is None):
        try:
            culprit = leftover_op(partial)
        except Exception:  # a diagnosis must never hide the original error
            culprit = None
        if culprit is not None:
            op = culprit[0]
            location = culprit[1] or location
    # The input is intact: pipelines ran on a clone.
    source = computation.mlir
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    path = os.path.join(repro_dir(), f"{computation.func_name}-{form}-{digest}.mlir")
    with open(path, "w") as f:
        f.write(f"// Reproduce: torch-mlir-opt --pass-pipeline='{pipeline}' {path}\n")
        f.write(source)
    what = f"lowering {computation.func_name} to {form} failed"
    if op:
        what += f" at {op}"
    if location:
        what += f" ({location})"
    detail = message.strip().splitlines()[0] if message.strip() else type(e).__name__
    error = LoweringError(f"{what}: {detail}", repro_path=path, location=location)
    error.op = op  # type: ignore[attr-defined]
    return error


def to_torch_backend(computation: Computation, fast: bool = True,
                     keep_whole: tuple[str, ...] = ()) -> Computation:
    """``computation`` (as imported) in torch backend-contract form.

    With ``fast``, try the cheap route first and fall back to the full one
    when torch-mlir's contract verifier rejects the result.
    """
    from torch_mlir.ir import MLIRError

    if fast:
        module = computation.clone_module()
        try:
            _run(module, fast_torch_backend_pipeline(keep_whole), "torch")
            return replace(computation, module=module, form="torch", full_route=False)
        except MLIRError:
            metrics.counter_add("lowering_full_torch_pipeline")
    pipeline = full_torch_backend_pipeline(computation.mlir)
    return replace(run_pipeline(computation, pipeline, "torch"), full_route=True)


def _full_route_may_help(torch_form: Computation) -> bool:
    """Whether the full route would give a different torch form: only where the
    fast one kept an op whole or left a dimension unknown."""
    text = torch_form.asm(locations=False)
    return "?" in text or any(f"torch.{op} " in text for op in FAST_ROUTE_LEGAL_OPS)


def lower(computation: Computation, target: str) -> Computation:
    """``computation`` (imported torch IR) lowered to ``target``'s contract."""
    pipeline_for(target)  # validates the name
    if target == "raw":
        return computation
    torch_form = to_torch_backend(computation, keep_whole=_KEEP_WHOLE.get(target, ()))
    if target == "torch":
        return torch_form
    from torch_mlir.ir import MLIRError

    pipeline = _BACKEND_PIPELINES[target]
    module = torch_form.clone_module()
    try:
        _run(module, pipeline, target)
        return replace(torch_form, module=module, form=target)
    except MLIRError as e:
        if torch_form.full_route or not _full_route_may_help(torch_form):
            raise _failure(torch_form, pipeline, target, e, partial=module) from None
    # The fast torch form was valid but not enough for this target (e.g. it
    # needed shapes only the full route refines): redo it the authoritative way.
    metrics.counter_add("lowering_full_torch_pipeline")
    return run_pipeline(to_torch_backend(computation, fast=False), pipeline, target)
