"""A number as the first operand of a binary op: ``torch.add(0.3333, mask, alpha=0.6667)``.

PyTorch passes the number in ``self`` as a wrapped number. The lowering put it there as a
torch-dialect scalar, which ``torch.aten.add.Tensor`` rejects ("operand #0 must be Any Torch
tensor type"): the graph failed to parse, so HF Phi-MoE's router (``modeling_phimoe.py``) and
any ``torch.mul(2, x)`` crashed under LAZY_STRICT and ran op by op otherwise. Compared with
eager in values and dtype, for constant numbers and lifted ones (runtime parameters), against
tensors of several dtypes (half precision exactly) and a 0-d one (where a wrapped number does
not promote).
"""

from __future__ import annotations

import pytest
import torch

CALLS = {
    "add_alpha": lambda o: torch.add(0.3333, o, alpha=0.6667),
    "add_int": lambda o: torch.add(2, o),
    "add_one": lambda o: torch.add(1, o),
    "mul_float": lambda o: torch.mul(0.5, o),
    "mul_zero": lambda o: torch.mul(0, o),
    "mul_inexact": lambda o: torch.mul(0.1, o),  # (0.1 and 1.3 round in half precision)
    "div_inexact": lambda o: torch.div(1.3, o),
    "sub_alpha": lambda o: torch.sub(3.0, o, alpha=2),
    "div": lambda o: torch.div(1.5, o),
    "div_floor": lambda o: torch.div(7, o, rounding_mode="floor"),
    "true_divide": lambda o: torch.true_divide(3, o),
    "floor_divide": lambda o: torch.floor_divide(7.5, o),
}

OTHERS = {
    "float": torch.tensor([1.5, -2.0, 4.0]),
    "int": torch.tensor([1, -2, 4]),
    "bool": torch.tensor([True, False, True]),
    "zero_dim_half": torch.tensor(2.5, dtype=torch.float16),
    "double": torch.tensor([0.1, 3.0], dtype=torch.float64),
    # The number is converted to the common dtype first (eager reads only a second operand as
    # an unrounded CPU scalar): bf16(0.1) * x, rounded once.
    "bfloat16": (torch.randn(64, generator=torch.Generator().manual_seed(0)) * 3).to(torch.bfloat16),
    "half": (torch.randn(64, generator=torch.Generator().manual_seed(0)) * 3).to(torch.float16),
}


@pytest.mark.parametrize("other", list(OTHERS))
@pytest.mark.parametrize("call", list(CALLS))
def test_number_first_matches_eager(cpu_backend: object, call: str, other: str) -> None:
    fn, o = CALLS[call], OTHERS[other]
    try:
        want = fn(o)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e).split("\n")[0][:40]):
            fn(o.to("lazy")).cpu()
        return
    got = fn(o.to("lazy")).cpu()
    assert got.dtype == want.dtype
    exact = other in ("bfloat16", "half") and call != "add_alpha"  # (alpha: an ulp, as x.add(y, alpha=a))
    torch.testing.assert_close(got, want, equal_nan=True, **({"rtol": 0, "atol": 0} if exact else {}))
