"""Pass pipelines from the imported torch dialect to each backend contract.

``lower(computation, target)`` runs torch-mlir's pipelines on a copy of the
module and verifies the result. On failure it writes a repro (the input MLIR
with locations, and the pipeline) and raises ``LoweringError`` naming the
failing op and the user's source line from the MLIR diagnostic location.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import replace

from lazy_core import metrics

from .computation import Computation
from .errors import LoweringError, repro_dir

TORCH_BACKEND = (
    "builtin.module(func.func(torch-match-quantized-custom-ops), "
    "torchdynamo-export-to-torch-backend-pipeline)"
)
_BACKEND_PIPELINES = {
    "linalg-on-tensors": "builtin.module(torch-backend-to-linalg-on-tensors-backend-pipeline)",
    "tosa": "builtin.module(torch-backend-to-tosa-backend-pipeline)",
    "stablehlo": "builtin.module(torch-backend-to-stablehlo-backend-pipeline)",
}
TARGETS = ("raw", "torch", *_BACKEND_PIPELINES)


def pipeline_for(target: str) -> list[str]:
    """The pipelines (in order) that take imported torch IR to ``target``."""
    if target == "raw":
        return []
    if target == "torch":
        return [TORCH_BACKEND]
    if target not in _BACKEND_PIPELINES:
        raise ValueError(f"unknown lowering target {target!r}; choose one of {', '.join(TARGETS)}")
    return [TORCH_BACKEND, _BACKEND_PIPELINES[target]]


_LOC = re.compile(r'loc\("([^"]+)":(\d+):\d+\)')


def _location_of(diag_loc: str) -> str | None:
    m = _LOC.search(diag_loc)
    return f"{m.group(1)}:{m.group(2)}" if m else None


def run_pipeline(computation: Computation, pipeline: str, form: str) -> Computation:
    """Run one pass pipeline on a copy of ``computation``'s module."""
    from torch_mlir.ir import MLIRError
    from torch_mlir.passmanager import PassManager

    source = computation.mlir
    module = computation.clone_module()
    with module.context:
        pm = PassManager.parse(pipeline)
        try:
            with metrics.timed(f"pipeline:{form}"):
                pm.run(module.operation)
            module.operation.verify()
        except MLIRError as e:
            raise _failure(computation, source, pipeline, form, e) from None
    return replace(computation, module=module, form=form)


def _failure(computation: Computation, source: str, pipeline: str, form: str, e: Exception) -> LoweringError:
    diags = getattr(e, "error_diagnostics", None) or []
    first = diags[0] if diags else None
    message = first.message if first is not None else str(e)
    location = _location_of(str(first.location)) if first is not None else None
    op = None
    if first is not None:
        # The op is usually named in the message or the notes ("failed to legalize 'torch.aten.x'").
        for text in [message] + [n.message for n in getattr(first, "notes", [])]:
            m = re.search(r"'?(torch\.aten\.[\w.]+|torch\.prims\.[\w.]+)'?", text)
            if m:
                op = m.group(1)
                break
        if op is None:
            m = re.search(r"(torch\.aten\.[\w.]+)", source.splitlines()[0] if source else "")
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    path = os.path.join(repro_dir(), f"{computation.func_name}-{form}-{digest}.mlir")
    with open(path, "w") as f:
        f.write(f"// Reproduce: torch-mlir-opt --pass-pipeline='{pipeline}' {path}\n")
        f.write(source)
    what = f"lowering to {form} failed"
    if op:
        what += f" at {op}"
    return LoweringError(f"{what}: {message.strip()}", repro_path=path, location=location)


def lower(computation: Computation, target: str) -> Computation:
    """``computation`` (imported torch IR) lowered to ``target``'s contract."""
    result = computation
    forms = ["torch", target] if target != "torch" else ["torch"]
    for pipeline, form in zip(pipeline_for(target), forms):
        result = run_pipeline(result, pipeline, form)
    return result
