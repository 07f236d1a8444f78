"""The wheel, as an adopter and a vendor meet it: built from the sources, installed into a
fresh virtual environment, used from a folder outside the repository.

Checks: site-packages gains ``lazy_core`` and ``lazy_mlir`` and nothing generic
(no ``backends``, ``lowering``, ``tools``); the backends are listed through the
``lazy_core.backends`` entry points; the default backend is iree-cpu and a
training step there matches eager PyTorch; the console scripts start; and the
toy vendor plugin, pip-installed next to the wheel, passes the project's tests
with ``lazy-mlir-test-backend toy``.

The environment is really fresh (``python -m venv --without-pip``, nothing of
the build's venv on its path) except for the heavy dependencies: torch, IREE,
torch-mlir and their requirements are linked from the current environment
into one folder that a ``.pth`` file adds, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from importlib import metadata

import pytest
from packaging.requirements import Requirement

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "test", "fixtures", "lazy_mlir_toy_plugin")
# What the fresh environment may hold at the top level of site-packages.
ALLOWED_TOP_LEVEL = {"lazy_core", "lazy_mlir"}
_IGNORE = shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info", "__pycache__", "Output", "results")


def _requirement_closure(names: list[str]) -> list[metadata.Distribution]:
    """Installed distributions ``names`` need, transitively (extras left out)."""
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        req = Requirement(todo.pop())
        key = req.name.lower().replace("_", "-")
        if key in seen or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue  # an optional platform dependency not installed here
        seen[key] = dist
        todo += dist.requires or []
    return list(seen.values())


def _link_dependencies(target: str) -> None:
    """Symlink the top-level files of lazy-mlir's runtime dependencies (and pytest) into ``target``."""
    wanted = [r for r in metadata.requires("lazy-mlir") or [] if "extra ==" not in r] + ["pytest"]
    os.makedirs(target)
    for dist in _requirement_closure(wanted):
        base = str(dist.locate_file(""))
        for top in {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] not in ("..", "__pycache__")}:
            src, dst = os.path.join(base, top), os.path.join(target, top)
            if os.path.exists(src) and not os.path.lexists(dst):
                os.symlink(src, dst)


def _run(cmd: list[str], cwd: str, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LAZY_", "PYTHON", "VIRTUAL_ENV"))}
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env={**clean, **env})
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A fresh venv with the wheel and the toy plugin installed: (its python, a folder outside the repo)."""
    try:
        metadata.distribution("lazy-mlir")
    except metadata.PackageNotFoundError:
        pytest.skip("lazy-mlir's dependencies are not installed with pip here (its metadata is missing)")
    work = str(tmp_path_factory.mktemp("wheel"))
    src, wheels, env_dir = (os.path.join(work, d) for d in ("src", "wheels", "venv"))
    shutil.copytree(ROOT, src, ignore=_IGNORE, symlinks=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, src], work)
    [wheel] = [os.path.join(wheels, f) for f in os.listdir(wheels) if f.endswith(".whl")]
    _run([sys.executable, "-m", "venv", "--without-pip", env_dir], work)
    python = os.path.join(env_dir, "bin", "python")
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], work).stdout.strip()
    _link_dependencies(os.path.join(work, "deps"))
    with open(os.path.join(site, "lazy_mlir_test_deps.pth"), "w") as f:
        f.write(os.path.join(work, "deps") + "\n")
    toy = os.path.join(work, "toy")
    shutil.copytree(FIXTURE, toy, ignore=_IGNORE)
    _run([*pip, "--python", python, "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          wheel, toy], work)
    outside = os.path.join(work, "elsewhere")
    os.makedirs(outside)
    return python, outside


CHECK = textwrap.dedent(
    """
    import copy, json, os, sys, sysconfig
    from importlib import metadata
    import torch, lazy_core, lazy_mlir.backends

    site = sysconfig.get_paths()["purelib"]
    backend = lazy_core.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref = copy.deepcopy(model)
    model.to("lazy")
    x, y = torch.randn(5, 6), torch.randn(5, 2)
    for m, dev in ((model, "lazy"), (ref, "cpu")):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = torch.nn.functional.mse_loss(m(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        if dev == "lazy":
            lazy_core.mark_step()
    diff = max(float((p.detach().cpu() - q.detach()).abs().max()) for p, q in zip(model.parameters(), ref.parameters()))
    print(json.dumps({
        "entry_points": sorted(ep.name for ep in metadata.entry_points(group="lazy_core.backends")),
        "available": lazy_core.available_backends(),
        "backend": backend.name,
        "backend_module": type(backend).__module__,
        "max_param_diff": diff,
        "executed": lazy_core.metrics.counter("execute"),
        "fallbacks": sum(v for k, v in lazy_core.metrics.counters().items() if k.startswith("fallback::")),
        "site_top_level": sorted(os.listdir(site)),
        "files": {m: sys.modules[m].__file__ for m in ("lazy_core", "lazy_mlir.backends")},
        "site": site,
        "generic_imported": sorted(m for m in sys.modules if m.split(".")[0] in ("backends", "lowering", "tools")),
    }))
    """
)


def test_wheel_installs_unambiguous_names_and_trains_on_iree_cpu(venv: tuple[str, str]) -> None:
    python, outside = venv
    r = json.loads(_run([python, "-c", CHECK], outside).stdout.strip().splitlines()[-1])
    assert {"reference", "iree-cpu", "iree-vulkan", "iree-cuda", "toy"} <= set(r["entry_points"]), r
    assert {"eager", "reference", "iree-cpu", "toy"} <= set(r["available"]), r
    packages = {n for n in r["site_top_level"]
                if not n.endswith((".dist-info", ".pth")) and n != "__pycache__" and n != "lazy_mlir_toy_plugin"}
    assert packages == ALLOWED_TOP_LEVEL, r["site_top_level"]
    assert all(f.startswith(r["site"]) for f in r["files"].values()), r["files"]  # the wheel, not the sources
    assert r["generic_imported"] == []
    assert r["backend"] == "iree-cpu" and r["backend_module"].startswith("lazy_mlir.backends.iree"), r
    assert r["executed"] >= 1 and r["fallbacks"] == 0, r
    assert r["max_param_diff"] < 1e-5, r


def test_console_scripts_run_from_the_wheel(venv: tuple[str, str]) -> None:
    python, outside = venv
    bindir = os.path.dirname(python)
    for script in ("lazy-mlir-trace", "lazy-mlir-opsupport", "lazy-mlir-test-backend"):
        out = _run([os.path.join(bindir, script), "--help"], outside).stdout
        assert out.startswith("usage: "), (script, out)


def test_vendor_plugin_passes_the_project_tests_with_one_command(venv: tuple[str, str]) -> None:
    python, outside = venv
    proc = _run([os.path.join(os.path.dirname(python), "lazy-mlir-test-backend"), "toy", "-v", "-x",
                 "-k", "same_step_twice_is_one_compile or scalars_become"], outside)
    passed = [ln for ln in proc.stdout.splitlines() if "PASSED" in ln]
    assert passed and any("[toy]" in ln for ln in passed), proc.stdout[-3000:]
    assert "site-packages/lazy_mlir/tests/" in proc.stdout.replace(os.sep, "/") or "lazy_mlir/tests" in proc.stdout
