"""The IREE backends (iree-cpu, iree-vulkan) against eager PyTorch on the CPU.

Kept small: every distinct graph costs an iree-compile (about a second), so
each test builds few graphs. Backend-generic behaviour (semantics, training,
OpInfo) is covered by the suites that use the ``backend`` fixture, which
include both IREE backends.
"""

from __future__ import annotations

import os
import warnings

import iree.runtime as rt
import pytest
import torch
import torch.nn.functional as F
from conftest import use_backend

import lazy_core
from lazy_core import metrics
from lazy_mlir.backends.disk_cache import DiskCache
from lazy_mlir.backends.iree import IreeBackend, transfer
from lazy_mlir.backends.iree import backend as iree_backend
from lazy_mlir.backends.iree.config import CPU, make_config, merge_flags, resolve_device

IREE_BACKENDS = ["iree-cpu", "iree-vulkan"]


@pytest.fixture(params=IREE_BACKENDS)
def iree(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> IreeBackend:
    """Each IREE backend; compile errors raise instead of falling back to eager."""
    monkeypatch.setenv("LAZY_STRICT", "1")
    backend = use_backend(request.param)
    yield backend
    lazy_core.mark_step()
    lazy_core.wait_device_ops()


def _data(t: torch.Tensor) -> lazy_core.BackendData:
    """The device data a materialized lazy tensor holds (waiting for a queued step)."""
    from lazy_core.async_exec import resolve

    return resolve(t._lz_value().node.data)


def _here() -> int:
    import inspect

    return inspect.currentframe().f_back.f_lineno  # type: ignore[union-attr]


# -- dtypes ------------------------------------------------------------------------------------


def test_dtypes_compute_like_torch(iree: IreeBackend) -> None:
    """One graph over every supported dtype, 0-d tensors included, each result exact or close."""
    g = torch.Generator().manual_seed(3)
    f = torch.randn(5, 6, generator=g, dtype=torch.float64)
    i = torch.randint(-50, 50, (5, 6), generator=g)
    host = {
        "f32": f.float(), "f64": f, "f16": f.half(), "bf16": f.bfloat16(),
        "i64": i, "i32": i.int(), "i8": i.to(torch.int8), "bool": i > 0,
        "zero_d": torch.tensor(2.5, dtype=torch.float32),
    }

    def program(t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            "f32": (t["f32"] * t["f32"]).sum(1) + t["zero_d"],
            # Real f64 (f32 would be 1e-8 off). Arithmetic only: SPIR-V's GLSL
            # transcendentals (exp, log ...) exist for 16/32-bit floats alone.
            "f64": (t["f64"] * t["f64"] + 1e-9) / 3.0,
            "f16": t["f16"] + t["f16"].flip(0),
            "bf16": t["bf16"] + t["bf16"],
            "i64": t["i64"] * t["i64"] - 7,
            "i32": (t["i32"] + t["i32"]).sum(0),
            "i8": t["i8"] + t["i8"].flip(1),
            "bool": t["bool"] & ~t["bool"].flip(0),
            "cmp": t["f32"] > 0.1,
            "zero_d": t["zero_d"] * t["f32"].max(),
        }

    expect = program(host)
    got = program({k: v.to("lazy") for k, v in host.items()})
    lazy_core.mark_step()
    assert metrics.counter("cache_miss") == 1  # one graph (compiled, or loaded from the disk cache)
    for name, ref in expect.items():
        out = got[name].cpu()
        assert out.dtype == ref.dtype and out.shape == ref.shape, name
        if name == "f64":
            torch.testing.assert_close(out, ref, rtol=1e-13, atol=0)
        elif ref.dtype in (torch.float16, torch.bfloat16):
            torch.testing.assert_close(out.float(), ref.float(), rtol=1e-2, atol=1e-2)
        else:
            torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)


def test_integer_powers_of_negative_numbers(iree: IreeBackend) -> None:
    """x ** 2 of a negative x: exponents stay constants, so no exp(y*log(x)) NaN."""
    x = torch.tensor([-2.0, -0.5, 0.0, 1.5, 3.0])
    lx = x.to("lazy")
    nz = torch.tensor([-2.0, -0.5, 1.5])
    pairs = [(lx**2, x**2), (lx**3, x**3), (lx.pow(2.0), x.pow(2.0)), (nz.to("lazy") ** -1, nz**-1)]
    lazy_core.mark_step()  # one graph for all four
    for got, ref in pairs:
        torch.testing.assert_close(got.cpu(), ref)


def test_round_trip_is_exact(iree: IreeBackend) -> None:
    """Upload then download without compiling anything: bytes come back unchanged."""
    tensors = [
        torch.randn(3, 7, dtype=torch.float64), torch.randn(4).bfloat16(), torch.randn(2, 2).half(),
        torch.arange(-5, 5, dtype=torch.int8), torch.tensor(True), torch.tensor(7, dtype=torch.int64),
        torch.randn(2, 3).t(),  # non-contiguous source
        torch.randn(3, dtype=torch.complex64), torch.tensor(200, dtype=torch.uint8),
        torch.empty(0, 3),
    ]
    for t in tensors:
        back = t.to("lazy").cpu()
        assert back.dtype == t.dtype and torch.equal(back, t), t.dtype
    assert metrics.counter("cache_miss") == 0


# -- inputs are never written ----------------------------------------------------------------


def test_inputs_are_never_written(iree: IreeBackend) -> None:
    """IREE bufferizes some ops in place into argument buffers (iree-org/iree#16168):
    those arguments get private copies, so inputs and their other users stay intact."""
    g = torch.Generator().manual_seed(5)
    host = {k: torch.randn(4, 5, generator=g) for k in "abcdef"}
    idx, row = torch.tensor([[0, 1, 2, 0, 1]]), torch.tensor([0, 2])

    def program(t: dict[str, torch.Tensor], dev: str) -> list[torch.Tensor]:
        return [
            t["a"].scatter(0, idx.to(dev), torch.ones(1, 5, device=dev)),
            t["b"].index_put((row.to(dev),), torch.zeros(5, device=dev)),
            t["c"].sort(1).values,
            # Along the other dim: two sorts of one shape and dim are refused (miscompiles.py).
            t["d"].topk(2, 0).values,
            t["e"].slice_scatter(torch.zeros(2, 5, device=dev), 0, 0, 2),
            t["f"].view(20).scatter_add(0, idx.view(5).to(dev), torch.ones(5, device=dev)),
            t["a"] + t["b"],  # reads two of the protected inputs again
        ]

    expect = program(host, "cpu")
    lazy = {k: v.to("lazy") for k, v in host.items()}
    got = program(lazy, "lazy")
    lazy_core.mark_step()
    assert metrics.counter("iree_protected_graphs") == 1
    for out, ref in zip(got, expect):
        torch.testing.assert_close(out.cpu(), ref)
    for k, v in lazy.items():
        assert torch.equal(v.cpu(), host[k]), f"input {k} was written"


def test_written_arguments_follow_views_but_not_reads() -> None:
    from lazy_mlir.backends.iree.aliasing import written_arguments

    mlir = """
    func.func @f(%arg0: !torch.vtensor<[4,5],f32>, %arg1: !torch.vtensor<[1],si64>, %arg2: !torch.vtensor<[5],f32>) -> (!torch.vtensor<[20],f32>) {
      %int0 = torch.constant.int 0
      %1 = torch.prim.ListConstruct %int0 : (!torch.int) -> !torch.list<int>
      %2 = torch.aten.view %arg0, %1 : !torch.vtensor<[4,5],f32>, !torch.list<int> -> !torch.vtensor<[20],f32>
      %3 = torch.aten.scatter.src %2, %int0, %arg1, %arg2 : !torch.vtensor<[20],f32>, !torch.int, !torch.vtensor<[1],si64>, !torch.vtensor<[5],f32> -> !torch.vtensor<[20],f32>
      %values, %indices = torch.aten.sort %arg2, %int0, %false : !torch.vtensor<[5],f32>, !torch.int, !torch.bool -> !torch.vtensor<[5],f32>, !torch.vtensor<[5],si64>
      %4 = torch.aten.add.Tensor %3, %values, %int0 : !torch.vtensor<[20],f32>, !torch.vtensor<[5],f32>, !torch.int -> !torch.vtensor<[20],f32>
      return %4 : !torch.vtensor<[20],f32>
    }
    """
    assert written_arguments(mlir) == {0, 2}  # arg1 (indices) is only read
    assert written_arguments(mlir.replace("scatter.src", "add.Tensor").replace("aten.sort", "aten.max.dim")) == set()


# -- device residency --------------------------------------------------------------------------


def test_step_results_stay_on_device(iree: IreeBackend) -> None:
    """Weights are uploaded once; each step reads the previous step's device buffers."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    ref.load_state_dict(model.state_dict())
    model = model.to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    batches = [(torch.randn(4, 8), torch.randn(4, 2)) for _ in range(4)]
    metrics.reset()
    for x, y in batches:
        loss = ((model(x.to("lazy")) - y.to("lazy")) ** 2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        lazy_core.mark_step()
        ref_loss = ((ref(x) - y) ** 2).mean()
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
    lazy_core.wait_device_ops()
    # Only the batches went up, nothing came down, and the weights are IREE buffers.
    assert metrics.counter("transfer_to_host_bytes") == 0
    assert metrics.counter("transfer_to_device_bytes") == sum(x.nbytes + y.nbytes for x, y in batches)
    assert metrics.counter("cache_hit") >= 2
    assert metrics.counter("iree_protected_graphs") == 0  # a training step copies no argument
    for p in model.parameters():
        assert isinstance(_data(p).handle, rt.HalBufferView)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_vulkan_reads_back_through_a_staging_buffer() -> None:
    """Vulkan results are not host-mappable; download copies them via a staging buffer."""
    backend = use_backend("iree-vulkan")
    x = torch.randn(33, 17)
    y = (x.to("lazy") * 2).tanh()
    lazy_core.mark_step()
    view = _data(y).handle
    assert not transfer._mappable(view.get_buffer())
    torch.testing.assert_close(backend.to_host(_data(y)), (x * 2).tanh())
    # The runtime's own path trips over lavapipe's host-pointer alignment.
    if "llvmpipe" in " ".join(str(d.get("name")) for d in rt.get_driver("vulkan").query_available_devices()):
        with pytest.raises(Exception, match="(?i)alignment"):
            rt.DeviceArray(backend.runtime_device.hal_device, view).to_host()


# -- compile errors ----------------------------------------------------------------------------


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(6, 5), torch.randint(0, 5, (6,))


def _raw_only() -> IreeBackend:
    backend = IreeBackend("iree-cpu", input_forms="raw", disk_cache=DiskCache("iree", enabled=False))
    lazy_core.init(backend)
    lazy_core.executor().clear_cache()
    return backend


def test_compile_error_names_user_line_and_writes_repro(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """IREE's torch pipeline rejects nll_loss (unranked prim.NumToTensor) from raw IR."""
    monkeypatch.setenv("LAZY_REPRO_DIR", str(tmp_path))
    monkeypatch.setenv("LAZY_STRICT", "1")
    _raw_only()
    x, t = _inputs()
    line = _here() + 1
    loss = F.cross_entropy(x.to("lazy"), t.to("lazy"))
    try:
        loss.cpu()
    except lazy_core.CompileError as e:
        err = e
    else:
        pytest.skip("this IREE compiles nll_loss from raw torch IR; the test needs an op it rejects")
    finally:
        monkeypatch.delenv("LAZY_STRICT")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lazy_core.mark_step()  # run the failed graph eagerly now, not in the next test
    assert err.location == f"{__file__}:{line}", err
    assert err.repro_path and os.path.dirname(err.repro_path) == str(tmp_path)
    repro = open(err.repro_path).read()
    assert "iree-compile" in repro and "--iree-hal-target-backends=llvm-cpu" in repro
    assert "--iree-llvmcpu-target-cpu=host" in repro and "torch.aten.nll_loss_forward" in repro
    assert f'loc("{__file__}":{line}:0)' in repro


def test_compile_error_falls_back_to_eager_with_a_warning(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("LAZY_REPRO_DIR", str(tmp_path))
    monkeypatch.delenv("LAZY_STRICT", raising=False)
    _raw_only()
    x, t = _inputs()
    loss = F.cross_entropy(x.to("lazy"), t.to("lazy"))  # another line, another warning
    with pytest.warns(RuntimeWarning, match="could not compile"):
        value = loss.cpu()
    torch.testing.assert_close(value, F.cross_entropy(x, t))
    assert metrics.counter("fallback::compile_error") >= 1


def test_compiler_crash_becomes_an_eager_fallback(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """iree-compile 3.13 crashes on a matmul with an empty inner dimension: the program still runs."""
    monkeypatch.setenv("LAZY_REPRO_DIR", str(tmp_path))
    monkeypatch.delenv("LAZY_STRICT", raising=False)
    use_backend("iree-cpu")
    a, b = torch.randn(5, 0), torch.randn(0, 10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = (a.to("lazy") @ b.to("lazy")).cpu()
    torch.testing.assert_close(got, a @ b)
    if metrics.counter("fallback::compile_error"):
        assert any("crashed" in str(w.message) for w in caught), [str(w.message) for w in caught]


def test_default_forms_compile_what_raw_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default forms (torch-mlir's backend contract first) compile nll_loss."""
    monkeypatch.setenv("LAZY_STRICT", "1")
    iree_backend.clear_memory_caches()
    lazy_core.init(IreeBackend("iree-cpu", disk_cache=DiskCache("iree", enabled=False)))
    lazy_core.executor().clear_cache()
    metrics.reset()
    x, t = _inputs()
    loss = F.cross_entropy(x.to("lazy"), t.to("lazy"))
    torch.testing.assert_close(loss.cpu(), F.cross_entropy(x, t))
    assert metrics.counter("compile") == 1 and metrics.counter("iree_compile") == 1


def test_linalg_form_compiles_with_input_type_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """The opt-in linalg form: torch-mlir's linalg-on-tensors, IREE's plain MLIR input."""
    monkeypatch.setenv("LAZY_STRICT", "1")
    lazy_core.init(IreeBackend("iree-cpu", input_forms="linalg", disk_cache=DiskCache("iree", enabled=False)))
    lazy_core.executor().clear_cache()
    metrics.reset()
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    torch.testing.assert_close((x.to("lazy") @ w.to("lazy")).relu().cpu(), (x @ w).relu())
    assert metrics.counter("iree_compile") == 1


# -- configuration -----------------------------------------------------------------------------


def test_flags_from_constructor_and_env_enter_the_cache_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAZY_IREE_FLAGS", "--iree-opt-level=O1")
    monkeypatch.setenv("LAZY_IREE_CPU_FLAGS", "--iree-llvmcpu-target-cpu=generic")
    b = IreeBackend("iree-cpu", flags=["--iree-opt-strip-assertions"])
    flags = b.config.compile_flags
    assert "--iree-opt-level=O1" in flags and "--iree-opt-strip-assertions" in flags
    # The user's target CPU replaces the default one (LLVM options may appear once).
    assert "--iree-llvmcpu-target-cpu=generic" in flags and "--iree-llvmcpu-target-cpu=host" not in flags
    monkeypatch.delenv("LAZY_IREE_FLAGS")
    monkeypatch.delenv("LAZY_IREE_CPU_FLAGS")
    plain = IreeBackend("iree-cpu")
    assert plain.cache_key() != b.cache_key()
    assert "--iree-opt-level=O1" in b.cache_key()


def test_flags_change_compiled_code_key(monkeypatch: pytest.MonkeyPatch) -> None:
    use_backend("iree-cpu")
    x = torch.randn(3).to("lazy")
    (x + x).cpu()
    comp = lazy_core.last_computation()
    a = IreeBackend("iree-cpu").compile_key(comp)
    b = IreeBackend("iree-cpu", flags=["--iree-opt-level=O1"]).compile_key(comp)
    c = IreeBackend("iree-vulkan").compile_key(comp)
    assert len({a, b, c}) == 3


def test_device_selection() -> None:
    assert resolve_device("cuda", "1") == "cuda://1"
    assert resolve_device("cuda", "cuda://GPU-abc") == "cuda://GPU-abc"
    assert resolve_device("local-task", "cuda://1") == "local-task"  # another driver's URI
    assert resolve_device("vulkan", None) == "vulkan"
    assert make_config(CPU, device="local-sync").device_uri == "local-task"


def test_f64_demotion_is_refused() -> None:
    with pytest.raises(ValueError, match="demotion"):
        IreeBackend("iree-cpu", flags=["--iree-input-demote-f64-to-f32=true"])
    assert merge_flags(["--a=1", "--b"], ["--a=2"]) == ("--b", "--a=2")


def test_unavailable_reason_is_none_for_cpu() -> None:
    assert IreeBackend("iree-cpu").unavailable_reason() is None
