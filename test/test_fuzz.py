"""A fixed-budget run of the differential fuzzer (tools/fuzz) on every test backend.

Random ATen programs (constants that collide in Python, twin programs for
the caches, views and in-place ops, casts, NaN, errors) must equal eager
PyTorch on the CPU in values, dtypes, shapes, NaN positions, signs of zeros
and raised errors. ``make fuzz`` runs a larger budget.

Categories whose bugs are being fixed elsewhere are listed in ``PENDING``
with the owner and the reason: the default run leaves them out, and
``test_pending_category_still_fails`` runs each alone and is a strict xfail,
so the day its fix lands the XPASS fails the suite and the entry must be
deleted here (the category then joins the default run). Nothing is left out
silently.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, backend_unavailable_reason, requested_backends

#: category -> (backends it fails on, None = all; why / who fixes it). Delete an entry once fixed.
PENDING: dict[str, tuple[tuple[str, ...] | None, str]] = {
    "special": (("reference",), "issue 14: the reference backend aborts the process on the reciprocal "
                                "of a NaN splat (test_fuzz_regressions.py::test_reciprocal_of_a_nan_splat_"
                                "does_not_abort); NaN/inf constants are left out there"),
}

#: Programs per backend in the default run (twins included): about 60 s in all on a 2-core machine.
BUDGET = {"eager": 160, "reference": 48, "iree-cpu": 32, "iree-vulkan": 32}


def run_fuzzer(backend: str, programs: int, seed: int, tmp_path, extra: list[str]) -> subprocess.CompletedProcess:
    """The fuzzer in a child process: a crash (a finding, issue 14) fails this test, not the suite."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    # Compile failures fall back to eager and are compared like any result; coverage is not
    # this test's subject (test_opinfo and strict mode are).
    env.pop("LAZY_STRICT", None)
    env.pop("LAZY_HOST_EVAL", None)  # the seed decides (tools/fuzz/driver.py Config.host_eval)
    cmd = [sys.executable, "-m", "lazy_mlir.tools.fuzz", "--in-process", "--backends", backend, "--seeds", f"{seed},",
           "--programs", str(programs), "--max-failures", "1", "--repro-dir", str(tmp_path),
           "--group-timeout", "300", "--no-shrink", *extra]  # shrink with `make fuzz`: it compiles a lot
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def _pending_on(backend: str) -> list[str]:
    return [c for c, (backends, _) in PENDING.items() if backends is None or backend in backends]


#: Backends whose fixed-budget run is kept out of ``make check`` (``slow``; ``make fuzz`` runs them),
#: with why. Delete an entry once its run passes within the budget.
NOT_IN_CHECK = {
    "iree-vulkan": "lavapipe folds inf * a literal zero to 0 (seed 0 program 1': sub(z, z, alpha=-inf) of "
                   "constant zeros is 0, eager NaN), the Mesa issue of test_lavapipe_multiply_by_a_literal_zero",
}


def _fuzz_params() -> list:
    return [pytest.param(b, id=b, marks=pytest.mark.slow) if b in NOT_IN_CHECK else pytest.param(b, id=b)
            for b in requested_backends()]


@pytest.mark.parametrize("backend_name", _fuzz_params())
def test_fuzz_matches_eager(backend_name: str, tmp_path) -> None:
    reason = backend_unavailable_reason(backend_name)
    if reason:
        pytest.skip(f"backend {backend_name} unavailable: {reason}")
    skip = _pending_on(backend_name)
    proc = run_fuzzer(backend_name, BUDGET.get(backend_name, 32), 0, tmp_path, ["--skip", ",".join(skip)] * bool(skip))
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout[-12000:]}\n{proc.stderr[-3000:]}"
    assert " programs/s)" in proc.stdout, proc.stdout


def _pending_cases() -> list:
    """Categories pending on every backend are proven on eager (fast and deterministic); those
    pending on compiled backends only are proven by their named tests in test_fuzz_regressions.py."""
    return [pytest.param(category, "eager", id=category, marks=pytest.mark.xfail(strict=True, reason=why))
            for category, (backends, why) in PENDING.items() if backends is None]


@pytest.mark.parametrize(("category", "backend_name"), _pending_cases())
def test_pending_category_still_fails(category: str, backend_name: str, tmp_path) -> None:
    """The fuzzer still finds each pending bug (so it works); XPASS = fixed: delete it from PENDING."""
    reason = backend_unavailable_reason(backend_name)
    if reason:
        pytest.skip(f"backend {backend_name} unavailable: {reason}")
    others = [c for c in _pending_on(backend_name) if c != category]
    proc = run_fuzzer(backend_name, 300, 0, tmp_path, ["--skip", ",".join(others)] * bool(others))
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout[-6000:]}"


def test_opposite_zeros_make_a_maximum_undefined_and_its_twin_is_dropped() -> None:
    """Eager's ``maximum(0.0, -0.0)`` depends on the element's position (vectorized loop vs.
    scalar tail), so the fuzzer reported sign-of-zero "mismatches" no backend could fix (seed 21
    program 254', seed 22 program 208). Such lines are not generated, and a twin whose swapped
    constant (0 -> -0.0) creates the tie is dropped."""
    import random

    import torch

    from tools.fuzz.driver import twin
    from tools.fuzz.program import Line, Program, has_undefined_tie, opposite_zeros

    assert opposite_zeros(torch.zeros(3), torch.full((3,), -0.0))
    assert opposite_zeros(torch.tensor([0.0, -0.0]))  # a max/min reduction over both signs
    assert not opposite_zeros(torch.zeros(3), torch.zeros(1))
    assert not opposite_zeros(torch.tensor([-0.0, 1.0]))
    assert not opposite_zeros(torch.zeros(2, dtype=torch.bool), torch.ones(2))
    lines = [Line("v0 = torch.zeros(3, device=DEV)", (), ("v0",)),
             Line("v1 = torch.full((3,), {0}, device=DEV)", (0.0,), ("v1",)),
             Line("v2 = torch.maximum(v0, v1)", (), ("v2",), "minmax", ("v0", "v1"))]
    program = Program(lines, "p")
    assert not has_undefined_tie(program)
    tied = Program([*lines[:1], lines[1].with_consts((-0.0,)), lines[2]], "p'")
    assert has_undefined_tie(tied)
    for seed in range(20):  # the twin swaps 0.0 for a partner; one that is -0.0 is dropped
        t = twin(program, random.Random(seed))
        assert t is None or not has_undefined_tie(t)


def test_zeros_of_a_matrix_product_are_compared_without_their_sign() -> None:
    """Eager's GEMM gives -0.0 for a sum of negative-zero products when K is 1, +0.0 at 1x1 or in
    bfloat16 (fuzz seed 1100 p675: ``F.linear(x[..., None], w)``): PyTorch leaves it to the BLAS.
    Variables computed from a product (directly, or through later lines) skip that one check;
    every other variable, and the product's values and NaNs, are still compared."""
    import torch

    from tools.fuzz.check import Trace, compare_env
    from tools.fuzz.program import Line, Program

    program = Program([Line("v0 = torch.full((2, 1), -0.0, device=DEV)", (), ("v0",)),
                       Line("v1 = F.linear(v0, torch.full((3, 1), 0.5, device=DEV))", (), ("v1",), "linear"),
                       Line("v2 = v1 * 2", (), ("v2",), "binary"),
                       Line("v3 = v0 * 2", (), ("v3",), "binary")], "p")
    assert program.zero_sign_unspecified() == {"v1", "v2"}
    cpu = Trace(env={"v0": torch.full((2, 1), -0.0), "v1": torch.full((2, 3), -0.0),
                     "v2": torch.full((2, 3), -0.0), "v3": torch.full((2, 1), -0.0)})
    lazy = Trace(env={**cpu.env, "v1": torch.zeros(2, 3), "v2": torch.zeros(2, 3)})
    assert compare_env(cpu, lazy, program) is None
    assert "signs of zeros" in compare_env(cpu, lazy)  # without the program: every sign compared
    lazy.env["v3"] = torch.zeros(2, 1)
    assert "v3: signs of zeros" in compare_env(cpu, lazy, program)
    lazy.env["v3"], lazy.env["v1"] = cpu.env["v3"], torch.full((2, 3), float("nan"))
    assert "v1: NaN positions" in compare_env(cpu, lazy, program)


def test_a_float64_value_of_float32_ones_is_compared_at_float32_tolerance() -> None:
    """Fuzz seed 1204 p1695: ``torch.add(x64, v1.erf(), alpha=-2)`` with a float32 ``erf`` one ulp
    off was 1.2e-7 off at 0.0094, past float64's tolerance though every value was right to
    float32's. A float64 variable computed (directly or not) from a narrower float gets float32's
    tolerance; one computed from float64 values alone keeps float64's."""
    import torch

    from tools.fuzz.check import Trace, compare_env
    from tools.fuzz.program import Line, Program

    program = Program([Line("v0 = torch.tensor([1.0], dtype=torch.float64, device=DEV)", (), ("v0",)),
                       Line("v1 = torch.tensor([2.0], device=DEV)", (), ("v1",)),
                       Line("v2 = v0 - v1 * 0.99", (), ("v2",), "binary"),
                       Line("v3 = v2 * 2", (), ("v3",), "binary"),
                       Line("v4 = v0 * 0.0094", (), ("v4",), "binary")], "p")
    cpu = Trace(env={"v0": torch.tensor([1.0], dtype=torch.float64), "v1": torch.tensor([2.0]),
                     "v2": torch.tensor([0.0094], dtype=torch.float64), "v3": torch.tensor([0.0188], dtype=torch.float64),
                     "v4": torch.tensor([0.0094], dtype=torch.float64)})
    off = torch.tensor([1.2e-7], dtype=torch.float64)
    lazy = Trace(env={**cpu.env, "v2": cpu.env["v2"] + off, "v3": cpu.env["v3"] + 2 * off})
    assert compare_env(cpu, lazy, program) is None
    assert "v2: values differ" in compare_env(cpu, lazy)  # without the program: float64's tolerance
    lazy.env["v4"] = cpu.env["v4"] + off
    assert "v4: values differ" in compare_env(cpu, lazy, program)


def test_a_batch_that_failed_to_compile_is_run_program_by_program(monkeypatch) -> None:
    """Programs run in batches, one graph per batch. A graph one program's op could not compile
    ran eagerly whole, so no other program in the batch was compared with compiled code: 200
    ``convolution_backward`` programs whose weight gradient was deliberately broken on iree-cpu
    gave 0 mismatches (one configuration torch-mlir cannot lower in every batch). Such a batch
    is run again program by program. Here a backend whose compiled code negates every result
    and which cannot compile ``atan2``: batched with an ``atan2`` program, the other is caught."""
    import torch

    import lazy_core
    from lazy_core.backend import CompileError
    from lazy_core.eager_backend import EagerBackend
    from tools.fuzz.driver import run_group
    from tools.fuzz.program import Line, Program

    class NegatingBackend(EagerBackend):
        name = "negating"

        def compile(self, computations):
            for graph in computations:
                if any(getattr(n, "op", None) is torch.ops.aten.atan2.default for n in graph.nodes):
                    raise CompileError("no atan2 here")
            return list(computations)

        def execute_computation(self, executable, arguments, device):
            return [type(r)(-r.handle, r.shape, r.dtype, r.device)
                    for r in super().execute_computation(executable, arguments, device)]

    uncompilable = Program([Line("v0 = torch.ones(3, device=DEV)", (), ("v0",)),
                            Line("v1 = torch.atan2(v0, v0 + 1)", (), ("v1",), "binary")], "a")
    wrong = Program([Line("v0 = torch.ones(3, device=DEV)", (), ("v0",)),
                     Line("v1 = v0 * 3", (), ("v1",), "binary")], "b")
    monkeypatch.delenv("LAZY_STRICT", raising=False)  # as the fuzzer runs: a failed compile runs eagerly
    previous = lazy_core.active_backend()
    lazy_core.init(NegatingBackend())
    try:
        with pytest.warns(RuntimeWarning, match="could not compile"):
            diff, program = run_group([uncompilable, wrong], batch=True)
        assert program is wrong and "values differ" in diff, (diff, program)
        diff, program = run_group([uncompilable], batch=True)  # warned once above
        assert diff is None  # the eager rerun of the failed graph is right
    finally:
        lazy_core.init(previous)


def test_a_mismatch_says_when_code_compiled_for_another_size_ran() -> None:
    """Fuzz seed 1502 p601 (iree-cpu) failed only inside its run. One way that happens: an earlier
    program of the same structure at other sizes made a dynamic-shape plan (kept in the run's
    disk cache) and a later one ran it; its code can differ from the static graph's (on
    iree-vulkan a [?, ?] ``renorm(p=inf)`` lost a NaN that the static graph kept). The driver
    counts such runs around each group and says so in the mismatch
    (tools/fuzz/driver.py ``_shared_code_count``)."""
    import torch
    from conftest import use_backend

    import lazy_core
    from tools.fuzz.driver import _shared_code_count

    use_backend("reference")
    before = _shared_code_count()
    for rows in (2, 3, 4):
        torch.softmax(torch.randn(rows, 5).to("lazy"), -1).cpu()
    assert _shared_code_count() >= before + 2, lazy_core.metrics.counters()


_FUSED_ALPHA = """
import torch
r = torch.sub(torch.tensor(0.0), torch.tensor(1e-40), alpha=1e-6)
assert not r.signbit(), "the vectorized kernel fuses the multiply-add: -0.0"
"""


def test_a_value_eager_returns_on_other_cpu_kernels_is_not_a_mismatch() -> None:
    """Fuzz seed 4004 (iree-vulkan, then every backend): ``torch.sub(0.0, 1e-40, alpha=1e-6)``
    is -0.0 in eager on AVX2/AVX-512 (a fused multiply-add) and +0.0 on ATen's baseline kernels,
    as on every lazy backend. The driver re-runs a mismatch's repro with
    ``ATEN_CPU_CAPABILITY=default`` and reports a pass there as eager's own variance
    (tools/fuzz/variance.py); a mismatch that stays is still one."""
    import torch

    from tools.fuzz.variance import eager_capability_variance

    if torch.backends.cpu.get_cpu_capability() == "DEFAULT":
        pytest.skip("this CPU runs ATen's baseline kernels: nothing to tell apart")
    assert eager_capability_variance(_FUSED_ALPHA)
    assert not eager_capability_variance("raise SystemExit(1)")  # fails on every kernel
    assert not eager_capability_variance("pass")  # passes as run: no mismatch to explain


def test_a_bool_of_a_float_known_only_to_tolerance_is_not_a_mismatch() -> None:
    """Fuzz seed 4301 program 291 (reference): ``v2 = v1.bool()`` with ``v1 = x.std(0)`` of a
    constant column: eager's two-pass variance left 1.3e-7, lazy an exact 0.0, which agree at
    float32's tolerance; the bool of each is True and False. A discrete value of a float that
    lazy matches only within tolerance is not compared (tools/fuzz/check.py); with the float
    bit for bit equal, the same bool difference is still a mismatch."""
    import torch

    from tools.fuzz.check import Trace, compare_env
    from tools.fuzz.program import Line, Program

    program = Program([Line("v1 = x.std(0)", (), ("v1",), "reduce"), Line("v2 = v1.bool()", (), ("v2",), "cast")])
    eager = Trace(env={"v1": torch.tensor([1.3e-7, 2.0]), "v2": torch.tensor([True, True])})
    lazy = Trace(env={"v1": torch.tensor([0.0, 2.0]), "v2": torch.tensor([False, True])})
    assert compare_env(eager, lazy, program) is None
    exact = Trace(env={"v1": torch.tensor([1.3e-7, 2.0]), "v2": torch.tensor([False, True])})
    assert "v2: values differ" in compare_env(eager, exact, program)
    far = Trace(env={"v1": torch.tensor([0.0, 2.5]), "v2": torch.tensor([False, True])})
    assert "v1: values differ" in compare_env(eager, far, program)


#: Stateful programs per backend in the default run (tools/fuzz/stateful.py: 2-5 steps each, state
#: updated in place, mark_step()s between steps): under 60 s per backend on a 2-core machine.
STATEFUL_BUDGET = {"eager": 100, "reference": 30, "iree-cpu": 12, "iree-vulkan": 10}
#: A seed whose first programs pass everywhere (the findings of others are in test_fuzz_regressions.py).
STATEFUL_SEED = 7


@pytest.mark.parametrize("backend_name", [pytest.param(b, id=b) for b in requested_backends()])
def test_stateful_fuzz_matches_eager(backend_name: str, tmp_path) -> None:
    """Multi-step programs whose state (parameters, moments, counters, masks) is updated in place
    over several steps, on fresh inputs each step, equal eager PyTorch after every compared step:
    where buffer donation acts (a reused graph writes a state's new value into its old buffer)."""
    reason = backend_unavailable_reason(backend_name)
    if reason:
        pytest.skip(f"backend {backend_name} unavailable: {reason}")
    skip = _pending_on(backend_name)
    proc = run_fuzzer(backend_name, STATEFUL_BUDGET.get(backend_name, 8), STATEFUL_SEED, tmp_path,
                      ["--stateful", *["--skip", ",".join(skip)] * bool(skip)])
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout[-12000:]}\n{proc.stderr[-3000:]}"
    assert " stateful programs, " in proc.stdout and " 0 mismatches" in proc.stdout, proc.stdout


def _stateful_program(seed: int = STATEFUL_SEED, index: int = 0):
    from tools.fuzz import CATEGORIES
    from tools.fuzz.stateful import generate_stateful, program_rng

    return generate_stateful(program_rng(seed, index), set(CATEGORIES), f"seed {seed} stateful program {index}")


def test_stateful_checker_reports_a_different_eager_state() -> None:
    """The stateful checker is not vacuous: against an eager reference whose first parameter got one
    more update per step, or whose final state was perturbed, it reports the variable that differs."""
    import dataclasses

    from conftest import use_backend

    from tools.fuzz.program import Line
    from tools.fuzz.stateful import check_lazy, run_eager

    use_backend("eager")
    program = _stateful_program()
    expected = run_eager(program)
    assert expected.problem is None and check_lazy(program, expected) is None
    param = program.state_names()[0]  # a float32 parameter
    extra = Line(f"{param}.add_(1.0)", (), (param,), "state_update")
    other = run_eager(dataclasses.replace(program, body=[*program.body, extra]))
    diff = check_lazy(program, other)
    assert diff is not None and diff.startswith("after step ") and "values differ" in diff, diff
    final = expected.points[program.steps - 1]
    final[param] = final[param] + 0.5
    diff = check_lazy(program, expected)
    assert diff is not None and f"after step {program.steps - 1} of {program.steps}" in diff, diff
    assert f"{param}: values differ" in diff or "values differ" in diff, diff


def test_stateful_repro_is_a_standalone_script(tmp_path) -> None:
    """A stateful program prints as a script that runs eager and lazy itself and compares them."""
    from tools.fuzz.stateful import render_repro

    path = tmp_path / "repro.py"
    path.write_text(render_repro("eager", _stateful_program(), "a message"))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok: lazy equals eager" in proc.stdout, proc.stdout + proc.stderr


def test_stateful_programs_are_deterministic_and_shrink(tmp_path) -> None:
    """A program depends on its seed and index only, survives the crash case's JSON, and the
    reducer keeps the failing line and what it needs, dropping the rest (no backend: a pure
    predicate stands for the mismatch)."""
    from tools.fuzz.stateful import _key, dump_case, load_case, reduce_stateful, run_eager

    program = _stateful_program(11, 3)
    assert _key(program) == _key(_stateful_program(11, 3))
    dump_case(str(tmp_path / "case.json"), "eager", program, {"binary"})
    backend, loaded, categories = load_case(str(tmp_path / "case.json"))
    assert (backend, categories, _key(loaded)) == ("eager", {"binary"}, _key(program))
    target = next(ln for ln in reversed(program.body) if ln.category == "state_update")

    def fails(p) -> str | None:
        return "still" if target in p.body and p.steps >= 2 and run_eager(p).problem is None else None

    small, message = reduce_stateful(program, "first", fails, max_runs=400)
    assert message == "still" and target in small.body and small.steps == 2
    assert len(small.body) < len(program.body)
    used = set().union(*(ln.uses() for ln in small.state + small.body))
    assert set(small.state_names()) | {i.name for i in small.inputs} <= used, small


def test_a_long_run_says_how_far_it_got() -> None:
    """The summary comes at the end of a seed: a run stopped by a timeout said nothing about the
    hundreds of programs it had checked. ``Progress`` logs programs, mismatches and rate as it
    goes (every minute; here at every group)."""
    from tools.fuzz.driver import Config, Progress, Report

    lines: list[str] = []
    progress = Progress(Config(backend="eager", seed=3, programs=40), Report("eager", 3), lines.append, every=0.0)
    for n in (8, 16):
        progress(n)
    assert len(lines) == 2 and lines[-1].startswith("[fuzz] eager seed 3: 16/40 programs, 0 mismatches"), lines
    quiet = Progress(Config(), Report("eager", 0), lines.append)  # the default: once a minute
    quiet(8)
    assert len(lines) == 2


def test_fuzz_under_a_bfloat16_default_dtype(tmp_path) -> None:
    """``--default-dtype bfloat16`` runs every program under ``torch.set_default_dtype``, in the
    child processes too (the run that found 2026-12-07's half-precision bugs: integer operands
    promote to the default dtype); a repro sets it after its imports."""
    if backend_unavailable_reason("reference"):
        pytest.skip(f"backend reference unavailable: {backend_unavailable_reason('reference')}")
    proc = run_fuzzer("reference", 24, 4516, tmp_path, ["--default-dtype", "bfloat16"])
    assert proc.returncode == 0, f"exit status {proc.returncode}\n{proc.stdout[-12000:]}\n{proc.stderr[-3000:]}"
    assert "default dtype torch.bfloat16" in proc.stdout, proc.stdout
    from tools.fuzz import under_default_dtype

    os.environ["FUZZ_DEFAULT_DTYPE"] = "float16"
    try:
        script = under_default_dtype("import torch\nimport lazy_core  # noqa: E402\n\nx = 1\n")
    finally:
        del os.environ["FUZZ_DEFAULT_DTYPE"]
    assert script == "import torch\nimport lazy_core  # noqa: E402\ntorch.set_default_dtype(torch.float16)\n\nx = 1\n"


def test_a_loader_exit_counts_as_a_crash() -> None:
    """Compiled code calling a symbol the dynamic loader cannot resolve ends the process with
    exit status 127 ("symbol lookup error": IREE's CPU code and compiler-rt's ``__truncsfbf2``,
    fuzz seed 4521 under a bf16 default dtype); the fuzzer reported nothing and stopped. It is a
    crash to shrink, like a signal; a failed run's status 1 is not."""
    from tools.fuzz.crash import died

    assert died(127) and died(-11) and died(134)
    assert not died(0) and not died(1)
