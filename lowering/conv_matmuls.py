"""Convolutions and their gradients as matmuls over an im2col (one channels-last matmul, or one
per image), and bias gradients as two sums, for targets whose matmul code beats their
convolution code (``LoweringContext(conv_gradients_as_matmuls=True)``).

IREE 3.13's CPU code for the two gradients of a 2-d convolution is slow next to its matmuls:
with ``--iree-global-opt-use-im2col-for-convs`` each becomes a gather in NCHW order and a
batched contraction whose matrices are one image's (16 x 72 by 72 x 196 for a 3 x 3 convolution
of 8 channels at 14 x 14), and without it a direct loop nest. Written here as one matmul whose
rows are all images' output positions (``[N*OH*OW, KH*KW*C]``, channels innermost, as the
matmul's contiguous operand), the same gradients ran 1.5-3x faster on an AVX-512 host, one
thread (``iree-benchmark-module``, ms; eager PyTorch's oneDNN for scale):

| convolution (batch, in -> out channels, size) | weight gradient | input gradient |
|---|---|---|
| 64, 8 -> 16, 14 x 14 (``make demo``'s second) | 2.55 -> 0.98 (eager 0.58) | 1.89 -> 0.95 (0.57) |
| 16, 16 -> 16, 32 x 32 (ResNet-18's first stage) | 5.13 -> 3.20 (1.17) | 5.71 -> 3.50 (0.98) |
| 16, 64 -> 64, 8 x 8 | 3.00 -> 1.05 (0.76) | 1.37 -> 0.99 (0.63) |
| 16, 128 -> 128, 4 x 4 | 3.28 -> 1.04 (1.30) | 1.64 -> 1.01 (0.67) |
| 64, 1 -> 8, 28 x 28 (one input channel) | 0.65 -> 0.97 | 4.28 -> 5.82 |

So a gradient is rewritten as that matmul only where it is not thin: ``MIN_CHANNELS`` input
channels (the input gradient's matmul has one column per input channel; with one, IREE's own code
wins). Below that (a network's first convolution, on grey or RGB images) the weight gradient is one
small matmul per image instead, ``[F, OH*OW]`` by ``[OH*OW, C*KH*KW]`` over an NCHW im2col, summed
over the batch (``batched_weight_gradient``); one thread, ``iree-benchmark-module``, ms:

| convolution (batch, in -> out channels, size) | IREE's im2col | per-image matmuls |
|---|---|---|
| 64, 1 -> 8, 28 x 28 (``make demo``'s first) | 0.50-0.55 | 0.32-0.33 |
| 16, 3 -> 16, 32 x 32 (ResNet-18 zoo stem) | 0.84 | 0.42 |
| 64, 8 -> 16, 14 x 14 (the channels-last matmul above: 0.83) | - | 1.17 |
The forward convolution is not written as that channels-last matmul (4.28 against IREE's 3.01 ms
at 16 channels, 32 x 32) but as one matmul per image, the weight's ``[F, C*KH*KW]`` matrix times
the image's NCHW im2col stacked from strided slices, which IREE fuses into the matmul
(``batched_convolution``), where the output has at least ``MIN_FORWARD_POSITIONS`` positions;
one thread, ``iree-benchmark-module``, ms, IREE's im2col -> per-image matmuls:

| convolution (batch, in -> out channels, output size) | forward |
|---|---|
| 64, 1 -> 8, 28 x 28 (``make demo``'s first) | 0.42 -> 0.18 |
| 64, 8 -> 16, 14 x 14 (``make demo``'s second) | 1.03 -> 0.61 |
| 16, 16 -> 16, 32 x 32 | 1.85 -> 1.21 |
| 16, 32 -> 32, 16 x 16 | 1.13 -> 0.91 |
| 16, 64 -> 64, 8 x 8 | 0.91 -> 0.84 |
| 16, 128 -> 128, 4 x 4 (left to IREE) | 0.82 -> 0.99 |

Inside a whole step graph IREE does not always fuse the stacked slices (``make demo``'s second
convolution's became nine copies), so the step gains less than the table: the demo's graph 5.09
-> 4.77 ms of dispatches, the ResNet-18 zoo step 73.9-76.6 -> 72.3-73.0 ms (one thread, with the
weight gradients below).

Which gradients: those of 2-d, ungrouped, regular (not transposed) float32 convolutions. The
input gradient only for stride 1 (a strided one's adjoint spreads the gradient out with zeros:
4x the work at stride 2), as the regular convolution it is (``transposed_as_regular``'s rule:
the gradient padded by the window's reach less the padding, the weight flipped, its in and out
channels swapped). Element ``[f, c, i, j]`` of the weight gradient is
``sum(n, y, x) grad[n, f, y, x] * xpad[n, c, y*s + i*d, x*s + j*d]``: the output gradient as an
``[N*OH*OW, F]`` matrix, transposed, times the im2col matrix. The bias gradient of every
convolution rewritten is summed over each image's plane, then over the batch: IREE's single
reduction over dims (0, 2, 3) ran 0.33 ms for ``make demo``'s first convolution (64 x 8 x 28 x
28), the two sums 0.12 (0.094 -> 0.086 for its second). Both changes together took ``make
demo``'s step graph from 6.34 to 5.09 ms of dispatches, one thread.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Literal

import torch
from torch.fx import Graph

from .fx_rewrite import calls_on_tensors, splice_traced

__all__ = ["MIN_CHANNELS", "MIN_FORWARD_POSITIONS", "batched_convolution", "batched_weight_gradient",
           "convolution_gradients_as_matmuls", "forward_applies", "im2col", "input_gradient", "nchw_im2col",
           "weight_gradient"]

aten = torch.ops.aten

#: Fewest input channels for which a gradient is rewritten (see the module doc's table).
MIN_CHANNELS = 8


def im2col(x: torch.Tensor, kernel: list[int], stride: list[int], padding: list[int],
           dilation: list[int], out_size: list[int]) -> torch.Tensor:
    """``[N*OH*OW, KH*KW*C]``: row ``(n, y, x)`` holds the window of output position ``(y, x)``,
    ordered by window row, window column, then channel."""
    n, c = x.shape[0], x.shape[1]
    xp = aten.constant_pad_nd(x.permute(0, 2, 3, 1), [0, 0, padding[1], padding[1], padding[0], padding[0]], 0.0)
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_size
    cols = [xp[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw, :]
            for i in range(kh) for j in range(kw)]
    return torch.cat(cols, dim=3).reshape(n * oh * ow, kh * kw * c)


def weight_gradient(grad: torch.Tensor, x: torch.Tensor, kernel: list[int], stride: list[int],
                    padding: list[int], dilation: list[int]) -> torch.Tensor:
    """The weight gradient of ``conv2d(x, w, stride, padding, dilation)`` given its output's
    gradient ``grad``: ``grad``'s ``[N*OH*OW, F]`` matrix, transposed, times the im2col matrix."""
    f, c, (oh, ow) = grad.shape[1], x.shape[1], grad.shape[2:]
    cols = im2col(x, kernel, stride, padding, dilation, [oh, ow])
    rows = grad.permute(0, 2, 3, 1).reshape(-1, f)
    return (rows.t() @ cols).reshape(f, kernel[0], kernel[1], c).permute(0, 3, 1, 2)


def batched_weight_gradient(grad: torch.Tensor, x: torch.Tensor, kernel: list[int], stride: list[int],
                            padding: list[int], dilation: list[int]) -> torch.Tensor:
    """The weight gradient of ``conv2d(x, w, stride, padding, dilation)`` for few input channels:
    per image, ``grad``'s ``[F, OH*OW]`` matrix times the image's ``[OH*OW, C*KH*KW]`` im2col
    (built ``[C*KH*KW, OH*OW]``, NCHW's order, and read transposed), summed over the batch."""
    n, c, f, (oh, ow) = x.shape[0], x.shape[1], grad.shape[1], grad.shape[2:]
    cols = nchw_im2col(x, kernel, stride, padding, dilation, [oh, ow])
    return torch.bmm(grad.reshape(n, f, oh * ow), cols.transpose(1, 2)).sum(0).reshape(f, c, *kernel)


def nchw_im2col(x: torch.Tensor, kernel: list[int], stride: list[int], padding: list[int],
                dilation: list[int], out_size: list[int]) -> torch.Tensor:
    """``[N, C*KH*KW, OH*OW]``: each image's windows, ordered by channel, window row, window
    column (the weight's order), one strided slice of the padded input per window position,
    stacked (IREE fuses such a stack into the matmul reading it)."""
    n, c = x.shape[0], x.shape[1]
    xp = aten.constant_pad_nd(x, [padding[1], padding[1], padding[0], padding[0]], 0.0)
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_size
    cols = torch.stack([xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                        for i in range(kh) for j in range(kw)], dim=2)  # [N, C, KH*KW, OH, OW]
    return cols.reshape(n, c * kh * kw, oh * ow)


#: Fewest output positions (``OH * OW``) for which a forward convolution is rewritten (the
#: module doc's table: with 4 x 4 outputs of 128 channels IREE's own code won).
MIN_FORWARD_POSITIONS = 64


def batched_convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, stride: list[int],
                        padding: list[int], dilation: list[int]) -> torch.Tensor:
    """``conv2d(x, weight, bias, stride, padding, dilation)`` as one matmul per image: the
    weight's ``[F, C*KH*KW]`` matrix times the image's ``[C*KH*KW, OH*OW]`` im2col (NCHW's
    order, one strided slice per window position, stacked: IREE fuses them into the matmul)."""
    n, f, kernel = x.shape[0], weight.shape[0], list(weight.shape[2:])
    oh, ow = (_out_size(x.shape[2 + d], kernel[d], stride[d], padding[d], dilation[d]) for d in range(2))
    cols = nchw_im2col(x, kernel, stride, padding, dilation, [oh, ow])
    out = torch.matmul(weight.reshape(f, -1), cols).reshape(n, f, oh, ow)
    return out if bias is None else out + bias.reshape(1, f, 1, 1)


def _out_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def forward_applies(args: tuple) -> bool:
    """Whether this ``convolution`` is rewritten (``batched_convolution``): 2-d, ungrouped,
    regular, float32, with at least ``MIN_FORWARD_POSITIONS`` output positions."""
    x, weight = (a.meta.get("val") if hasattr(a, "meta") else None for a in args[:2])
    bias = args[2]
    stride, padding, dilation, transposed, _, groups = args[3:9]
    if not (isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)) or weight.dim() != 4 or x.dim() != 4:
        return False
    if bias is not None and not (hasattr(bias, "meta") and isinstance(bias.meta.get("val"), torch.Tensor)
                                 and bias.meta["val"].dtype == torch.float32):
        return False
    params = (*stride, *padding, *dilation)
    if (transposed or groups != 1 or x.dtype != torch.float32 or weight.dtype != torch.float32
            or not len(stride) == len(padding) == len(dilation) == 2
            or not all(isinstance(v, int) for v in params) or min(padding) < 0 or x.numel() == 0):
        return False
    out = [_out_size(x.shape[2 + d], weight.shape[2 + d], stride[d], padding[d], dilation[d]) for d in range(2)]
    return min(out) >= 1 and out[0] * out[1] >= MIN_FORWARD_POSITIONS


def convolve(x: torch.Tensor, weight: torch.Tensor, padding: list[int], dilation: list[int]) -> torch.Tensor:
    """``conv2d(x, weight, padding=padding, dilation=dilation)`` (stride 1, padding >= 0) as the
    im2col matrix times the weight's ``[KH*KW*C, F]`` matrix."""
    n, f, kernel = x.shape[0], weight.shape[0], list(weight.shape[2:])
    out = [_out_size(x.shape[2 + d], kernel[d], 1, padding[d], dilation[d]) for d in range(2)]
    cols = im2col(x, kernel, [1, 1], padding, dilation, out)
    matrix = weight.permute(2, 3, 1, 0).reshape(-1, f)
    return (cols @ matrix).reshape(n, out[0], out[1], f).permute(0, 3, 1, 2)


def input_gradient(grad: torch.Tensor, weight: torch.Tensor, padding: list[int], dilation: list[int]) -> torch.Tensor:
    """The input gradient of a stride-1 ``conv2d(x, weight, padding, dilation)`` (padding at most
    the window's reach, ``_applies``): the regular convolution of ``grad`` with the weight flipped
    and its in and out channels swapped, padded by the reach less the padding."""
    reach = [dilation[d] * (weight.shape[2 + d] - 1) for d in range(2)]
    return convolve(grad, weight.flip([2, 3]).transpose(0, 1), [reach[d] - padding[d] for d in range(2)], dilation)


#: How a weight gradient is rewritten: not at all, as the channels-last matmul (``weight_gradient``),
#: or as per-image matmuls (``batched_weight_gradient``, fewer than ``MIN_CHANNELS`` input channels).
WeightForm = Literal["", "matmul", "batched"]


def _applies(args: tuple) -> tuple[bool, WeightForm]:
    """Whether the input gradient of this ``convolution_backward`` is rewritten, and how its
    weight gradient is (see the module doc)."""
    grad, x, weight = (a.meta.get("val") if hasattr(a, "meta") else None for a in args[:3])
    stride, padding, dilation, transposed, _, groups, mask = args[4:11]
    if not all(isinstance(t, torch.Tensor) for t in (grad, x, weight)):
        return False, ""
    plain = (weight.dim() == 4 and not transposed and groups == 1
             and grad.dtype == x.dtype == weight.dtype == torch.float32
             and len(stride) == len(padding) == len(dilation) == 2
             and all(isinstance(v, int) for v in (*stride, *padding, *dilation)) and grad.numel() > 0)
    if not plain:
        return False, ""
    if x.shape[1] < MIN_CHANNELS:
        return False, "batched" if mask[1] else ""
    reach = [dilation[d] * (weight.shape[2 + d] - 1) for d in range(2)]
    input_ok = bool(mask[0]) and list(stride) == [1, 1] and all(0 <= padding[d] <= reach[d] for d in range(2))
    return input_ok, "matmul" if mask[1] else ""


def _gradients(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, stride: list[int], padding: list[int],
               dilation: list[int], output_padding: list[int], mask: list[bool], rewrite_input: bool,
               rewrite_weight: WeightForm) -> tuple[Any, Any, Any]:
    """``convolution_backward``'s three results, the rewritten ones as matmuls and the bias
    gradient as two sums; the others from ``convolution_backward`` itself, asked only for them."""
    rest = [mask[0] and not rewrite_input, mask[1] and not rewrite_weight, False]
    kept: tuple[Any, Any, Any] = (None, None, None)
    if any(rest):
        kept = aten.convolution_backward(grad, x, weight, None, stride, padding, dilation, False, output_padding,
                                         1, rest)
    gi = input_gradient(grad, weight, padding, dilation) if rewrite_input else kept[0]
    kernel = list(weight.shape[2:])
    if rewrite_weight == "matmul":
        gw = weight_gradient(grad, x, kernel, stride, padding, dilation)
    elif rewrite_weight == "batched":
        gw = batched_weight_gradient(grad, x, kernel, stride, padding, dilation)
    else:
        gw = kept[1]
    # The bias gradient sums each image's plane first, then the batch: IREE's one reduction over
    # dims (0, 2, 3) of the demo's first gradient (64 x 8 x 28 x 28) took 0.39 ms, the two 0.19.
    gb = grad.sum([2, 3]).sum(0) if mask[2] else None
    return gi, gw, gb


def _bound(stride: list[int], padding: list[int], dilation: list[int], output_padding: list[int],
           mask: list[bool], rewrite_input: bool, rewrite_weight: WeightForm) -> Any:
    """``_gradients`` of ``(grad, x, weight)`` alone, the rest fixed (what ``make_fx`` traces)."""

    def fn(grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor) -> tuple:
        return _gradients(grad, x, weight, stride, padding, dilation, output_padding, mask,
                          rewrite_input, rewrite_weight)

    return fn


def _bound_forward(stride: list[int], padding: list[int], dilation: list[int], bias: bool) -> Any:
    """``batched_convolution`` of ``(x, weight, bias)`` or ``(x, weight)`` alone (what
    ``make_fx`` traces: it takes every parameter of the function for an input)."""

    def with_bias(x: torch.Tensor, weight: torch.Tensor, b: torch.Tensor) -> tuple:
        return (batched_convolution(x, weight, b, stride, padding, dilation),)

    def without(x: torch.Tensor, weight: torch.Tensor) -> tuple:
        return (batched_convolution(x, weight, None, stride, padding, dilation),)

    return with_bias if bias else without


#: The rewrites traced, by argument shapes, strides and convolution parameters.
_traced: dict[tuple, Any] = {}


def convolution_gradients_as_matmuls(g: Graph) -> bool:
    """Rewrite the forward 2-d convolutions ``forward_applies`` takes, and the gradients of
    ``g``'s ``convolution_backward`` calls that ``_applies`` takes; True if any was."""
    changed = False
    for node, _, _ in calls_on_tensors(g, (aten.convolution.default,)):
        if not forward_applies(node.args):
            continue
        stride, padding, dilation = (list(node.args[i]) for i in (3, 4, 5))
        inputs = [node.args[0], node.args[1], *([node.args[2]] if node.args[2] is not None else [])]
        result = splice_traced(g, node, inputs, _traced, ("forward", tuple(stride), tuple(padding), tuple(dilation)),
                         functools.partial(_bound_forward, stride, padding, dilation, len(inputs) == 3))
        node.replace_all_uses_with(result[0])
        g.erase_node(node)
        changed = True
    for node, _, _ in calls_on_tensors(g, (aten.convolution_backward.default,)):
        rewrite_input, rewrite_weight = _applies(node.args)
        if not (rewrite_input or rewrite_weight):
            continue
        stride, padding, dilation = (list(node.args[i]) for i in (4, 5, 6))
        output_padding, mask = list(node.args[8]), [bool(m) for m in node.args[10]]
        key = (tuple(stride), tuple(padding), tuple(dilation), tuple(output_padding), tuple(mask),
               rewrite_input, rewrite_weight)
        results = splice_traced(g, node, list(node.args[:3]), _traced, key, functools.partial(
            _bound, stride, padding, dilation, output_padding, mask, rewrite_input, rewrite_weight))
        for user in list(node.users):
            if user.op != "call_function" or user.target is not operator.getitem:
                raise AssertionError(f"convolution_backward used by {user.format_node()}")
            user.replace_all_uses_with(results[user.args[1]])
            g.erase_node(user)
        g.erase_node(node)
        changed = True
    return changed
