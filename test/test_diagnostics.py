"""Diagnostics (issue 9): recompile causes, execution labels, step guards, closures, dumps,
the metrics report and the graph-size safety net.

Each test provokes one cause and checks that the message names the right
line of this file. Lines are found by markers (``# @name`` at the end of a
line), so editing the file does not break the tests.
"""

from __future__ import annotations

import os
import re
import shutil
import warnings

import pytest
import torch
from conftest import backend_unavailable_reason, use_backend

import lazy_core
from lazy_core import diagnostics, graph_limits, metrics, step_guard
from lazy_core.step_guard import StepGuardError

_SOURCE = open(__file__).read().splitlines()


def line(marker: str) -> int:
    """The line of this file that ends with ``# @marker``."""
    hits = [i + 1 for i, text in enumerate(_SOURCE) if text.rstrip().endswith(f"# @{marker}")]
    assert len(hits) == 1, f"marker {marker!r} found {len(hits)} times"
    return hits[0]


def at(marker: str) -> str:
    """``test_diagnostics.py:<line>`` as the messages write it (maybe after a directory)."""
    return f"test_diagnostics.py:{line(marker)}"


@pytest.fixture(autouse=True)
def _fresh():
    use_backend("eager")
    diagnostics.reset()
    step_guard.reset()
    yield
    lazy_core.mark_step()
    graph_limits.set_max_pending_nodes(None)


def lazy(t: torch.Tensor) -> torch.Tensor:
    return t.to("lazy")


def last_recompile() -> diagnostics.Recompile:
    recs = diagnostics.recompiles()
    assert recs, "expected a recompile"
    return recs[-1]


# -- execution labels -------------------------------------------------------------------


def test_each_execution_is_labelled_with_cause_and_user_line(capsys):
    x = lazy(torch.randn(4, 4))
    y = x * 2 + 3
    lazy_core.mark_step()  # @label-mark-step
    z = (y + 1).sum()
    z.item()  # @label-item
    w = y.relu()
    print(w)  # @label-print
    v = y - 5
    torch.nonzero(v)  # @label-fallback
    labels = [e.label for e in diagnostics.executions()]
    assert len(labels) == 4, labels
    assert labels[0].startswith("mark_step at ") and labels[0].endswith(at("label-mark-step"))
    assert labels[1].startswith("item() at ") and labels[1].endswith(at("label-item"))
    assert labels[2].startswith("print at ") and labels[2].endswith(at("label-print"))
    assert labels[3].startswith("fallback aten.nonzero at ") and labels[3].endswith(at("label-fallback"))
    # The report counts them by cause and line, and lists the fallback by op and line.
    report = metrics.report()
    assert "Executions by cause" in report and at("label-item") in report
    assert "aten.nonzero.default" in report and at("label-fallback") in report


# -- recompile causes ---------------------------------------------------------------------


def _shape_step(batch: int, w: torch.Tensor) -> torch.Tensor:
    x = torch.randn(batch, 8).to("lazy")  # @shape-upload
    y = (x @ w).relu()
    lazy_core.mark_step()  # @shape-mark-step
    return y


def test_recompile_explains_an_input_shape_change(backend):
    w = lazy(torch.randn(8, 2))
    for batch in (4, 4, 3):
        _shape_step(batch, w)
    assert metrics.counter("cache_miss") == 2  # compiled or loaded from disk
    rec = last_recompile()
    assert rec.family.startswith("mark_step at ") and rec.family.endswith(at("shape-mark-step"))
    assert len(diagnostics.recompiles()) == 1
    text = rec.message
    assert re.search(
        rf"input \d+ \(from \S*{re.escape(at('shape-upload'))}\) changed shape from \[4, 8\] to \[3, 8\]",
        text,
    ), text


def test_recompile_explains_a_new_op():
    x = lazy(torch.randn(3, 5))
    for i in range(3):
        y = x * 3 - 2
        if i == 2:
            y = y.sigmoid()  # @new-op
        x = x + 1
        lazy_core.mark_step()  # @new-op-step
    rec = last_recompile()
    assert any(m.startswith("new op aten.sigmoid.default at") and m.endswith(at("new-op"))
               for m in rec.differences), rec.message


def test_recompile_explains_an_argument_left_at_its_default():
    """An argument at its default is not recorded: ``sort(x, 0)`` then
    ``sort(x)`` said "the same graph, evicted from the cache"."""
    x = lazy(torch.randn(3, 4))
    for dim in (0, None, 1):
        values = x.sort() if dim is None else x.sort(dim)  # @default-dim
        values[0].cpu()
    messages = [r.message for r in diagnostics.recompiles()]
    assert len(messages) == 2, messages
    assert "'dim' of aten.sort.default at " in messages[0] and at("default-dim") in messages[0], messages[0]
    assert "changed from 0 to its default" in messages[0], messages[0]
    assert "changed from its default to 1" in messages[1], messages[1]


def test_recompile_explains_a_scalar_baked_as_a_constant():
    x = lazy(torch.randn(6))
    for scale in (2.0, 3.0, 1.0):
        x = x * scale  # @baked-scale
        lazy_core.mark_step()
    # 2.0 and 3.0 are the same graph (a parameter); 1.0 is folded into the graph.
    assert metrics.counter("cache_miss") == 2
    rec = last_recompile()
    assert any(
        "scalar 'other' of aten.mul.Tensor at" in m and at("baked-scale") in m and "constant 1.0" in m
        for m in rec.differences
    ), rec.message


def test_recompile_explains_a_constant_argument_that_is_not_lifted():
    x = lazy(torch.arange(10.0))
    for shift in (1, 2):
        x = torch.roll(x, shift)  # @roll
        lazy_core.mark_step()
    rec = last_recompile()
    assert any("constant 'shifts' of aten.roll.default" in m and at("roll") in m and "[1] to [2]" in m
               for m in rec.differences), rec.message


def test_recompile_names_a_changed_flag_next_to_a_changed_shape():
    """Constants that follow an input's shape (view sizes) are not causes when a shape changed;
    a bool is never a size. GPT-2's last decode step recompiled for a baked ``True`` and the
    message listed only the growing KV-cache shapes."""
    for n, descending in ((3, False), (4, True)):
        lazy(torch.randn(n, 5)).sort(descending=descending)[0].cpu()  # @flag
    rec = last_recompile()
    assert any("changed shape from [3, 5] to [4, 5]" in m for m in rec.differences), rec.message
    assert any("constant 'descending' of aten.sort.default" in m and "to True" in m
               and at("flag") in m for m in rec.differences), rec.message


def test_recompile_explains_a_different_number_of_live_outputs():
    x = lazy(torch.randn(4))
    keep = []
    for i in range(2):
        y = x.exp()
        if i == 1:
            keep.append(x.cos())  # @extra-live
        x = y + 0.5
        lazy_core.mark_step()
    rec = last_recompile()
    assert any("3 live outputs instead of 2" in m for m in rec.differences), rec.message
    assert any(m.startswith("new live output: aten.cos.default at") and at("extra-live") in m
               for m in rec.differences), rec.message


def test_recompile_of_an_evicted_graph_says_so():
    x = lazy(torch.randn(4))
    for _ in range(2):
        x = x * 5
        lazy_core.mark_step()
        lazy_core.executor().clear_cache()
    assert "no longer cached" in last_recompile().message


def test_a_steady_loop_has_no_recompiles():
    w = lazy(torch.randn(8, 2))
    for _ in range(4):
        _shape_step(4, w)
    assert diagnostics.recompiles() == []
    assert metrics.counter("cache_miss") == 1


def test_explain_prints_recompiles_and_graph_breaks(capsys):
    lazy_core.debug.explain()
    try:
        x = lazy(torch.randn(4, 3))
        for n in (4, 2):
            x = lazy(torch.randn(n, 3))
            (x * 4).sum().item()  # @explain-item
            lazy_core.mark_step()
    finally:
        lazy_core.debug.explain(False)
    err = capsys.readouterr().err
    assert "recompiling for item() at" in err and at("explain-item") in err
    assert "changed shape from [4, 3] to [2, 3]" in err
    assert "forced the pending graph to run before mark_step()" in err
    summary = diagnostics.summary()
    assert "recompile causes" in summary and at("explain-item") in summary


# -- step guards ----------------------------------------------------------------------------


def _train(model: torch.nn.Module, batches: list, guard: dict | None) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in batches:
        with lazy_core.step(**guard) if guard is not None else _null():  # @guard-with
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
        if guard is None:
            lazy_core.mark_step()


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _batches(sizes: list[int], device: str) -> list:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(n, 6, generator=g).to(device), torch.randn(n, 2, generator=g).to(device))
            for n in sizes]


def test_guard_is_silent_on_a_clean_loop_and_matches_cpu():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    model.load_state_dict(ref.state_dict())
    model.to("lazy")
    _train(model, _batches([4] * 4, "lazy"), {"max_graphs": 1, "full_graph": True})
    _train(ref, _batches([4] * 4, "cpu"), None)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-5, atol=1e-6)
    assert metrics.counter("cache_miss") == 1
    assert [e.cause for e in diagnostics.executions()] == ["mark_step"] * 4


def test_guard_max_graphs_raises_on_a_recompile_naming_the_change():
    model = torch.nn.Linear(6, 2).to("lazy")
    with pytest.raises(StepGuardError) as info:
        _train(model, _batches([4, 4, 3], "lazy"), {"max_graphs": 1})
    text = str(info.value)
    assert "max_graphs=1" in text and at("guard-with") in text
    assert "2nd distinct graph" in text and "changed shape from [4, 6] to [3, 6]" in text


def test_guard_full_graph_raises_on_item_naming_the_line():
    x = lazy(torch.randn(5))
    with pytest.raises(StepGuardError) as info:
        with lazy_core.step(full_graph=True):  # @guard-item-with
            y = (x * 2).sum()
            y.item()  # @guard-item
    text = str(info.value)
    assert "item() at" in text and at("guard-item") in text and at("guard-item-with") in text
    assert "add_step_closure" in text
    # Nothing ran: the guard stops the execution before it starts.
    assert metrics.counter("execute") == 0


def test_guard_full_graph_raises_on_an_eager_fallback():
    x = lazy(torch.randn(5))
    x.cpu()  # materialized: the fallback needs no execution, it is still a graph break
    with pytest.raises(StepGuardError) as info:
        with lazy_core.step(full_graph=True):
            torch.nonzero(x)  # @guard-fallback
    assert "aten.nonzero" in str(info.value) and at("guard-fallback") in str(info.value)


def test_guard_full_graph_allows_one_mark_step_inside_but_not_two():
    x = lazy(torch.randn(3))
    with lazy_core.step(full_graph=True):
        x = x + 1
        lazy_core.mark_step()
    with pytest.raises(StepGuardError, match="second graph"):
        with lazy_core.step(full_graph=True):
            x = x + 1
            lazy_core.mark_step()
            x = x * 3
    lazy_core.mark_step()


# -- step closures ------------------------------------------------------------------------


def test_step_closures_run_after_mark_step_in_order_without_extra_executions():
    seen: list = []
    x = lazy(torch.tensor([1.0, 2.0]))
    loss = None
    for step in range(3):
        x = x * 2
        loss = x.sum()
        lazy_core.add_step_closure(lambda s, v: seen.append((s, "first", v.item())), (step, loss))
        lazy_core.add_step_closure(lambda s: seen.append((s, "second")), (step,))
        assert len(seen) == 2 * step, "closures must wait for mark_step"
        lazy_core.mark_step()
    assert seen == [
        (0, "first", 6.0), (0, "second"), (1, "first", 12.0), (1, "second"), (2, "first", 24.0), (2, "second"),
    ]
    # Reading materialized values in a closure costs a transfer, not a graph.
    assert metrics.counter("execute") == 3
    del loss


def test_async_step_closures_get_cpu_copies_and_run_in_order():
    seen: list = []
    x = lazy(torch.ones(3))
    for step in range(3):
        x = x + step
        lazy_core.add_step_closure(lambda s, t: seen.append((s, t.device.type, t.tolist())), (step, x),
                                   run_async=True)
        lazy_core.mark_step()
    lazy_core.closures.wait()
    assert seen == [(0, "cpu", [1.0] * 3), (1, "cpu", [2.0] * 3), (2, "cpu", [4.0] * 3)]


def test_closures_inside_a_full_graph_step_are_not_graph_breaks():
    x = lazy(torch.randn(3))
    values: list = []
    with lazy_core.step(full_graph=True):
        y = x.exp().sum()
        lazy_core.add_step_closure(lambda v: values.append(v.item()), (y,))
    assert values == [pytest.approx(torch.exp(x.cpu()).sum().item())]


# -- dumps --------------------------------------------------------------------------------


def _dump_one_step(tmp_path, monkeypatch) -> list[str]:
    monkeypatch.setenv("LAZY_DUMP_DIR", str(tmp_path))
    x = lazy(torch.randn(3, 4))
    y = (x @ x.t()).relu() + 2.5  # @dump-op
    lazy_core.mark_step()  # @dump-step
    torch.testing.assert_close(y.cpu(), (x.cpu() @ x.cpu().t()).relu() + 2.5)
    return sorted(os.listdir(tmp_path))


def test_dump_dir_writes_each_computation_eager(tmp_path, monkeypatch):
    files = _dump_one_step(tmp_path, monkeypatch)
    name = diagnostics.executions()[-1].graph_name
    assert name and name.startswith("lazy_graph_")
    for suffix in (".ir.txt", ".dot", ".stack.txt", ".metrics.txt"):
        assert f"{name}{suffix}" in files, files
    assert "index.txt" in files
    ir = (tmp_path / f"{name}.ir.txt").read_text()
    assert "aten.relu.default" in ir and at("dump-op") in ir and "mark_step at" in ir
    assert at("dump-step") in (tmp_path / f"{name}.stack.txt").read_text()
    assert "compile" in (tmp_path / f"{name}.metrics.txt").read_text()
    assert (tmp_path / f"{name}.dot").read_text().startswith("digraph")
    if shutil.which("dot"):
        assert f"{name}.svg" in files


def test_dump_dir_writes_mlir_on_reference(tmp_path, monkeypatch):
    reason = backend_unavailable_reason("reference")
    if reason:
        pytest.skip(f"reference backend unavailable: {reason}")
    use_backend("reference")
    files = _dump_one_step(tmp_path, monkeypatch)
    name = diagnostics.executions()[-1].graph_name
    mlir = (tmp_path / f"{name}.torch.mlir").read_text()
    # relu is lowered as eager's kernel, a masked_fill below zero (lowering/decompositions.py).
    assert "torch.aten.masked_fill" in mlir and "test_diagnostics.py" in mlir, "MLIR must carry user locations"
    assert f"{name}.linalg-on-tensors.mlir" in files
    assert "linalg" in (tmp_path / f"{name}.linalg-on-tensors.mlir").read_text()


# -- the graph-size safety net -------------------------------------------------------------


def test_graph_limit_cuts_a_loop_without_mark_step_and_stays_correct():
    graph_limits.set_max_pending_nodes(200)
    start = torch.randn(16)
    x = lazy(start.clone())
    expected = start.clone()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(300):  # @limit-loop
            x = x * 1.01 + 0.5  # @limit-op
            expected = expected * 1.01 + 0.5
    assert metrics.counter("graph_limit_cut") >= 2
    messages = [str(w.message) for w in caught if "LAZY_MAX_PENDING_NODES" in str(w.message)]
    assert len(messages) == 1, "warn once per loop, count every cut"
    assert "loop at " in messages[0] and at("limit-loop") in messages[0] and at("limit-op") in messages[0]
    assert caught[0].lineno == line("limit-loop")
    assert any(e.cause == "graph-size limit" for e in diagnostics.executions())
    torch.testing.assert_close(x.cpu(), expected)


def test_graph_limit_off_and_default():
    graph_limits.set_max_pending_nodes(0)
    x = lazy(torch.ones(4))
    for _ in range(100):
        x = x + 2
    assert metrics.counter("graph_limit_cut") == 0
    assert graph_limits.pending_nodes() == 100
    graph_limits.set_max_pending_nodes(None)
    assert graph_limits.max_pending_nodes() == int(os.environ.get("LAZY_MAX_PENDING_NODES", "100000"))


# -- the metrics report -----------------------------------------------------------------------


def test_metrics_report_tables():
    x = lazy(torch.randn(64, 32))
    for _ in range(3):
        x = (x * 0.5).tanh()
        lazy_core.mark_step()
    torch.nonzero(x > 0)  # @report-fallback
    x.cpu()
    report = metrics.report()
    for section in ("Counters", "Timers", "Transfers", "Executions by cause",
                    "Fallbacks by op", "Fallbacks by user line"):
        assert section in report, report
    assert re.search(r"timer\s+xla name\s+count\s+total\s+mean\s+p50\s+p99", report)
    assert re.search(rf"CompileTime\s+{metrics.counter('compile')}\s", report), report
    assert re.search(r"mark_step\s+MarkStep\s+3", report), report
    # Transfers in bytes: the 64x32 float32 upload (8 KiB) and the nonzero result.
    up = metrics.counter("transfer_to_device_bytes")
    assert up >= 64 * 32 * 4 and re.search(rf"host -> device\s+2\s+.*\({up:,d} B\)", report), report
    assert at("report-fallback") in report
    timers = metrics.timers()
    assert timers["execute"]["count"] == 4 and timers["execute"]["p99"] >= timers["execute"]["p50"]
