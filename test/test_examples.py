"""The examples run end to end, at smoke-test sizes, and agree with eager PyTorch.

Each example is started as its users start it (``python examples/x.py``) in
a subprocess; the examples train the same model from the same seed on the
CPU and compare, and exit non-zero on a mismatch. Sizes are small so the
file stays within a few minutes on two cores; the reference backend's LLVM
JIT runs at -O0 here because compile time, not run time, dominates at
these sizes.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest
from conftest import backend_unavailable_reason

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def run_example(script: str, args: list[str], tmp_path: os.PathLike, env: dict[str, str] | None = None,
                timeout: int = 600, json_out: bool = True,
                unset: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, dict]:
    out = os.path.join(tmp_path, "results.json")
    if json_out:
        args = [*args, "--json", out]
    full_env = dict(os.environ, LAZY_REFERENCE_OPT_LEVEL="0", **(env or {}))
    for name in unset:
        full_env.pop(name, None)
    full_env.pop("LAZY_BACKEND", None)
    full_env.pop("LAZY_HOST_EVAL", None)  # examples run as users run them (conftest turns it off)
    proc = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), *args],
        capture_output=True, text=True, cwd=ROOT, env=full_env, timeout=timeout,
    )
    results = {}
    if os.path.exists(out):
        with open(out) as f:
            results = json.load(f)
    return proc, results


def _explain(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"


def test_mnist_trains_like_eager_and_dumps_located_mlir(tmp_path: os.PathLike) -> None:
    dump = os.path.join(tmp_path, "mlir")
    proc, r = run_example(
        "mnist.py",
        ["--backend", "reference", "--steps", "6", "--epochs", "1", "--batch-size", "32",
         "--no-progress", "--dump-mlir", dump],
        tmp_path,
    )
    assert proc.returncode == 0, _explain(proc)
    assert r["match"], r
    assert r["steps"] == 6
    assert r["max_loss_diff"] <= 1e-3 and r["max_weight_diff"] <= 1e-3
    # Same predictions as eager up to float noise on a borderline image or two.
    assert abs(r["lazy_accuracy"] - r["eager_accuracy"]) <= 0.01, r
    # First step, momentum-carrying steady step, evaluation: three graphs, then cache hits
    # (the learning rate changes every step and must not recompile). Each graph is
    # compiled, or loaded from the disk cache where an earlier run compiled it.
    assert r["compiles"] + r["loaded"] == r["cache_misses"] == 3, r
    assert r["cache_hits"] >= 5, r
    assert r["fallbacks"] == 0, r
    assert "test accuracy:" in proc.stdout and "eager" in proc.stdout
    files = glob.glob(os.path.join(dump, "*.torch.mlir"))
    assert len(files) == 3
    step = max(files, key=os.path.getsize)
    text = open(step).read()
    assert "torch.aten.convolution" in text and "torch.aten.convolution_backward" in text
    assert 'loc("' in text and "mnist.py" in text  # locations point into the example


def test_mnist_with_a_users_defaults_interprets_the_graphs_it_sees_once(tmp_path: os.PathLike) -> None:
    """``make demo``'s settings (iree-cpu, not strict, tiering on): the first training step,
    the steady step's and the evaluation's first runs are interpreted; the steady step and
    the evaluation compile at their second sight (not the first step: it never recurs)."""
    proc, r = run_example("mnist.py", ["--steps", "4", "--epochs", "1", "--batch-size", "32", "--no-progress"],
                          tmp_path, unset=("LAZY_STRICT", "LAZY_TIERED"))
    assert proc.returncode == 0, _explain(proc)
    assert r["match"] and r["max_loss_diff"] <= 1e-3 and r["max_weight_diff"] <= 1e-3, r
    assert r["interpreted"] == 3, r
    assert r["compiles"] + r["loaded"] == 2 and r["cache_misses"] == 5, r
    assert r["fallbacks"] == 0, r
    assert "3 run once interpreted (compiled if seen again)" in proc.stdout, proc.stdout


@pytest.mark.parametrize(("model", "backend"), [("bert", "reference"), ("gpt2", "reference"), ("bert", "iree-cpu")])
def test_transformer_step_matches_eager(model: str, backend: str, tmp_path: os.PathLike) -> None:
    reason = backend_unavailable_reason(backend)
    if reason:
        pytest.skip(f"backend {backend} unavailable: {reason}")
    proc, r = run_example(
        "bert.py",
        ["--backend", backend, "--model", model, "--hidden", "32", "--layers", "1", "--heads", "2",
         "--vocab", "64", "--seq-len", "8", "--batch-size", "2", "--steps", "3"],
        tmp_path,
    )
    assert proc.returncode == 0, _explain(proc)
    assert r["match"] and r["max_loss_diff"] <= 1e-3, r
    # AdamW's first step creates its state: two graphs, then the cache.
    assert r["compiles"] + r["loaded"] == r["cache_misses"] == 2 and r["cache_hits"] == 1, r
    assert r["fallbacks"] == 0, r
    assert "func.func @lazy_graph_" in proc.stdout  # the step's MLIR summary


def test_custom_backend_trains_like_eager(tmp_path: os.PathLike) -> None:
    proc, _ = run_example("custom_backend.py", ["--steps", "3"], tmp_path, json_out=False)
    assert proc.returncode == 0, _explain(proc)
    assert "max |loss or weight diff| vs eager" in proc.stdout
    assert "compiles 2, cache hits 1, fallbacks 0" in proc.stdout


def test_ddp_example_matches_one_cpu_process(tmp_path: os.PathLike) -> None:
    """examples/ddp.py as users start it (2 ranks, gloo, its default backend): the parameters equal
    one CPU process trained on the whole batches, and the checkpoint rank 0 saved loads on the CPU."""
    proc, results = run_example("ddp.py", ["--steps", "8", "--save", os.path.join(tmp_path, "ckpt.pt")], tmp_path)
    assert proc.returncode == 0, _explain(proc)
    assert results["match"] and results["max_weight_diff"] <= 1e-4, results
    assert results["collectives_rank0"].get("collective::allreduce_", 0) >= 8, results


def test_the_runtime_line_says_when_a_compile_reused_the_backends_executable(capsys: pytest.CaptureFixture) -> None:
    """``make demo`` printed "3 compiles (0.0 s), 0 loaded from the disk cache" after a code change
    that left the MLIR alone: the graphs were lowered again and IREE's MLIR-keyed cache answered,
    so no compiler ran. The line says so."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "_common.py")
    spec = importlib.util.spec_from_file_location("examples_common", path)  # bench/ has a _common too
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    print_runtime = module.print_runtime
    summary = {"compiles": 3, "reused": 3, "compile_s": 0.01, "loaded": 0, "cache_hits": 22,
               "fallbacks": 0, "fallback_ops": {}, "interpreted": 0}
    print_runtime(summary)
    assert "3 compiles (0.0 s; 3 reused a compiled executable from the disk cache)" in capsys.readouterr().out
    print_runtime({**summary, "reused": 0, "compile_s": 8.2})
    assert "3 compiles (8.2 s), 0 loaded" in capsys.readouterr().out


def test_the_step_timer_lets_steps_overlap(eager_backend: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """``make demo``'s step time is the loop's own pace: the timer waits for the device after
    a step that compiled (or ran a graph once) and at the end of each window of steady steps,
    never after a steady step (waiting there serialized tracing and execution: 13.6 ms a step
    where the loop ran at 8-9)."""
    import importlib.util

    import torch

    import lazy_core

    # By path, under its own name: bench/ has a ``_common`` module too (test_bench_smoke imports it).
    spec = importlib.util.spec_from_file_location("examples_common", os.path.join(EXAMPLES, "_common.py"))
    assert spec is not None and spec.loader is not None
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    StepTimer = common.StepTimer  # noqa: N806 - the class, as the examples name it
    waits = []
    real_wait = lazy_core.wait_device_ops
    monkeypatch.setattr(lazy_core, "wait_device_ops", lambda: (waits.append(1), real_wait()))
    w = torch.randn(4, 4).to("lazy")
    timer = StepTimer(lazy=True)
    for _ in range(8):
        with timer:
            w = w * 0.5 + 1
            lazy_core.mark_step()
    compiling = len(timer.compiling)
    timer.window_done()
    # Each compiling step waited (the first did, compiling or not), then the window's end once.
    assert compiling >= 1 and len(waits) <= compiling + 2 and len(waits) < 6, (waits, compiling)
    assert timer.steady_ms() > 0 and timer._steady_n >= 8 - compiling - 1
