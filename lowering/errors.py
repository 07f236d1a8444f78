"""Lowering failures that name the user's code and leave a repro on disk."""

from __future__ import annotations

import os
import tempfile
from typing import Any

from lazy_core.backend import CompileError


def repro_dir() -> str:
    d = os.environ.get("LAZY_REPRO_DIR") or os.path.join(tempfile.gettempdir(), "lazy-mlir-repros")
    os.makedirs(d, exist_ok=True)
    return d


class LoweringError(CompileError):
    """An op could not be imported or lowered; ``node`` is the culprit if known."""

    def __init__(self, message: str, node: Any = None, repro_path: str | None = None,
                 location: str | None = None) -> None:
        if node is not None and location is None and node.location is not None:
            location = str(node.location)
        if node is not None:
            message = f"{message} [op {node.name}{' at ' + location if location else ''}]"
        if repro_path:
            message = f"{message}\nrepro: {repro_path}"
        super().__init__(message, repro_path=repro_path, location=location)
        self.node = node
