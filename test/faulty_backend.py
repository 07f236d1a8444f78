"""A real backend that fails on purpose: the eager backend with injected faults.

Fault-injection tests (issue 14: a transient failure must cost one step,
be reported once, and leave the weights at their last good values) need a
backend whose execution fails exactly when told. This is the ``eager``
backend (it really computes), registered as ``eager-faulty``, with three
knobs: fail execution number ``fail_at`` (counting from 0), fail every
execution, or fail uploading a dtype (a device that cannot hold it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import lazy_core
from lazy_core.backend import BackendData, BackendDevice
from lazy_core.eager_backend import EagerBackend

__all__ = ["FaultyBackend", "InjectedFault"]


class InjectedFault(RuntimeError):
    """The error the faulty backend raises (a stand-in for a device error)."""


class FaultyBackend(EagerBackend):
    name = "eager-faulty"

    def __init__(self, fail_at: Sequence[int] = (), fail_always: bool = False,
                 refuse_dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.fail_at = set(fail_at)
        self.fail_always = fail_always
        self.refuse_dtype = refuse_dtype
        #: Executions attempted so far (failed ones included).
        self.calls = 0

    def execute_computation(self, executable: Any, arguments: Sequence[BackendData], device: BackendDevice) -> Any:
        n = self.calls
        self.calls += 1
        if self.fail_always or n in self.fail_at:
            raise InjectedFault(f"injected device failure in execution {n}")
        return super().execute_computation(executable, arguments, device)

    def make_backend_data(self, tensor: torch.Tensor, device: BackendDevice) -> BackendData:
        if tensor.dtype == self.refuse_dtype:
            raise InjectedFault(f"this device cannot hold {tensor.dtype}")
        return super().make_backend_data(tensor, device)


lazy_core.register_backend(FaultyBackend.name, FaultyBackend)
