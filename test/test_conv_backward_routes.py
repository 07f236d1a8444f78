"""1-d and 3-d convolution gradients compile in graphs that take torch-mlir's full route.

A cross-entropy loss sends a graph down the full torch pipeline (its decomposition needs
that route's shape refinement), whose ``convolution_backward`` decomposition takes only 2-d
convolutions: the training step of every Conv1d or Conv3d model with a cross-entropy loss
failed to compile and ran op by op (HF Whisper, found by an adversarial run on real models).
``lowering/pipelines.full_torch_backend_pipeline`` keeps such an op whole for torch-mlir's own
lowering. Strict mode makes a compile failure fail these tests.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import lazy_core
from lazy_mlir.lowering.pipelines import TORCH_BACKEND, full_torch_backend_pipeline

_CASES = {
    "conv1d_strided": (torch.nn.Conv1d, dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, padding=1), (2, 4, 9)),
    "conv1d_grouped_dilated": (torch.nn.Conv1d, dict(in_channels=4, out_channels=6, kernel_size=2, groups=2, dilation=2),
                               (2, 4, 8)),
    "conv3d": (torch.nn.Conv3d, dict(in_channels=2, out_channels=3, kernel_size=3, padding=1), (2, 2, 3, 4, 4)),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_a_cross_entropy_step_through_a_non_2d_convolution_compiles(backend: lazy_core.BackendImpl, case: str) -> None:
    kind, kwargs, shape = _CASES[case]
    torch.manual_seed(0)
    conv = kind(**kwargs)
    x = torch.randn(*shape)
    grads = {}
    for device in ("cpu", "lazy"):
        layer = kind(**kwargs).to(device)
        layer.load_state_dict(conv.state_dict())
        inp = x.to(device).detach().requires_grad_()
        y = layer(inp)
        logits = y.flatten(2).transpose(1, 2).reshape(-1, y.shape[1])
        target = (torch.arange(logits.shape[0]) % y.shape[1]).to(device)
        F.cross_entropy(logits, target).backward()
        lazy_core.mark_step()
        grads[device] = [inp.grad.cpu(), layer.weight.grad.cpu(), layer.bias.grad.cpu()]
    torch.testing.assert_close(grads["lazy"], grads["cpu"], rtol=1e-4, atol=1e-5)


def test_only_a_graph_with_a_non_2d_convolution_gradient_keeps_it_whole() -> None:
    two_d = "torch.aten.convolution_backward %0, %1 : !torch.vtensor<[2,6,8,8],f32>, ..."
    one_d = "torch.aten.convolution_backward %0, %1 : !torch.vtensor<[2,6,8],f32>, ..."
    assert full_torch_backend_pipeline(two_d) == TORCH_BACKEND
    assert "backend-legal-ops=aten.convolution_backward" in full_torch_backend_pipeline(two_d + "\n" + one_d)
    assert full_torch_backend_pipeline("no convolutions") == TORCH_BACKEND
