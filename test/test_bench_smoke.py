"""The benchmark scripts run end to end (tiny sizes) and report what they promise.

No timing is asserted anywhere: these only prove that ``make bench`` works and
that its results carry the numbers (and the correctness facts: losses agree
with eager, no recompiles after warm-up) that the performance work relies on.
Each system runs in its own subprocess, as the scripts do for real runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp_path: Path, script: str, *args: str) -> dict:
    env = dict(os.environ, LAZY_BENCH_RESULTS=str(tmp_path), LAZY_BENCH_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"stdout": proc.stdout, "files": sorted(p.name for p in tmp_path.iterdir())}


def test_trace_overhead_quick(tmp_path: Path) -> None:
    out = _run(tmp_path, "trace_overhead.py", "--quick", "--systems", "lazy-mlir")
    data = json.loads((tmp_path / "trace_overhead.json").read_text())
    for label in ("lazy-mlir",):
        result = data["systems"][label]
        assert "error" not in result, result
        for wl in ("elementwise", "mixed"):
            assert result["workloads"][wl]["trace"]["cpu_median"] > 0
            assert result["workloads"][wl]["mark_step"]["cpu_median"] > 0
    # Every user op is one recorded ATen node on these chains.
    assert data["systems"]["lazy-mlir"]["workloads"]["elementwise"]["aten_nodes_per_user_op"] == pytest.approx(1.0)
    assert "trace_overhead.png" in out["files"]
    assert "| lazy-mlir" in out["stdout"]


def test_train_step_quick_mlp(tmp_path: Path) -> None:
    _run(tmp_path, "train_step.py", "--quick", "--model", "mlp", "--systems", "eager,lazy-mlir/reference")
    data = json.loads((tmp_path / "train_step_mlp.json").read_text())
    lazy = data["models"]["mlp"]["lazy-mlir/reference"]
    assert "error" not in lazy, lazy
    assert lazy["losses_agree_with_eager"], (lazy["losses"], data["models"]["mlp"]["eager"]["losses"])
    assert lazy["compiles_steady"] == 0
    assert lazy["ms_per_step"] > 0
    # Eager's perturbed twin: as many losses, and for this non-chaotic MLP it stays close.
    eager = data["models"]["mlp"]["eager"]
    assert len(eager["losses_perturbed"]) == len(eager["losses"])
    assert lazy["eager_self_divergence_max"] < 1e-4, lazy["eager_self_divergence_max"]


def test_losses_agree_within_eagers_own_sensitivity() -> None:
    """A chaotic model's losses drift from eager's by rounding alone (the zoo's ResNet-18: eager
    float32 and float64 differ by 0.017 at step 5): a loss agrees within ``SENSITIVITY`` times
    eager's divergence from its perturbed twin at that step, and not beyond it."""
    import importlib

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        # bench's ``_common``, not another module of that name (examples/ has one too).
        if getattr(sys.modules.get("_common"), "__file__", None) != str(ROOT / "bench" / "_common.py"):
            sys.modules.pop("_common", None)
        train_step = importlib.import_module("train_step")
    finally:
        sys.path.remove(str(ROOT / "bench"))
    eager = {"losses": [2.0, 1.5, 1.0], "losses_perturbed": [2.0, 1.5, 1.01]}
    drifted = {"losses": [2.0, 1.5, 1.05]}  # 0.05 off where eager itself moved 0.01
    beyond = {"losses": [2.0, 1.5, 1.2]}  # 0.2 off: more than 10 x 0.01
    results = {"eager": eager, "a": drifted, "b": beyond, "c": {"losses": [2.0, 1.55, 1.0]}}
    train_step._compare_losses(results)
    assert drifted["losses_agree_with_eager"] and drifted["eager_self_divergence_max"] == pytest.approx(0.01)
    assert not beyond["losses_agree_with_eager"]
    assert not results["c"]["losses_agree_with_eager"]  # where eager did not move, the fixed tolerance


def test_compile_cache_quick(tmp_path: Path) -> None:
    _run(tmp_path, "compile_cache.py", "--quick", "--model", "mlp", "--backends", "reference")
    data = json.loads((tmp_path / "compile_cache.json").read_text())
    entry = data["models"]["mlp"]["lazy-mlir/reference"]
    assert set(entry) == {"cold", "warm"}
    assert entry["cold"]["compile_attempts"] >= 1
