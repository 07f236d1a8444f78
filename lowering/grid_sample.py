"""``F.grid_sample``'s backward, as the gradient of PyTorch's forward decomposition.

``grid_sampler_2d`` has no torch-dialect op; its forward lowers through PyTorch's own
decomposition (corner pixels gathered and weighted with the CPU kernel's formulas). Its backward has no decomposition in PyTorch, so every
training step of a spatial transformer or an optical-flow warp ran it eagerly and was cut in
two graphs. The backward here is the vector-Jacobian product of that same forward, traced through
``torch.func.vjp`` on fake tensors, outside the trace the decomposition is inlined by, and
its graph replayed there: gathers become scatter-adds. The sums run in another order than the
CPU kernel's, so gradients agree to rounding, not bit for bit.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch


def grid_sampler_2d_backward(grad: torch.Tensor, x: torch.Tensor, grid: torch.Tensor, interpolation_mode: int,
                             padding_mode: int, align_corners: bool,
                             output_mask: list[bool]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    key = (tuple(grad.shape), tuple(x.shape), tuple(grid.shape), x.dtype, interpolation_mode, padding_mode,
           bool(align_corners))
    traced = _traced.get(key)
    if traced is None:
        # Traced on a thread of its own: this runs inside the fake-tensor trace that inlines
        # decompositions, below autograd (its dispatch keys are excluded in this thread's state).
        with ThreadPoolExecutor(1) as pool:
            traced = _traced[key] = pool.submit(_trace, *key).result()
    grad_x, grad_grid = traced(grad, x, grid)
    return (grad_x if output_mask[0] else None), (grad_grid if output_mask[1] else None)


_traced: dict[tuple, torch.fx.GraphModule] = {}


def _trace(grad_shape: tuple, x_shape: tuple, grid_shape: tuple, dtype: torch.dtype, interpolation_mode: int,
           padding_mode: int, align_corners: bool) -> torch.fx.GraphModule:
    from torch._decomp.decompositions import grid_sampler_2d
    from torch.fx.experimental.proxy_tensor import make_fx

    def forward(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners)

    def vjp(grad: torch.Tensor, x: torch.Tensor, grid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # Nearest sampling does not differentiate the grid: vjp's zeros, as eager's gradient.
        return torch.func.vjp(forward, x, grid)[1](grad)

    examples = [torch.empty(s, dtype=dtype, device="meta") for s in (grad_shape, x_shape, grid_shape)]
    # Functionalized: the forward decomposition writes a mask in place (``logical_and_``),
    # which the torch dialect has no value-semantics form of.
    return make_fx(torch.func.functionalize(vjp), tracing_mode="fake")(*examples)
