# ruff: noqa: F821  (lit provides `config` and `lit_config` to this file)
# lit configuration for lazy-mlir's FileCheck tests on emitted MLIR.
#
# Works two ways:
#  - plain `lit test/lit -v` from the repository root (no CMake): the Python
#    that runs the tests is the one running lit when it can import lazy_core,
#    else the repository's .venv;
#  - through CMake (`check-lazy-mlir-lit`): build/test/lit/lit.site.cfg.py sets
#    python_executable and the build directory, then loads this file.
# LAZY_MLIR_PYTHON overrides the Python in both cases.
#
# Tests are Python scripts: `# RUN: %PYTHON %s | FileCheck %s`. FileCheck is the
# `filecheck` PyPI package (command `filecheck`), exposed under LLVM's name.

import importlib.util
import os
import shutil
import sys

import lit.formats
import lit.util

config.name = "lazy-mlir"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".py"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "Inputs", "Output"]
config.test_source_root = os.path.dirname(os.path.abspath(__file__))
source_dir = getattr(config, "lazy_mlir_source_dir", None) or os.path.dirname(
    os.path.dirname(config.test_source_root)
)
build_dir = getattr(config, "lazy_mlir_build_dir", None)
if build_dir:
    config.test_exec_root = os.path.join(build_dir, "test", "lit")


def _python() -> str:
    chosen = os.environ.get("LAZY_MLIR_PYTHON") or getattr(config, "python_executable", None)
    if chosen:
        return chosen
    if importlib.util.find_spec("lazy_core") is not None and importlib.util.find_spec("torch_mlir"):
        return sys.executable
    venv = os.path.join(source_dir, ".venv", "bin", "python")
    if os.path.exists(venv):
        return venv
    return sys.executable


def _filecheck(python: str) -> str:
    # The console script installed next to that Python, else one on PATH,
    # else the package's module entry point.
    beside = os.path.join(os.path.dirname(python), "filecheck")
    if os.path.exists(beside):
        return beside
    found = shutil.which("filecheck")
    if found:
        return found
    return f"{python} -m filecheck"


python = _python()
filecheck = _filecheck(python)
lit_config.note(f"lazy-mlir lit: python {python}; FileCheck = {filecheck}")

# Config substitutions are applied before lit's own (%s, %p, ...), so %PYTHON is safe.
config.substitutions.append(("%PYTHON", python))
config.substitutions.append((r"\bFileCheck\b", filecheck))
config.substitutions.append(("%lazy_mlir_src", source_dir))

# The test scripts import lazy_core, lowering and tools from this checkout,
# whether or not the project is installed in that Python.
config.environment["PYTHONPATH"] = os.pathsep.join(
    p for p in [source_dir, os.environ.get("PYTHONPATH", "")] if p
)
config.environment["PATH"] = os.pathsep.join(
    [os.path.dirname(python), os.environ.get("PATH", "")]
)
for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "LAZY_REPRO_DIR"):
    if name in os.environ:
        config.environment[name] = os.environ[name]
# Tests choose their own backend; a user's LAZY_BACKEND or dump settings must not leak in.
config.environment["LAZY_SOURCE_LOCATIONS"] = "1"
# These tests read the graphs a backend compiles: a small graph of uploaded values read by
# .item() would run on the host instead (lazy_core/host_eval.py).
config.environment["LAZY_HOST_EVAL"] = "0"
config.environment["PYTHONDONTWRITEBYTECODE"] = "1"
config.environment["OMP_NUM_THREADS"] = "1"
