"""Each traced op names the user's line, also when the op comes from inside torch.

``source_location.current`` remembers the first torch frame its last walk passed and the user
line above it (one identity test per op of an ``opt.step()`` instead of a stack walk). These
tests pin what that must not change: the line of each call, a generator inside torch resumed
from another line, and which tensors count as live at a barrier.
"""

from __future__ import annotations

import sys
import weakref

import pytest
import torch
from conftest import use_backend

import lazy_core
from lazy_core import source_location
from lazy_core.tensor import LazyTensor

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _eager_backend() -> None:
    use_backend("eager")
    source_location.forget_frames()


def _line() -> int:
    return sys._getframe(1).f_lineno


def _locations(t: LazyTensor) -> set[int]:
    """The lines of every op node in ``t``'s pending graph (this file only)."""
    lines: set[int] = set()
    todo, seen = [t._lz_value().node], set()
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        loc = getattr(node, "location", None)
        if loc is not None and loc.filename == __file__ and not node.is_leaf():
            lines.add(loc.line)
        todo.extend(o.node for o in getattr(node, "operands", ()))
    return lines


def test_ops_inside_torch_name_each_calling_line() -> None:
    # F.softmax(x) and F.layer_norm run torch-internal Python around their ops in some
    # versions; torch.nn.functional's Python frames are the anchor here.
    x = torch.randn(4, 4).to("lazy")
    a = torch.nn.functional.normalize(x); first = _line()  # noqa: E702
    b = torch.nn.functional.normalize(a); second = _line()  # noqa: E702
    assert _locations(a) == {first}
    assert _locations(b) - _locations(a) == {second}


_GENERATOR = """
def generator(x):
    while True:
        x = x * 3.0
        yield x
"""


def test_a_resumed_generator_inside_torch_is_not_taken_for_its_first_caller(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # A generator frame is resumed from whichever line calls next(): the frames above it change
    # while it lives, so it must not key the remembered location. The generator's file poses
    # as torch's (internal, not this package's).
    path = tmp_path / "torch_like.py"  # type: ignore[operator]
    path.write_text(_GENERATOR)
    namespace: dict = {}
    exec(compile(_GENERATOR, str(path), "exec"), namespace)  # noqa: S102 - the test's own code
    monkeypatch.setitem(source_location._kind_cache, str(path), source_location._TORCH)
    gen = namespace["generator"](torch.ones(2).to("lazy"))
    a = next(gen); first = _line()  # noqa: E702
    b = next(gen); second = _line()  # noqa: E702
    assert a._lz_value().node.location.line == first
    assert b._lz_value().node.location.line == second


def test_the_remembered_frame_keeps_no_tensor_alive_at_a_barrier() -> None:
    # An optimizer step's frame holds its temporaries (``denom`` in Adam); once the step
    # returned, they are dead, and a barrier must not count them as live graph outputs.
    use_backend("reference")
    p = torch.nn.Parameter(torch.randn(8, 8).to("lazy"))
    p.grad = torch.randn(8, 8).to("lazy")
    opt = torch.optim.Adam([p], lr=0.1)
    lazy_core.mark_step()
    temps: list[weakref.ref] = []
    real_sqrt = torch.Tensor.sqrt

    def sqrt(self: torch.Tensor) -> torch.Tensor:
        out = real_sqrt(self)
        temps.append(weakref.ref(out))
        return out

    torch.Tensor.sqrt = sqrt  # type: ignore[method-assign]
    try:
        opt.step()
    finally:
        torch.Tensor.sqrt = real_sqrt  # type: ignore[method-assign]
    assert temps
    lazy_core.mark_step()
    assert all(ref() is None for ref in temps), "a dead temporary was kept alive past the barrier"
    graph = lazy_core.executor().last_graph()
    # Parameter, exp_avg, exp_avg_sq: the step's only live results.
    assert graph is not None and len(graph.outputs) == 3, len(graph.outputs)
