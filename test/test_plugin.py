"""A third-party backend is found through the ``lazy_core.backends`` entry-point group.

The fixture package in ``test/fixtures/lazy_mlir_toy_plugin`` is really
installed with pip (offline, into a temporary target directory), and a fresh
Python process with that directory on its path must list ``toy`` among the
available backends, activate it with ``lazy_core.init("toy")``, and compute
with it what PyTorch computes on the CPU. Nothing in lazy-mlir names the toy
backend: discovery goes through ``importlib.metadata`` alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "test", "fixtures", "lazy_mlir_toy_plugin")

CHECK = textwrap.dedent(
    """
    import json, torch, lazy_core
    names = lazy_core.available_backends()
    backend = lazy_core.init("toy")
    torch.manual_seed(0)
    a, b = torch.randn(4, 5), torch.randn(5, 3)
    got = (a.to("lazy") @ b.to("lazy")).relu().sum(0).cpu()
    want = (a @ b).relu().sum(0)
    print(json.dumps({
        "names": names,
        "type": type(backend).__module__ + "." + type(backend).__name__,
        "active": lazy_core.active_backend().name,
        "compiled": backend.compiled,
        "executed": backend.executed,
        "max_diff": float((got - want).abs().max()),
    }))
    """
)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The toy plugin pip-installed (no network, no build isolation) into a fresh directory."""
    work = tmp_path_factory.mktemp("toy_plugin")
    src = work / "src"
    # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
    shutil.copytree(FIXTURE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    site = work / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "--disable-pip-version-check", "--target", str(site), str(src)],
        capture_output=True, text=True, timeout=300,
    )
    if proc.returncode != 0:
        pytest.fail(f"pip could not install the toy plugin:\n{proc.stdout}\n{proc.stderr}")
    return str(site)


def _run(site: str | None) -> dict:
    env = dict(os.environ)
    env.pop("LAZY_BACKEND", None)
    paths = [p for p in (site, ROOT, env.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    proc = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0:
        return {"error": proc.stderr}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_installed_plugin_is_discovered_and_runs(plugin_site: str) -> None:
    assert os.path.isfile(os.path.join(plugin_site, "lazy_mlir_toy_plugin", "__init__.py"))
    dist_info = [d for d in os.listdir(plugin_site) if d.endswith(".dist-info")]
    assert dist_info, "pip wrote no dist-info: entry points would be invisible"
    result = _run(plugin_site)
    assert "error" not in result, result.get("error")
    assert "toy" in result["names"]
    assert "reference" in result["names"] and "eager" in result["names"]
    assert result["type"] == "lazy_mlir_toy_plugin.ToyBackend"
    assert result["active"] == "toy"
    # The computation really went through the plugin, and got PyTorch's answer.
    assert result["compiled"] >= 1 and result["executed"] >= 1
    assert result["max_diff"] < 1e-5


def test_without_the_plugin_toy_is_unknown() -> None:
    """The control: the same check without the install fails, naming the entry-point group."""
    result = _run(None)
    assert "error" in result
    assert "unknown lazy backend 'toy'" in result["error"]
    assert "lazy_core.backends" in result["error"]


def test_vendor_runs_the_project_tests_on_its_backend_with_one_command(plugin_site: str) -> None:
    """docs/writing-a-backend.md's one command: lazy-mlir-test-backend NAME runs the
    backend-generic tests with the ``backend`` fixture on the installed plugin only."""
    env = dict(os.environ)
    for var in ("LAZY_BACKEND", "LAZY_TEST_BACKENDS", "LAZY_REQUIRE_BACKENDS"):
        env.pop(var, None)
    env["PYTHONPATH"] = os.pathsep.join([plugin_site, ROOT])
    proc = subprocess.run(
        [sys.executable, "-m", "lazy_mlir.tools.test_backend", "toy", "-v", "-x",
         "-k", "same_step_twice_is_one_compile or training_matches_eager_and_compiles_once"],
        capture_output=True, text=True, env=env, cwd=plugin_site, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    ran = [ln for ln in proc.stdout.splitlines() if "PASSED" in ln]
    assert len(ran) >= 4 and all("[toy" in ln for ln in ran), proc.stdout[-4000:]
