"""A pytest plugin: the costly second-backend variants ``make check`` leaves to ``make check-slow``.

Most of CI's time is compiling: a small graph costs ~0.15 s on reference
and ~0.5-1 s on IREE, and the suite's ~5,300 tests compile thousands of
them on 2 cores (54 min in session 45, against a 45 min budget). The
long tail of a few hundred tests decides the time, and in it the same
test often runs on three compiling backends. Every backend shares the
lowering (one torch-dialect module per graph), so a test's variant on a
second backend mostly checks that backend's compiler on code the first
already checked.

``heavy_variants.txt`` lists, by pytest node id, the variants marked
``slow`` here (so ``-m 'not slow'`` leaves them out of ``make check`` and
``make check-slow`` runs them): the reference variants that took >= 3 s and
the iree-vulkan ones that took >= 5 s in a CI-like run, each only where the
same test also runs on iree-cpu in ``make check``, and never a test whose
source names Vulkan, SPIR-V or lavapipe (a regression test for a
target-specific bug keeps its target). Regenerate it from a full run's
JUnit XML::

    pytest -n 3 --junitxml=/tmp/run.xml    # the whole suite
    python test/heavy_variants.py /tmp/run.xml > test/heavy_variants.txt

A listed id that no longer exists while its test ran on the same backend
in the collection is a usage error (a renamed test must not silently return
to, or leave, CI); runs that pick tests by node id are not checked.
"""

from __future__ import annotations

import ast
import os
import re
import sys

import pytest

LIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heavy_variants.txt")
#: Seconds (CI-like run, 3 workers on 2 cores) from which a variant is heavy, per backend.
THRESHOLDS = {"reference": 3.0, "iree-vulkan": 5.0}
#: Where a test's source says this, its iree-vulkan variant is a target-specific regression test.
_TARGET_SPECIFIC = re.compile(r"vulkan|spir-?v|lavapipe", re.I)
#: A backend among a node id's parameters, which pytest joins with "-" ("dtype0-iree-cpu").
_BACKEND = re.compile(r"(?:^|-)(reference|iree-cpu|iree-vulkan)(?=-|$)")


def listed() -> set[str]:
    """The node ids in ``heavy_variants.txt`` (comments and blank lines skipped); none where the
    list is absent (a copy of the tests without it runs every variant)."""
    if not os.path.exists(LIST):
        return set()
    with open(LIST) as f:
        return {line.split("#")[0].strip() for line in f} - {""}


def _function_and_backend(node_id: str) -> tuple[str, str | None]:
    """``(file::function, backend named in the parameters or None)`` of a node id."""
    function, _, params = node_id.partition("[")
    found = _BACKEND.search(params.rstrip("]"))
    return function, found.group(1) if found else None


@pytest.hookimpl(tryfirst=True)  # before the mark plugin deselects by -m
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    heavy = listed()
    if not heavy:
        return
    slow = pytest.mark.slow
    seen, collected = set(), set()
    for item in items:
        collected.add(_function_and_backend(item.nodeid))
        if item.nodeid in heavy:
            item.add_marker(slow)
            seen.add(item.nodeid)
    if any("::" in arg for arg in config.args):
        return  # tests picked by node id: the others of their function were not collected
    # Stale: the test ran on that backend in this collection, but not with this id (a run that
    # narrows the backends, LAZY_TEST_BACKENDS, or the files says nothing about an entry).
    stale = sorted(h for h in heavy - seen if _function_and_backend(h) in collected)
    if stale:
        raise pytest.UsageError(f"test/heavy_variants.txt names variants that no longer exist: {stale} "
                                "(regenerate it, see test/heavy_variants.py)")


def _function_sources(path: str) -> dict[str, str]:
    with open(path) as f:
        source = f.read()
    return {node.name: ast.get_source_segment(source, node) or ""
            for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)}


def generate(junit_xml: str, root: str | None = None) -> list[str]:
    """The heavy variants of a JUnit XML report, by the rule in this module's docstring
    (``root``: the repository the report's test files are in)."""
    import xml.etree.ElementTree as ET

    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cases = []
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/") + ".py"
        cases.append((path, case.get("name", ""), float(case.get("time", 0))))
    ids = {(p, n) for p, n, _ in cases}
    sources: dict[str, dict[str, str]] = {}
    out = []
    for path, name, seconds in sorted(cases):
        params = name.partition("[")[2]
        found = _BACKEND.search(params.rstrip("]"))
        if not found or found.group(1) not in THRESHOLDS or seconds < THRESHOLDS[found.group(1)]:
            continue
        twin = name.replace(found.group(1), "iree-cpu", 1)
        if (path, twin) not in ids:
            continue  # no iree-cpu variant in make check: this one is the coverage
        if found.group(1) == "iree-vulkan":
            if path not in sources:
                sources[path] = _function_sources(os.path.join(root, path))
            if _TARGET_SPECIFIC.search(sources[path].get(name.split("[")[0], "")):
                continue
        out.append(f"{path}::{name}")
    return out


if __name__ == "__main__":
    print("# Generated by test/heavy_variants.py from a full CI-like run; see its docstring.")
    for node_id in generate(sys.argv[1]):
        print(node_id)
