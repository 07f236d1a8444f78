"""``torch._grouped_mm`` compiles (lowering/grouped_mm.py), and MoE models train in one graph.

``_grouped_mm`` had no lowering, so each call ran eagerly, and integer ``histc`` (the tokens per
expert of transformers' MoE routing on any device but cpu) raised eager CPU's error: HF Mixtral
crashed in its first forward on device lazy (adversary round 40, F2). Eager's CPU kernel is the
reference: group ``g`` spans ``at::slice(offs[g - 1], offs[g])``, so decreasing, negative and
out-of-range offsets are cases too. Rows (or columns) no group covers are uninitialized in
eager and zeros here. Strict: a compile failure or a fallback fails the test (the
``cpu_backend`` fixture).
"""

from __future__ import annotations

import copy

import pytest
import torch

import lazy_core

OFFSETS = [[3, 5, 9], [0, 9, 9], [4, 4, 7], [6, 2, 9], [-3, 5, 12], [2, 7, 11], [9, 0, 3]]


def _covered(offs: list[int], size: int) -> torch.Tensor:
    """Which of ``size`` rows eager's loop writes (at::slice's bounds)."""
    seen = torch.zeros(size, dtype=torch.bool)
    start = 0
    for end in offs:
        s, e = (v + size if v < 0 else v for v in (start, end))
        s = min(max(s, 0), size)
        e = min(max(e, s), size)
        seen[s:e] = True
        start = end
    return seen


@pytest.mark.parametrize("offs", OFFSETS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_2d_by_3d_matches_eager(cpu_backend: object, offs: list[int], dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(9, 8, generator=gen).to(dtype)
    b = torch.randn(3, 8, 8, generator=gen).to(dtype)  # rows of 16 bytes, as eager requires
    o = torch.tensor(offs, dtype=torch.int32)
    want = torch._grouped_mm(a, b, offs=o)
    got = torch._grouped_mm(a.to("lazy"), b.to("lazy"), offs=o.to("lazy")).cpu()
    rows = _covered(offs, 9)
    torch.testing.assert_close(got[rows], want[rows])
    assert (got[~rows] == 0).all()


@pytest.mark.parametrize("offs", OFFSETS)
def test_3d_by_2d_matches_eager(cpu_backend: object, offs: list[int]) -> None:
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(3, 5, 8, generator=gen)
    b = torch.randn(8, 12, generator=gen)
    o = torch.tensor(offs, dtype=torch.int32)
    want = torch._grouped_mm(a, b, offs=o)
    got = torch._grouped_mm(a.to("lazy"), b.to("lazy"), offs=o.to("lazy")).cpu()
    cols = _covered(offs, 12)
    torch.testing.assert_close(got[:, cols], want[:, cols])
    assert (got[:, ~cols] == 0).all()


@pytest.mark.parametrize("offs", OFFSETS)
def test_2d_by_2d_matches_eager(cpu_backend: object, offs: list[int]) -> None:
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(6, 12, generator=gen)
    b = torch.randn(12, 4, generator=gen)
    o = torch.tensor(offs, dtype=torch.int32)
    want = torch._grouped_mm(a, b, offs=o)
    got = torch._grouped_mm(a.to("lazy"), b.to("lazy"), offs=o.to("lazy")).cpu()
    torch.testing.assert_close(got, want)


def test_3d_by_3d_is_bmm(cpu_backend: object) -> None:
    gen = torch.Generator().manual_seed(3)
    a, b = torch.randn(3, 4, 8, generator=gen), torch.randn(3, 8, 4, generator=gen)
    torch.testing.assert_close(torch._grouped_mm(a.to("lazy"), b.to("lazy")).cpu(), torch._grouped_mm(a, b))


def test_an_infinity_stays_in_its_group(cpu_backend: object) -> None:
    """Every row meets every group's weights in the dense product: an inf in one group's
    weights, or in one group's rows, must not reach another group (``0 * inf``)."""
    a = torch.ones(6, 4)
    a[5, 0] = float("inf")
    b = torch.ones(3, 4, 4)
    b[0, 1, 1] = float("inf")
    o = torch.tensor([2, 4, 6], dtype=torch.int32)
    torch.testing.assert_close(torch._grouped_mm(a.to("lazy"), b.to("lazy"), offs=o.to("lazy")).cpu(),
                               torch._grouped_mm(a, b, offs=o))
    g = torch.ones(6, 4)
    # (a transposed on the device: ``.to`` makes a lazy tensor contiguous, and eager checks strides)
    torch.testing.assert_close(torch._grouped_mm(a.to("lazy").t(), g.to("lazy"), offs=o.to("lazy")).cpu(),
                               torch._grouped_mm(a.t(), g, offs=o))


def test_gradients_match_eager(cpu_backend: object) -> None:
    gen = torch.Generator().manual_seed(4)
    a0, b0 = torch.randn(10, 8, generator=gen), torch.randn(4, 8, 4, generator=gen)
    o = torch.tensor([2, 2, 7, 10], dtype=torch.int32)
    grads = []
    for device in ("cpu", "lazy"):
        a, b = a0.clone().to(device).requires_grad_(), b0.clone().to(device).requires_grad_()
        (torch._grouped_mm(a, b, offs=o.to(device)).sin().sum()).backward()
        grads.append((a.grad.cpu(), b.grad.cpu()))
    torch.testing.assert_close(grads[1], grads[0])


def test_large_float32_operands_are_traced(cpu_backend: object) -> None:
    """Its Meta kernel takes bfloat16 only; past the size at which the tracer asks the CPU kernel
    instead (4M elements), float32 operands raised the Meta kernel's error."""
    a, b = torch.randn(4, 64), torch.randn(2, 64, 40000)
    o = torch.tensor([1, 4], dtype=torch.int32)
    torch.testing.assert_close(torch._grouped_mm(a.to("lazy"), b.to("lazy"), offs=o.to("lazy")).cpu(),
                               torch._grouped_mm(a, b, offs=o))


@pytest.mark.expect_fallback("aten._grouped_mm")  # not lowered: eager's kernel raises at the call
@pytest.mark.parametrize("bad", ["int", "bias", "offs_dtype", "no_offs"])
def test_bad_calls_raise_eagers_error(cpu_backend: object, bad: str) -> None:
    a, b = torch.randn(4, 8), torch.randn(2, 8, 3)
    kwargs: dict = {"offs": torch.tensor([2, 4], dtype=torch.int32)}
    if bad == "int":
        a, b = a.int(), b.int()
    elif bad == "bias":
        kwargs["bias"] = torch.zeros(2, 3)
    elif bad == "offs_dtype":
        kwargs["offs"] = kwargs["offs"].long()
    else:
        del kwargs["offs"]
    with pytest.raises(RuntimeError) as want:
        torch._grouped_mm(a, b, **kwargs)
    lazy_kwargs = {k: v.to("lazy") for k, v in kwargs.items()}
    with pytest.raises(RuntimeError) as got:
        torch._grouped_mm(a.to("lazy"), b.to("lazy"), **lazy_kwargs).cpu()
    assert str(want.value).splitlines()[0] in str(got.value)


def _moe_config(transformers: object, name: str) -> object:
    small = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2)
    return getattr(transformers, f"{name}Config")(**small)


@pytest.mark.parametrize("name", ["Mixtral", "Phimoe"])
def test_hf_moe_trains_in_one_graph_with_default_experts(cpu_backend: object, name: str) -> None:
    """transformers' default experts path (sort by expert, integer ``histc``, ``_grouped_mm``)
    on device lazy: each SGD step one graph, equal to eager (which takes the cpu branch).
    Phi-MoE's router adds ``torch.add(0.3333, mask, alpha=0.6667)`` (test_scalar_first.py) and
    draws ``torch.rand_like`` (test_random_like.py) in training."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = getattr(transformers, f"{name}ForCausalLM")(_moe_config(transformers, name))
    ids = torch.randint(0, 97, (2, 12))
    results = []
    for device in ("cpu", "lazy"):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        torch.manual_seed(1)  # the same router draws (Phi-MoE) on both
        for _ in range(2):
            opt.zero_grad()
            loss = m(ids.to(device), labels=ids.to(device)).loss
            loss.backward()
            opt.step()
            lazy_core.mark_step()
        results.append((loss.item(), [p.detach().cpu() for p in m.parameters()]))
    assert abs(results[0][0] - results[1][0]) < 1e-5
    for want, got in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
