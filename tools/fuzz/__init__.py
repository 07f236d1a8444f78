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

from .driver import Config, Failure, Report, fuzz
from .ops import CATEGORIES

__all__ = ["CATEGORIES", "Config", "Failure", "Report", "fuzz"]
