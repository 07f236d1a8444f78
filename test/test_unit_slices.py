"""A one-element slice reshaped to more dimensions than its source compiles.

IREE 3.13 refused such graphs ("expected rank to be smaller or equal to the other rank": its
``BubbleUpExpandShapesPass`` makes a ``tensor.extract_slice`` with more result dimensions than
its source) when the reshaped slice is also computed with; found by the fuzzer, seed 4200 (an
``as_strided`` of size (1, 1) read before ``mark_step``). ``backends/iree/unit_slices.py``
reshapes the slice behind a barrier. The programs run on every backend and must equal eager;
the unrewritten module is kept as an upstream canary.
"""

from __future__ import annotations

import pytest
import torch

import lazy_core
from lazy_mlir.backends.iree.compiler import IreeCompileError, compile_vmfb
from lazy_mlir.backends.iree.config import CPU, make_config
from lazy_mlir.backends.iree.unit_slices import separate_unit_slice_expansions

_PROGRAMS = {
    "last_token_unsqueeze": lambda x: x[:, -1:].unsqueeze(-1),
    "flat_slice_view": lambda x: x.view(-1)[4:5].view(1, 1),
    "flat_select_view": lambda x: x.view(-1)[3].view(1, 1),
    "slice_view_rank3": lambda x: x[:, 4:5].view(1, 1, 1),
    "as_strided_unit": lambda x: x.as_strided((1, 1), (0, 6), 4),
}


@pytest.mark.parametrize("program", list(_PROGRAMS))
@pytest.mark.parametrize("read", ["cpu", "mark_step"])
def test_a_one_element_slice_reshaped_up_and_computed_with_compiles(backend: lazy_core.BackendImpl, program: str,
                                                                     read: str) -> None:
    torch.manual_seed(0)
    x, s = torch.randn(1, 12), torch.tensor(2.5)

    def run(x: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = _PROGRAMS[program](x)
        return a, a * s

    expected = run(x, s)
    got = run(x.to("lazy"), s.to("lazy"))
    if read == "mark_step":
        lazy_core.mark_step()
    for e, g in zip(expected, got):
        torch.testing.assert_close(g.cpu(), e, rtol=0, atol=0)


# ``a = x.view(-1)[4:5].view(1, 1); return a * s, a`` as lowered.
_REFUSED = """
module {
  func.func @main(%arg0: !torch.vtensor<[12],f32>, %arg1: !torch.vtensor<[],f32>) -> (!torch.vtensor<[1,1],f32>, !torch.vtensor<[1,1],f32>) {
    %int0 = torch.constant.int 0
    %int1 = torch.constant.int 1
    %int4 = torch.constant.int 4
    %int5 = torch.constant.int 5
    %0 = torch.aten.slice.Tensor %arg0, %int0, %int4, %int5, %int1 : !torch.vtensor<[12],f32>, !torch.int, !torch.int, !torch.int, !torch.int -> !torch.vtensor<[1],f32>
    %1 = torch.prim.ListConstruct %int1, %int1 : (!torch.int, !torch.int) -> !torch.list<int>
    %2 = torch.aten.view %0, %1 : !torch.vtensor<[1],f32>, !torch.list<int> -> !torch.vtensor<[1,1],f32>
    %3 = torch.aten.mul.Tensor %2, %arg1 : !torch.vtensor<[1,1],f32>, !torch.vtensor<[],f32> -> !torch.vtensor<[1,1],f32>
    return %3, %2 : !torch.vtensor<[1,1],f32>, !torch.vtensor<[1,1],f32>
  }
}
"""


def test_the_rewrite_puts_one_barrier_under_the_reshape_and_leaves_other_slices_alone() -> None:
    rewritten = separate_unit_slice_expansions(_REFUSED)
    assert rewritten.count("util.optimization_barrier") == 1
    two_elements = _REFUSED.replace("%int4, %int5, %int1 :", "%int0, %int1, %int1 :") \
        .replace("[1],f32>", "[2],f32>").replace("[1,1],f32>", "[1,2],f32>")  # types only: it is not compiled
    same_rank = _REFUSED.replace("[1,1],f32>", "[1],f32>") \
        .replace("ListConstruct %int1, %int1 : (!torch.int, !torch.int)", "ListConstruct %int1 : (!torch.int)")
    for text in (two_elements, same_rank):
        assert "optimization_barrier" not in separate_unit_slice_expansions(text)


def test_iree_still_refuses_the_unrewritten_module() -> None:
    """Upstream canary: remove unit_slices.py once IREE compiles this."""
    with pytest.raises(IreeCompileError, match="expected rank to be smaller or equal"):
        compile_vmfb(_REFUSED, make_config(CPU), "main", "torch")
    compile_vmfb(separate_unit_slice_expansions(_REFUSED), make_config(CPU), "main", "torch")
