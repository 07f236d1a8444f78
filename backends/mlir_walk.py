"""Walking MLIR operations from Python, for either binding (torch_mlir's or iree.compiler's)."""

from __future__ import annotations

from typing import Any


def nested_operations(op: Any) -> list[Any]:
    """Every operation nested in ``op``, parents first. A list, not a generator: callers insert
    and erase operations while they go through it."""
    found = []
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                found.append(child.operation)
                found.extend(nested_operations(child.operation))
    return found
