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
``make check-slow`` runs them). A variant listed by rules 1-3 has a twin on
another compiling backend that stays in ``make check``, so the test keeps
its coverage of the shared lowering and of lazy_core; what moves is the
second and third compile of the same graphs. In a CI-like run:

1. an iree-cpu variant that took >= 10 s, where its reference twin took
   less (the reference backend compiles a graph in a fraction of IREE's
   time) and the test's source does not name IREE (a regression test of
   an IREE workaround keeps its target);
2. a reference variant that took >= 1 s, where its iree-cpu twin stays;
3. an iree-vulkan variant that took >= 2 s, where an iree-cpu or
   reference twin stays and the test's source does not name Vulkan,
   SPIR-V or lavapipe;
4. any other variant that took >= 15 s (``CAP``), outside the end-to-end
   files (``END_TO_END``: examples, real models, the wheel, strict mode,
   whole-process checks). These leave CI without a twin there: the
   long-running linear-algebra, pooling, histogram and fuzz-regression
   sweeps run in ``make check-slow``. Rules 1-3 alone left 71 minutes.

Session 52 found CI at 84 minutes (the budget is 45): ~5,400 tests, of
which ~230 variants over 10 s took half the time.

Regenerate it from a full run's JUnit XML::

    pytest -n 3 --junitxml=/tmp/run.xml    # the whole suite (or parts, one report each)
    python test/heavy_variants.py /tmp/run.xml [more.xml ...] > /tmp/list && mv /tmp/list test/heavy_variants.txt

Variants already listed are not in such a run (they are ``slow``): they stay listed.

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
THRESHOLDS = {"reference": 1.0, "iree-vulkan": 2.0, "iree-cpu": 10.0}
#: Where a test's source says this, its iree-vulkan variant is a target-specific regression test.
_TARGET_SPECIFIC = re.compile(r"vulkan|spir-?v|lavapipe", re.I)
#: Seconds from which any variant leaves ``make check`` (rule 4), outside ``END_TO_END``.
CAP = 15.0
#: The end-to-end checks CI always runs, however long: the examples a user starts from, real
#: models' steps in one graph, the installed wheel, strict mode, the process-exit and Vulkan
#: device-lifetime checks that only a whole process shows.
END_TO_END = frozenset(f"test/{name}.py" for name in (
    "test_examples", "test_model_zoo", "test_wheel", "test_strict_suite", "test_async", "test_vulkan_signal_layer"))
#: Where a test's source says this, its iree-cpu variant is a regression test of an IREE workaround.
_IREE_SPECIFIC = re.compile(r"iree", re.I)
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


def _on(name: str, found: re.Match, backend: str) -> str:
    """Node name ``name`` (its backend parameter matched by ``found`` in its parameters) with
    ``backend`` in that backend's place."""
    head, _, params = name.partition("[")
    start, end = found.span(1)
    return f"{head}[{params[:start]}{backend}{params[end:]}"


def generate(junit_xml: str | list[str], root: str | None = None, previous: set[str] | None = None) -> list[str]:
    """The heavy variants of JUnit XML reports (one or several that together ran the suite), by the
    rule in this module's docstring (``root``: the repository the reports' test files are in).
    ``previous`` ids that no report ran (already ``slow``, so left out of the run) stay listed."""
    import xml.etree.ElementTree as ET

    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    seconds: dict[tuple[str, str], float] = {}
    for report in [junit_xml] if isinstance(junit_xml, str) else junit_xml:
        for case in ET.parse(report).getroot().iter("testcase"):
            path = case.get("classname", "").replace(".", "/") + ".py"
            seconds[(path, case.get("name", ""))] = float(case.get("time", 0))
    sources: dict[str, dict[str, str]] = {}

    def source_says(pattern: re.Pattern, path: str, name: str) -> bool:
        if path not in sources:
            sources[path] = _function_sources(os.path.join(root, path))
        return bool(pattern.search(sources[path].get(name.split("[")[0], "")))

    def heavy(backend: str) -> list[tuple[str, str, re.Match]]:
        out = []
        for (path, name), t in sorted(seconds.items()):
            found = _BACKEND.search(name.partition("[")[2].rstrip("]"))
            if found and found.group(1) == backend and t >= THRESHOLDS[backend]:
                out.append((path, name, found))
        return out

    listed: set[tuple[str, str]] = set()
    kept: set[tuple[str, str]] = set()
    # 1. A costly iree-cpu variant whose reference twin is cheaper: the twin carries the test.
    for path, name, found in heavy("iree-cpu"):
        twin = (path, _on(name, found, "reference"))
        if twin in seconds and seconds[twin] < seconds[(path, name)] and not source_says(_IREE_SPECIFIC, path, name):
            listed.add((path, name))
            kept.add(twin)
    # 4. Whatever took >= CAP s, but for the files that are the product's end-to-end checks (first:
    # rules 2 and 3 need a twin that really stays).
    for (path, name), t in seconds.items():
        if t >= CAP and path not in END_TO_END:
            listed.add((path, name))
    # 2. A costly reference variant whose iree-cpu twin stays.
    for path, name, found in heavy("reference"):
        twin = (path, _on(name, found, "iree-cpu"))
        if twin in seconds and twin not in listed and (path, name) not in kept:
            listed.add((path, name))
    # 3. A costly iree-vulkan variant, not a target-specific test, with an iree-cpu or reference twin that stays.
    for path, name, found in heavy("iree-vulkan"):
        twins = [(path, _on(name, found, b)) for b in ("iree-cpu", "reference")]
        if (any(t in seconds and t not in listed for t in twins)
                and not source_says(_TARGET_SPECIFIC, path, name)):
            listed.add((path, name))
    ran = {f"{p}::{n}" for p, n in seconds}
    return sorted({f"{p}::{n}" for p, n in listed} | {i for i in previous or () if i not in ran})


if __name__ == "__main__":
    print("# Generated by test/heavy_variants.py from a full CI-like run; see its docstring.")
    for node_id in generate(sys.argv[1:], previous=listed()):
        print(node_id)
