"""MlirBackend: the base class for backends that compile torch-dialect MLIR.

It implements ``BackendImpl.lower`` with ``lowering.LoweringContext`` (as
Torch-MLIR's ``TorchMlirBackendImpl`` did), reports which ops the torch
dialect can express, and keeps host data handling in one place. A vendor
subclass implements ``compile`` and ``execute_computation`` only.
"""

from __future__ import annotations

from typing import Any

import torch

import lowering
from lazy_core.backend import BackendData, BackendDevice, BackendImpl
from lazy_core.graph import LazyGraph


class MlirBackend(BackendImpl):
    """Lowering done; data are CPU tensors unless a subclass overrides transfers."""

    name = "mlir"
    lowering_target = "torch"

    def lower(self, graph: LazyGraph) -> lowering.Computation:
        return lowering.lower_graph(graph)

    def lower_to_target(self, computation: lowering.Computation) -> lowering.Computation:
        """The computation in this backend's ``lowering_target`` form."""
        return lowering.lower(computation, self.lowering_target)

    def supports_op(self, op: Any) -> bool:
        return lowering.can_lower(op)

    # Host-memory data: subclasses with device memory override both.
    def make_backend_data(self, tensor: torch.Tensor, device: BackendDevice) -> BackendData:
        return BackendData(tensor.detach().contiguous().clone(), tensor.shape, tensor.dtype, device)

    def to_host(self, data: BackendData) -> torch.Tensor:
        return data.handle
