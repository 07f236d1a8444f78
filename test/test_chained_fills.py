"""Constants written into neighbouring slices of one tensor compile (``backends/iree/chained_fills.py``).

IREE 3.13 merged two such fills into one at a wrong offset and refused the graph ("'stream.async.fill'
op has invalid Write access range"): DDP's ``find_unused_parameters`` zero-fills of a bucket ran op
by op (``test_distributed.py``'s ``unused_parameter`` variant trains through it). Strict mode
makes a compile failure fail these tests.
"""

from __future__ import annotations

import pytest
import torch

import lazy_core


@pytest.mark.parametrize("fill", ["zeros", "ones"])
@pytest.mark.parametrize("into", ["empty", "data"])
def test_constants_scattered_into_neighbouring_slices_compile(backend: lazy_core.BackendImpl, fill: str,
                                                              into: str) -> None:
    def program(device: str) -> torch.Tensor:
        torch.manual_seed(0)
        x = torch.randn(5).to(device)
        b = torch.empty(20, device=device) if into == "empty" else torch.randn(20).to(device)
        make = getattr(torch, fill)  # recorded as empty + fill: a constant splat by then
        b = torch.slice_scatter(b, make(5, device=device), 0, 15, 20)
        b = torch.slice_scatter(b, make(2, 5, device=device).view(10), 0, 5, 15)
        return torch.slice_scatter(b, x * 2, 0, 0, 5)

    assert torch.equal(program("lazy").cpu(), program("cpu"))
