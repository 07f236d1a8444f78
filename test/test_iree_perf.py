"""iree-cpu's performance defaults keep results equal to eager PyTorch.

The CPU defaults (``backends.iree.config``) rewrite convolutions as
im2col + matmul. That changes the code for every convolution, forward and
backward, so each convolution shape family a model may use (1-d, 2-d, 3-d,
strides, dilation, padding, groups, channels of one) is trained one step
here, gradients included, and compared with the CPU. A transposed
convolution is checked forward only: its ``convolution_backward`` does not
lower to IREE with or without these flags (torch-mlir leaves it illegal),
so in a training step it runs eagerly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from conftest import use_backend

import lazy_core
from backends.iree import IreeBackend
from backends.iree.config import CPU, make_config

CONVS = {
    "conv1d": (lambda: torch.nn.Conv1d(3, 5, 3, padding=1), (4, 3, 17)),
    "conv2d_stride_dilation": (lambda: torch.nn.Conv2d(3, 6, 3, stride=2, dilation=2, padding=2), (2, 3, 15, 13)),
    "conv2d_groups": (lambda: torch.nn.Conv2d(4, 8, 3, groups=2, bias=False), (2, 4, 9, 9)),
    "conv2d_depthwise": (lambda: torch.nn.Conv2d(4, 4, 3, groups=4, padding=1), (2, 4, 8, 8)),
    "conv2d_1x1": (lambda: torch.nn.Conv2d(5, 7, 1), (3, 5, 6, 6)),
    "conv2d_single_channel": (lambda: torch.nn.Conv2d(1, 8, 3, padding=1), (4, 1, 12, 12)),
    "conv3d": (lambda: torch.nn.Conv3d(2, 3, 2), (2, 2, 5, 5, 5)),
}


def test_transposed_convolution_forward_like_eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")
    use_backend("iree-cpu")
    torch.manual_seed(0)
    conv = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
    x = torch.randn(2, 3, 6, 6, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = conv(x)
        got = conv.to("lazy")(x.to("lazy")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _step(conv: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One SGD step's loss and the updated parameters (ReLU + max-pool as in a CNN)."""
    opt = torch.optim.SGD(conv.parameters(), lr=0.1, momentum=0.9)
    y = conv(x)
    if y.dim() == 4:
        y = F.max_pool2d(F.relu(y), 2, ceil_mode=True)
    loss = (y * y).mean()
    loss.backward()
    opt.step()
    return loss, [p for p in conv.parameters()]


@pytest.mark.parametrize("name", sorted(CONVS))
def test_convolutions_train_like_eager(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_STRICT", "1")  # a compile failure must fail, not run eagerly
    use_backend("iree-cpu")
    make, shape = CONVS[name]
    torch.manual_seed(0)
    ref = make()
    lazy = make().to("lazy")
    lazy.load_state_dict(ref.state_dict())
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(1))
    want_loss, want_params = _step(ref, x)
    got_loss, got_params = _step(lazy, x.to("lazy"))
    lazy_core.mark_step()
    torch.testing.assert_close(got_loss.cpu(), want_loss.detach(), rtol=1e-4, atol=1e-5)
    for got, want in zip(got_params, want_params):
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)


def test_cpu_defaults_use_im2col_and_users_can_turn_it_off() -> None:
    """The default is in the flags (so in the cache key); ``=false`` replaces it."""
    assert "--iree-global-opt-use-im2col-for-convs" in IreeBackend("iree-cpu").config.compile_flags
    off = make_config(CPU, ["--iree-global-opt-use-im2col-for-convs=false"]).compile_flags
    assert "--iree-global-opt-use-im2col-for-convs" not in off
    assert "--iree-global-opt-use-im2col-for-convs=false" in off
    assert IreeBackend("iree-cpu").cache_key() != IreeBackend("iree-cpu", flags=list(off)).cache_key()
