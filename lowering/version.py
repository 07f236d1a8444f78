"""What besides the graph decides the MLIR a graph lowers to.

Backends that keep compiled code on disk under the graph's stable hash (no
lowering on a hit) must also key it on the lowering itself: this package's
source (decompositions, the FX build, pass pipelines), ``lazy_core/graph.py``
(the stable hash and the argument layout), torch-mlir's version
(importer and passes) and torch's (decompositions, meta kernels). Any change
to one of them gives a new key, so a stale executable is never reused.
"""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache


@lru_cache(maxsize=1)
def version_key() -> str:
    """A hex digest of torch's and torch-mlir's versions and this package's source."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    h = hashlib.sha256()
    h.update(f"torch {torch.__version__};".encode())
    try:
        h.update(f"torch-mlir {version('torch-mlir')};".encode())
    except PackageNotFoundError:  # pragma: no cover - a source build without metadata
        import torch_mlir

        h.update(f"torch-mlir {getattr(torch_mlir, '__file__', '?')};".encode())
    here = os.path.dirname(os.path.abspath(__file__))
    sources = [os.path.join(here, name) for name in sorted(os.listdir(here)) if name.endswith(".py")]
    # The graph's stable hash and its argument layout (the calling convention
    # of every compiled function) are defined there.
    import lazy_core.graph

    sources.append(lazy_core.graph.__file__)
    for path in sources:
        with open(path, "rb") as f:
            h.update(os.path.basename(path).encode() + b"\0" + f.read())
    return h.hexdigest()
