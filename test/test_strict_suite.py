"""The suite can see a backend that compiles nothing.

Run the backend-generic tests (test_semantics, test_training, test_losses)
on ``broken`` (test/broken_backend.py: a real backend whose compile
always raises) in a subprocess, and count: at least 90% must fail. Before
strict mode, 27 of 44 passed, because a graph that failed to compile ran
eagerly on the CPU with only a warning, so every value still matched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch

import lazy_core
from lazy_core.step_guard import StepGuardError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERIC = ["test/test_semantics.py", "test/test_training.py", "test/test_losses.py"]


def test_broken_backend_fails_the_backend_generic_tests(tmp_path) -> None:
    xml = tmp_path / "broken.xml"
    env = dict(os.environ, LAZY_TEST_BACKENDS="broken", OMP_NUM_THREADS="1")
    env.pop("LAZY_STRICT", None)  # conftest must set it by itself
    env.pop("LAZY_REQUIRE_BACKENDS", None)  # CI's list: this run tests "broken" only
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", "broken",
         f"--junitxml={xml}", *GENERIC],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    outcomes: dict[str, str] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        bad = "failure" in kinds or "error" in kinds
        outcomes[name] = "failed" if bad or outcomes.get(name) == "failed" else (
            "skipped" if "skipped" in kinds else "passed")
    ran = {k: v for k, v in outcomes.items() if v != "skipped"}
    passed = sorted(k for k, v in ran.items() if v == "passed")
    assert len(ran) >= 40, (len(ran), proc.stdout[-3000:])
    failed_share = 1 - len(passed) / len(ran)
    assert failed_share >= 0.9, f"only {failed_share:.0%} of {len(ran)} failed; passing: {passed}"


def test_full_graph_step_refuses_a_whole_graph_compile_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without strict mode, a step that fails to compile would run op by op on the CPU with a
    warning; ``step(full_graph=True)`` promises one compiled graph, so it must raise."""
    monkeypatch.delenv("LAZY_STRICT", raising=False)
    from broken_backend import BrokenBackend

    lazy_core.init(BrokenBackend())
    try:
        x = torch.randn(4).to("lazy")
        with pytest.raises(StepGuardError, match="failed to compile"):
            with lazy_core.step(full_graph=True):
                y = (x * 2).sum()  # live at the block's closing mark_step: one graph to compile
        assert y.device.type == "lazy"
    finally:
        lazy_core.init("eager")
