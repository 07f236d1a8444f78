"""tools/: lazy-mlir-trace and lazy-mlir-opsupport on small inputs.

The trace tool runs test/lit/Inputs/tiny_train.py (three identical training
steps); its output must hold one graph, executed three times, whose MLIR has
locations in that script. The op-support table is checked on three OpInfos
whose fate is known: add lowers everywhere, sort and a float64 atan2 have no TOSA lowering, and
nonzero is data-dependent so it runs eagerly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import lazy_core
from lazy_mlir.tools import op_support, trace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "test", "lit", "Inputs", "tiny_train.py")


@pytest.fixture
def eager(eager_backend):
    yield eager_backend
    lazy_core.mark_step()


def test_trace_writes_each_graph_once_with_lowered_forms(tmp_path, eager, capsys):
    out = tmp_path / "trace"
    code = trace.main(["--out", str(out), "--lowered", "linalg-on-tensors", TINY, "3"])
    assert code == 0
    captured = capsys.readouterr()
    assert "loss" in captured.out  # the script ran, with its argument
    assert "lazy_core metrics report" in captured.err
    index = json.loads((out / "index.json").read_text())["graphs"]
    assert len(index) == 1
    graph = index[0]
    assert graph["executions"] == 3 and graph["reason"].startswith("mark_step")
    stem = f"001-{graph['name']}"
    assert graph["files"] == [f"{stem}.torch.mlir", f"{stem}.linalg-on-tensors.mlir"]
    torch_mlir = (out / f"{stem}.torch.mlir").read_text()
    assert f"func.func @{graph['name']}(" in torch_mlir
    assert "torch.aten.addmm" in torch_mlir and "torch.aten.mm" in torch_mlir
    assert f'loc("{TINY}":' in torch_mlir
    linalg = (out / f"{stem}.linalg-on-tensors.mlir").read_text()
    assert "linalg.matmul" in linalg or "linalg.generic" in linalg
    assert "torch.aten" not in linalg.split("\n", 2)[2]  # past the two header comment lines
    metrics = (out / "metrics.txt").read_text()
    assert "cache_hit" in metrics and "compile" in metrics


def test_trace_records_lowering_failures_and_exit_code(tmp_path, eager):
    script = tmp_path / "atan.py"
    script.write_text(
        "import sys, torch, lazy_core\n"
        "x = torch.randn(3).to('lazy')\n"
        "y = torch.atan2(x.double(), x.double() + 1)\n"  # float64: not decomposed
        "lazy_core.mark_step()\n"
        "sys.exit(3)\n"
    )
    out = tmp_path / "trace"
    code = trace.main(["--quiet", "--out", str(out), "--lowered", "tosa,stablehlo", str(script)])
    assert code == 3
    [graph] = json.loads((out / "index.json").read_text())["graphs"]
    assert "torch.aten.atan2" in graph["errors"]["tosa"]
    assert f"{script}:3" in graph["errors"]["tosa"]
    assert "stablehlo" not in graph["errors"]
    assert (out / f"001-{graph['name']}.tosa.error.txt").exists()
    assert (out / f"001-{graph['name']}.stablehlo.mlir").exists()


def test_trace_rejects_unknown_target():
    with pytest.raises(SystemExit):
        trace.parse_args(["--lowered", "spirv", TINY])


def test_trace_console_script_on_reference_backend(tmp_path):
    """The installed entry point, in a fresh process, on a compiling backend."""
    exe = os.path.join(os.path.dirname(sys.executable), "lazy-mlir-trace")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "lazy_mlir.tools.trace"]
    out = tmp_path / "trace"
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run(
        [*cmd, "--backend", "reference", "--quiet", "--out", str(out), TINY, "2"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    expected = _tiny_loss(2)
    assert f"loss {expected}" in result.stdout
    [graph] = json.loads((out / "index.json").read_text())["graphs"]
    assert graph["executions"] == 2
    assert "compile" in (out / "metrics.txt").read_text()


def _tiny_loss(steps: int) -> float:
    """The tiny script's final loss computed eagerly on the CPU."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        x = torch.randn(8, 4)
        out = model(x)
        loss = (out * out).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return round(loss.item(), 4)


def test_op_support_table(tmp_path):
    rows = {r.name: r for r in op_support.opinfo_rows(["add", "sort", "nonzero"], list(op_support.DEFAULT_TARGETS), None)}
    assert rows["add"].aten_ops == ["aten.add.Tensor"]
    assert rows["add"].torch_dialect == "yes"
    assert rows["add"].targets == {t: "yes" for t in op_support.DEFAULT_TARGETS}
    assert rows["sort"].targets["linalg-on-tensors"] == "yes"
    assert rows["sort"].targets["tosa"] == "no: torch.aten.sort"
    assert "aten.nonzero" in rows["nonzero"].note and not rows["nonzero"].targets
    table = op_support.render(list(rows.values()), list(op_support.DEFAULT_TARGETS), "md")
    assert table.splitlines()[0].startswith("| op | aten ops | torch dialect | linalg-on-tensors")
    assert "summary: 3 ops" in table
    out = tmp_path / "ops.json"
    assert op_support.main(["--ops", "add", "--targets", "linalg-on-tensors", "--out", str(out)]) == 0
    [row] = json.loads(out.read_text())
    assert row["name"] == "add" and row["targets"] == {"linalg-on-tensors": "yes"}


def test_op_support_static(capsys):
    assert op_support.main(["--static", "--pattern", "^(relu|lgamma)$", "--format", "csv"]) == 0
    text = capsys.readouterr().out
    assert "aten.relu.default,,yes" in text
    assert "aten.lgamma.default,,no" in text


def test_nn_sweep_passes_fixed_forms():
    """tools/nn_sweep.py on iree-cpu: forms it found wrong (nearest upsampling by a fractional
    scale, fixed by a decomposition; kthvalue beside a median, read from the NaN-aware sort since
    IREE cannot compile torch-mlir's ``tm_tensor.topk``; float64 ``gelu``, whose ``erf`` IREE 3.13
    lacked, lowering/erf64.py) pass, and so does uint32 arithmetic, which runs eagerly op by op
    (lazy_core.fallback.DEFAULT_UNSUPPORTED_DTYPES; it was a graph the IREE backends refused, an
    error here). A run in a child process: the sweep sets LAZY_STRICT and picks its backend."""
    forms = "interpolate_nearest_fractional,conv_groups_dilation,median_kthvalue,gelu_float64,uint32_product"
    run = subprocess.run([sys.executable, "-m", "lazy_mlir.tools.nn_sweep", "--backend", "iree-cpu",
                          "--only", forms], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "iree-cpu: 5 ok, 0 mismatches, 0 errors of 5 forms" in run.stdout, run.stdout


def test_e2e_conformance_summary_and_a_missing_suite():
    """tools/e2e_conformance.py needs torch-mlir's source tree (in no wheel), so CI checks its
    table arithmetic and that a wrong --suite-dir is a usage error, not a traceback."""
    from lazy_mlir.tools import e2e_conformance

    rows = [{"case": "a", "outcome": "pass"}, {"case": "b", "outcome": "pass_fallback"},
            {"case": "c", "outcome": "mismatch"}, {"case": "d", "outcome": "golden_error"},
            {"case": "e", "outcome": "crash"}]
    table = e2e_conformance.summarize({"reference": rows})
    assert "| reference | 4 | 2 (50.0%) | 1 (25.0%) | 1 | 0 | 1 | 0 |" in table, table
    run = subprocess.run([sys.executable, "-m", "lazy_mlir.tools.e2e_conformance", "--suite-dir", "/nonexistent"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "holds no torch_mlir_e2e_test folder" in run.stderr, run.stderr
