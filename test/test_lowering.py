"""lowering: the Computation API, each pipeline, failures with repros, lowering cost.

Graphs are traced on the ``eager`` backend (tracing only, no compiler) and
lowered here directly, so these tests exercise the lowering and nothing of a
backend. FileCheck tests on the emitted text live in test/lit/.
"""

from __future__ import annotations

import inspect
import os
import time

import pytest
import torch

import lazy_core
from lazy_core import metrics
from lazy_core.graph import LazyGraph, build_graph
from lazy_mlir import lowering
from lazy_mlir.lowering.pipelines import to_torch_backend

THIS_FILE = os.path.abspath(__file__)


def _line() -> int:
    """The caller's line number (to name the line a traced op came from)."""
    return inspect.currentframe().f_back.f_lineno


def _graph(*tensors: torch.Tensor) -> LazyGraph:
    return build_graph([t._lz_value() for t in tensors])


def _steps(step, n: int) -> list[LazyGraph]:
    """Run ``step`` then ``mark_step()`` ``n`` times; the graphs the executor ran."""
    graphs: list[LazyGraph] = []
    hook = lambda graph, entry, reason: graphs.append(graph)  # noqa: E731
    lazy_core.executor().hooks.append(hook)
    try:
        for _ in range(n):
            keep = step()  # noqa: F841 (live outputs are what the graph returns)
            lazy_core.mark_step()
    finally:
        lazy_core.executor().hooks.remove(hook)
    return graphs


@pytest.fixture(autouse=True)
def _eager(eager_backend):
    yield
    lazy_core.mark_step()


# -- Computation -------------------------------------------------------------------------


def test_computation_has_locations_signature_and_bytecode():
    x = torch.randn(3, 4).to("lazy")
    y = (x * 0.5).relu(); line = _line()  # noqa: E702
    computation = lowering.lower_graph(_graph(y))

    assert computation.form == "torch"
    assert computation.func_name.startswith("lazy_graph_")
    assert computation.graph_hash in computation.func_name
    assert f'loc("{THIS_FILE}":{line}:0)' in computation.mlir
    # relu is lowered as eager's kernel, a masked_fill below zero (-0.0 and NaN stay).
    assert "torch.aten.masked_fill.Scalar" in computation.mlir and "!torch.vtensor<[3,4],f32>" in computation.mlir
    assert [a.kind for a in computation.args] == ["device_data", "scalar_pack"]
    assert [(a.shape, a.dtype) for a in computation.args] == [((3, 4), torch.float32), ((1,), torch.float64)]
    assert [(r.shape, r.dtype) for r in computation.results] == [((3, 4), torch.float32)]
    assert computation.signature() == (
        f"@{computation.func_name}(device_data[3, 4]:float32, scalar_pack[1]:float64) -> ([3, 4]:float32)"
    )
    assert computation.to_string().startswith("module")
    assert "loc(" not in computation.to_string()

    data = computation.to_bytecode()
    assert data.startswith(b"ML\xefR")  # MLIR bytecode magic
    from torch_mlir import ir

    reparsed = ir.Module.parse(data, context=lowering.mlir_context())
    assert reparsed.operation.get_asm(enable_debug_info=True) == computation.mlir
    clone = computation.clone_module()
    assert clone.operation.get_asm(enable_debug_info=True) == computation.mlir


def test_computation_record_round_trip():
    """What an on-disk cache keeps of a computation: signature, names and the
    MLIR text with locations; the module is parsed back only when asked for."""
    x = torch.randn(3, 4).to("lazy")
    y = (x * 0.5 + 3).relu(); line = _line()  # noqa: E702
    computation = lowering.lower_graph(_graph(y))
    back = lowering.Computation.from_record(computation.to_record())
    assert back.module is None
    for field in ("func_name", "graph_hash", "args", "results", "form", "node_locations", "full_route"):
        assert getattr(back, field) == getattr(computation, field), field
    assert back.mlir == computation.mlir and f'loc("{THIS_FILE}":{line}:0)' in back.mlir
    assert back.module is None  # .mlir alone needs no parse
    assert back.signature() == computation.signature()
    assert back.asm(locations=False) == computation.asm(locations=False)
    lowered = lowering.lower(back, "linalg-on-tensors")  # pipelines parse the text on demand
    assert lowered.form == "linalg-on-tensors" and "linalg.generic" in lowered.mlir


def test_scalar_parameters_are_packed_per_dtype():
    """Every float scalar in one f64 argument, every int scalar in one i64
    argument, after the device data; the order of graph.inputs is kept."""
    x = torch.randn(3).to("lazy")
    y = ((x * 0.5 + 3) * 2.5 - 7) * 1.5
    graph = _graph(y)
    layout = graph.argument_layout
    assert len(layout.device_data) == 1 and len(layout.float_scalars) == 3 and len(layout.int_scalars) == 2
    values = [graph.inputs[i].value for i in layout.float_scalars + layout.int_scalars]
    assert values == [0.5, 2.5, 1.5, 3, 7]
    computation = lowering.lower_graph(graph)
    assert [(a.kind, a.shape, a.dtype) for a in computation.args] == [
        ("device_data", (3,), torch.float32), ("scalar_pack", (3,), torch.float64), ("scalar_pack", (2,), torch.int64)]
    # The eager interpreter reads the same layout.
    from lazy_core.eager_backend import interpret

    host = torch.randn(3)
    [out] = interpret(graph, [host, torch.tensor([0.5, 2.5, 1.5], dtype=torch.float64), torch.tensor([3, 7])])
    torch.testing.assert_close(out, ((host * 0.5 + 3) * 2.5 - 7) * 1.5)


def test_signature_stable_across_identical_steps():
    model = torch.nn.Linear(6, 3).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step():
        loss = model(torch.randn(5, 6).to("lazy")).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    graphs = _steps(step, 3)
    comps = [lowering.lower_graph(g) for g in graphs]
    # Plain SGD keeps no state: every step is the same program on new data.
    assert len({c.func_name for c in comps}) == 1
    assert len({c.signature() for c in comps}) == 1
    assert len({c.asm(locations=False) for c in comps}) == 1


def test_name_changes_with_shape_and_op():
    a = lowering.lower_graph(_graph(torch.randn(3, 4).to("lazy").exp()))
    b = lowering.lower_graph(_graph(torch.randn(3, 5).to("lazy").exp()))
    c = lowering.lower_graph(_graph(torch.randn(3, 4).to("lazy").log()))
    assert len({a.func_name, b.func_name, c.func_name}) == 3


def test_live_outputs_only():
    a, b, c = (torch.randn(2, 2).to("lazy") for _ in range(3))
    w = a + b
    x = w - c
    y = x + x + w
    z = y + y
    del w, x, y
    [graph] = _steps(lambda: None, 1)
    assert len(graph.outputs) == 1
    computation = lowering.lower_graph(graph)
    assert len(computation.results) == 1
    assert computation.mlir.count("torch.aten.add.Tensor") == 4
    assert z.shape == (2, 2)


def test_boundary_casts_widen_bf16():
    x = torch.randn(2, 3, dtype=torch.bfloat16).to("lazy")
    computation = lowering.lower_graph(_graph(x * x), boundary_casts={torch.bfloat16: torch.float32})
    assert [(a.dtype, a.logical_dtype) for a in computation.args] == [(torch.float32, torch.bfloat16)]
    assert [(r.dtype, r.logical_dtype) for r in computation.results] == [(torch.float32, torch.bfloat16)]
    assert "!torch.vtensor<[2,3],bf16>" in computation.mlir


# -- pipelines ---------------------------------------------------------------------------

_MARKERS = {
    "torch": ("torch.aten.mm", "torch.aten.sum.dim_IntList"),
    "linalg-on-tensors": ("linalg.matmul", "linalg.generic"),
    "tosa": ("tosa.matmul", "tosa.reduce_sum"),
    "stablehlo": ("stablehlo.dot_general", "stablehlo.reduce"),
}


@pytest.mark.parametrize("target", list(_MARKERS))
def test_each_pipeline_lowers(target):
    x = torch.randn(4, 8).to("lazy")
    w = torch.randn(8, 3).to("lazy")
    computation = lowering.lower_graph(_graph((x @ w).tanh(), x.sum(1)))
    before = computation.mlir
    lowered = lowering.lower(computation, target)
    assert lowered.form == target
    assert lowered.func_name == computation.func_name
    assert lowered.signature() == computation.signature()
    text = lowered.asm(locations=False)
    for marker in _MARKERS[target]:
        assert marker in text, (marker, text)
    if target != "torch":
        assert "torch.aten" not in text and "!torch." not in text
    lowered.module.operation.verify()
    assert f'"{THIS_FILE}"' in lowered.mlir  # locations survive lowering
    assert computation.mlir == before  # the input is never mutated


def test_raw_target_is_the_imported_module_and_unknown_target_fails():
    computation = lowering.lower_graph(_graph(torch.randn(2).to("lazy").neg()))
    assert lowering.lower(computation, "raw") is computation
    with pytest.raises(ValueError, match="unknown lowering target"):
        lowering.lower(computation, "spirv")


def test_fast_route_covers_training_step():
    """On the way to linalg, nll_loss stays whole on the fast route (linalg lowers it directly)."""
    model = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4)).to("lazy")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        x = torch.randn(6, 12).to("lazy")
        y = torch.randint(0, 4, (6,)).to("lazy")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    [graph] = _steps(step, 1)
    computation = lowering.lower_graph(graph)
    metrics.reset()
    fast = lowering.lower(computation, "linalg-on-tensors")
    assert metrics.counter("lowering_full_torch_pipeline") == 0
    assert "linalg.matmul" in fast.mlir or "linalg.generic" in fast.mlir
    # The "torch" target is the contract as torch-mlir's full route gives it
    # (nll_loss decomposed), since its consumers, like IREE, decompose anyway.
    torch_form = lowering.lower(computation, "torch")
    assert torch_form.full_route
    assert "torch.aten.nll_loss_forward" not in torch_form.mlir
    assert metrics.counter("lowering_full_torch_pipeline") == 1
    full = to_torch_backend(computation, fast=False)
    assert full.full_route and full.asm(locations=False) == torch_form.asm(locations=False)


# -- failures ----------------------------------------------------------------------------


def test_pipeline_failure_names_op_and_line_and_writes_repro(tmp_path, monkeypatch):
    monkeypatch.setenv("LAZY_REPRO_DIR", str(tmp_path))
    x = torch.randn(4, 5).to("lazy")
    y = torch.atan2(x.double(), x.double() + 1); line = _line()  # noqa: E702  no TOSA atan2 (float64: not decomposed)
    computation = lowering.lower_graph(_graph(y))
    with pytest.raises(lowering.LoweringError) as info:
        lowering.lower(computation, "tosa")
    e = info.value
    assert isinstance(e, lazy_core.CompileError)  # the executor's fallback catches it
    message = str(e)
    assert "torch.aten.atan2" in message
    assert f"{THIS_FILE}:{line}" in message
    assert e.location == f"{THIS_FILE}:{line}"
    assert e.op == "torch.aten.atan2"
    assert e.repro_path and os.path.dirname(e.repro_path) == str(tmp_path)
    assert e.repro_path in message
    repro = open(e.repro_path).read()
    assert "torch-backend-to-tosa-backend-pipeline" in repro
    assert "torch.aten.atan2" in repro and f'loc("{THIS_FILE}":{line}:0)' in repro


def test_unimportable_op_is_reported_not_skipped(tmp_path, monkeypatch):
    """An op with no torch-dialect definition: is_importable says so (the tracer
    then runs it eagerly), and lowering a graph holding it fails naming it."""
    monkeypatch.setenv("LAZY_REPRO_DIR", str(tmp_path))
    assert lowering.is_importable(torch.ops.aten.add.Tensor)
    assert lowering.is_importable(torch.ops.aten.threshold_backward.default)
    assert not lowering.is_importable(torch.ops.aten.special_airy_ai.default)
    # The eager backend traces everything, so the graph does hold airy_ai.
    y = torch.special.airy_ai(torch.rand(3).to("lazy") + 1)
    computation = lowering.lower_graph(_graph(y))
    with pytest.raises(lowering.LoweringError) as info:
        lowering.lower(computation, "linalg-on-tensors")
    assert "airy_ai" in str(info.value)
    assert os.path.exists(info.value.repro_path)


# -- cost --------------------------------------------------------------------------------


def test_lowering_time_per_node(capsys):
    """Measured, printed, never asserted: an MLP training step (Adam) graph."""
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10),
    ).to("lazy")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        loss = torch.nn.functional.cross_entropy(
            model(torch.randn(16, 64).to("lazy")), torch.randint(0, 10, (16,)).to("lazy"))
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    graph = _steps(step, 2)[-1]
    lowering.lower(lowering.lower_graph(graph), "linalg-on-tensors")  # warm up
    times: dict[str, float] = {}
    reps = 3
    for _ in range(reps):
        t0 = time.perf_counter()
        computation = lowering.lower_graph(graph)
        t1 = time.perf_counter()
        torch_form = lowering.lower(computation, "torch")
        t2 = time.perf_counter()
        linalg = lowering.lower(computation, "linalg-on-tensors")
        t3 = time.perf_counter()
        for k, v in (("import", t1 - t0), ("torch", t2 - t1), ("linalg", t3 - t2)):
            times[k] = times.get(k, 0.0) + v / reps
    n = len(graph.nodes)
    with capsys.disabled():
        print(f"\nlowering an MLP+Adam training step: {n} nodes, {len(graph.inputs)} inputs")
        for k, v in times.items():
            print(f"  {k:>7}: {v * 1e3:7.1f} ms  ({v * 1e6 / n:6.0f} us/node)")
    assert torch_form.form == "torch" and linalg.form == "linalg-on-tensors"
