"""Backwards PyTorch has no decomposition for, as the gradient of the forward's decomposition.

``grid_sampler_2d_backward`` and the backwards of bicubic, trilinear and nearest-exact
interpolation have no torch-dialect op and no entry in ``torch._decomp``, so every training
step through them ran the backward eagerly and was cut in two graphs. Their forwards lower
through PyTorch's decompositions; the backward here is the vector-Jacobian product of that
same decomposition, traced with ``torch.func.vjp`` on fake tensors and replayed into the
decomposition being inlined (gathers become scatter-adds). The sums run in another order than
the CPU kernel's, so gradients agree to rounding, not bit for bit.

The trace runs on a thread of its own: the lowering context inlines decompositions inside a
fake-tensor trace, below autograd (its dispatch keys are excluded in that thread's state), and
functorch's wrappers cannot enter that trace. It is functionalized: PyTorch's decompositions
write masks in place (``logical_and_``), which the torch dialect has no value form of.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

aten = torch.ops.aten

_traced: dict[tuple, torch.fx.GraphModule] = {}


def vjp(forward: Callable[..., torch.Tensor], key: tuple, grad: torch.Tensor,
        *primals: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The gradients of ``forward`` (a function of ``primals`` only; ``key`` names it and its
    constants) at ``primals`` for the output gradient ``grad``."""
    full_key = (key, *((tuple(t.shape), t.dtype) for t in (grad, *primals)))
    traced = _traced.get(full_key)
    if traced is None:
        examples = [(tuple(t.shape), t.dtype) for t in (grad, *primals)]
        with ThreadPoolExecutor(1) as pool:
            traced = pool.submit(_trace, forward, examples).result()
        if len(_traced) < 256:
            _traced[full_key] = traced
    return tuple(traced(grad, *primals))


def _trace(forward: Callable[..., torch.Tensor], examples: list[tuple[tuple, torch.dtype]]) -> torch.fx.GraphModule:
    from torch.fx.experimental.proxy_tensor import make_fx

    def product(grad: torch.Tensor, *primals: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # An input the forward does not differentiate gets vjp's zeros, as eager's gradient.
        return torch.func.vjp(forward, *primals)[1](grad)

    metas = [torch.empty(shape, dtype=dtype, device="meta") for shape, dtype in examples]
    traced = make_fx(torch.func.functionalize(product), tracing_mode="fake")(*metas)
    _explicit_leading_indices(traced)
    return traced


_INDEX_PUTS = (aten.index_put.default, aten._unsafe_index_put.default)


def _explicit_leading_indices(traced: torch.fx.GraphModule) -> None:
    """``x[:, :, i, j] += v`` (the adjoint of a gather) traces as ``index_put`` with ``None`` for
    the full leading dims, a list torch-mlir's importer refuses ("heterogeneous lists"). Each
    leading ``None`` becomes ``arange(n)`` shaped to broadcast ahead of the index tensors, which
    addresses the same elements in the same order (the values' shape is unchanged)."""
    graph = traced.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _INDEX_PUTS:
            continue
        indices = list(node.args[1])
        lead = 0
        while lead < len(indices) and indices[lead] is None:
            lead += 1
        if lead == 0 or lead == len(indices) or any(i is None for i in indices[lead:]):
            continue  # no leading None, or a None between tensors: left as it is
        base = node.args[0].meta["val"]
        rank = max(len(i.meta["val"].shape) for i in indices[lead:])
        with graph.inserting_before(node):
            for d in range(lead):
                shape = [base.shape[d]] + [1] * (lead - 1 - d + rank)
                r = graph.call_function(aten.arange.default, (base.shape[d],),
                                        {"dtype": torch.int64, "device": base.device})
                indices[d] = graph.call_function(aten.view.default, (r, shape))
        node.args = (node.args[0], indices, *node.args[2:])
    graph.lint()
    traced.recompile()


def grid_sampler_2d_backward(grad: torch.Tensor, x: torch.Tensor, grid: torch.Tensor, interpolation_mode: int,
                             padding_mode: int, align_corners: bool,
                             output_mask: list[bool]) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``F.grid_sample``'s backward: the vjp of its decomposition (lowering/grid_sample.py)."""
    from .grid_sample import grid_sampler_2d

    def forward(x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners)

    key = ("grid_sampler_2d", interpolation_mode, padding_mode, bool(align_corners))
    grad_x, grad_grid = vjp(forward, key, grad, x, grid)
    return (grad_x if output_mask[0] else None), (grad_grid if output_mask[1] else None)


def _interpolation_backward(forward_op: Any) -> Callable[..., torch.Tensor]:
    """The backward of an interpolation ``forward_op(x, output_size, *rest)``, whose backward's
    signature is ``(grad, output_size, input_size, *rest)``. The forward is linear in ``x``, so
    its vjp does not read ``x``: zeros of ``input_size`` stand in for it."""
    from torch._decomp import decomposition_table

    decomposed = decomposition_table[forward_op]

    def backward(grad: torch.Tensor, output_size: Any, input_size: Any, *rest: Any) -> torch.Tensor:
        output_size, input_size = [int(s) for s in output_size], [int(s) for s in input_size]

        def forward(x: torch.Tensor) -> torch.Tensor:
            return decomposed(x, output_size, *rest)

        key = (str(forward_op), tuple(output_size), *rest)
        return vjp(forward, key, grad, torch.zeros(input_size, dtype=grad.dtype, device=grad.device))[0]

    return backward


#: backward op -> its decomposition.
INTERPOLATION_BACKWARDS: dict[Any, Callable[..., torch.Tensor]] = {
    # HF MobileViT's and SegFormer's decoders train through bilinear upsampling: its backward
    # ran eagerly at every step (no torch-dialect lowering).
    aten.upsample_bilinear2d_backward.default: _interpolation_backward(aten.upsample_bilinear2d.default),
    aten.upsample_linear1d_backward.default: _interpolation_backward(aten.upsample_linear1d.default),
    aten.upsample_bicubic2d_backward.default: _interpolation_backward(aten.upsample_bicubic2d.default),
    aten.upsample_trilinear3d_backward.default: _interpolation_backward(aten.upsample_trilinear3d.default),
    aten._upsample_nearest_exact1d_backward.default: _interpolation_backward(aten._upsample_nearest_exact1d.default),
    aten._upsample_nearest_exact2d_backward.default: _interpolation_backward(aten._upsample_nearest_exact2d.default),
    aten._upsample_nearest_exact3d_backward.default: _interpolation_backward(aten._upsample_nearest_exact3d.default),
}
