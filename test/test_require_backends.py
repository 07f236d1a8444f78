"""CI's LAZY_REQUIRE_BACKENDS guard (test/require_backends.py) fails runs that skipped a required backend.

Each case runs pytest in a fresh process on a two-test file, with the
plugin loaded as conftest.py loads it, and reads the exit status: a skip
that names a required backend must fail the run, the same skip without the
requirement must not, and a required backend that cannot be created must
stop the run before any test.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

TEST_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TEST_DIR)

SAMPLE = textwrap.dedent(
    """
    import pytest

    def test_runs():
        pass

    def test_skips_a_backend():
        pytest.skip("backend eager unavailable: pretend the driver is missing")
    """
)


def _pytest(tmp_path, required: str | None) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TEST_DIR, ROOT]))
    env.pop("LAZY_TEST_BACKENDS", None)
    env.pop("LAZY_REQUIRE_BACKENDS", None)
    if required is not None:
        env["LAZY_REQUIRE_BACKENDS"] = required
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "require_backends",
         "--rootdir", str(tmp_path), str(tmp_path / "test_sample.py")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )


def test_skip_of_a_required_backend_fails_the_run(tmp_path) -> None:
    proc = _pytest(tmp_path, "eager")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "required backend eager was unavailable" in proc.stdout, proc.stdout


def test_the_same_skip_passes_when_nothing_is_required(tmp_path) -> None:
    proc = _pytest(tmp_path, None)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 skipped" in proc.stdout


def test_a_required_backend_that_cannot_run_stops_the_run_first(tmp_path) -> None:
    proc = _pytest(tmp_path, "eager,no-such-backend")
    assert proc.returncode == 4, proc.stdout + proc.stderr  # pytest's usage error, before any test
    assert "no-such-backend: ValueError: unknown lazy backend" in proc.stderr
    assert "passed" not in proc.stdout
