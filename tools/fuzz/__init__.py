"""A differential fuzzer: random ATen programs on the lazy device against eager CPU.

``python -m tools.fuzz --backend iree-cpu --programs 500 --seeds 0,1,2`` (or
``make fuzz``) generates programs of elementwise ops with scalar and tensor
operands, reductions and indexing on negative and positive dims, views and
in-place ops through them, casts, ``where``, ``cat``, softmax, scans,
matmul and convolution gradients, with constants that collide in Python
(values.py). Each program runs on eager CPU and on the lazy device in one
long-lived process (caches shared) and must agree in values, dtypes, shapes,
NaN positions, signs of zeros and raised errors (check.py). Programs run in
batches, one graph per batch; a batch whose graph failed to compile (and so
ran eagerly whole) is run again program by program, so the others are still
compared with compiled code. A mismatch is shrunk and printed as a standalone
script (shrink.py). It depends on lazy_core's public API only.

``--stateful`` fuzzes multi-step programs instead: state updated in place
over several steps and ``mark_step()``s, where buffer donation acts
(stateful.py).
"""

import os

import torch

from .driver import Config, Failure, Report, fuzz
from .ops import CATEGORIES

__all__ = ["CATEGORIES", "DEFAULT_DTYPES", "Config", "Failure", "Report", "fuzz", "set_default_dtype",
           "under_default_dtype"]

#: What ``--default-dtype`` / ``FUZZ_DEFAULT_DTYPE`` may name.
DEFAULT_DTYPES = ("float32", "float64", "float16", "bfloat16")


def set_default_dtype() -> None:
    """``torch.set_default_dtype`` to ``FUZZ_DEFAULT_DTYPE``, if set (every entry point of the
    fuzzer calls this: child processes and crash shrinking read it from the environment)."""
    name = os.environ.get("FUZZ_DEFAULT_DTYPE")
    if name:
        if name not in DEFAULT_DTYPES:
            raise SystemExit(f"FUZZ_DEFAULT_DTYPE={name}: one of {', '.join(DEFAULT_DTYPES)}")
        torch.set_default_dtype(getattr(torch, name))


def under_default_dtype(repro: str) -> str:
    """A repro script that sets ``FUZZ_DEFAULT_DTYPE``'s default dtype after its imports."""
    name = os.environ.get("FUZZ_DEFAULT_DTYPE")
    if not name or name == "float32":
        return repro
    lines = repro.splitlines(keepends=True)
    at = max((i + 1 for i, line in enumerate(lines) if line.startswith(("import ", "from "))), default=0)
    return "".join(lines[:at] + [f"torch.set_default_dtype(torch.{name})\n"] + lines[at:])


set_default_dtype()
