"""A pytest plugin that turns "backend unavailable" skips into failures where CI says so.

Backend-generic tests skip a backend that cannot run on the machine (no
Vulkan driver, no GPU), which is right on a laptop and wrong in CI: there a
missing driver would make every iree-vulkan test skip and the run still pass.
``LAZY_REQUIRE_BACKENDS=eager,reference,iree-cpu,iree-vulkan`` (``.ci/run``
sets it) names the backends that must run:

* before any test, each one is created and asked ``unavailable_reason()``;
  one that cannot run ends the session with an error saying why;
* a required backend that ``LAZY_TEST_BACKENDS`` leaves out is an error too
  (its tests would not run at all);
* after the run, any test that skipped because a required backend was
  unavailable (the ``backend <name> unavailable`` messages of
  ``conftest.use_backend``) fails the session, listed in the summary.

Unset, the plugin does nothing. ``test/conftest.py`` loads it.
"""

from __future__ import annotations

import os
import re

import pytest

ENV = "LAZY_REQUIRE_BACKENDS"
# The skip messages of conftest.use_backend and of tests that check one backend themselves.
_SKIP = re.compile(r"\bbackend ([\w.-]+) unavailable\b|\b([\w.-]+) backend unavailable\b")
_skipped: list[tuple[str, str]] = []  # (required backend, test id)


def required_backends() -> list[str]:
    """The backends ``LAZY_REQUIRE_BACKENDS`` lists (empty: nothing is required)."""
    return [b.strip() for b in os.environ.get(ENV, "").split(",") if b.strip()]


def unavailable_reason(name: str) -> str | None:
    """None if backend ``name`` can run here, else why not (creating it may fail too)."""
    import lazy_core

    try:
        backend = lazy_core.create_backend(name)
        check = getattr(backend, "unavailable_reason", None)
        return check() if check else None
    except Exception as e:  # an unknown name, a missing plugin or driver
        return f"{type(e).__name__}: {e}"


def pytest_sessionstart(session: pytest.Session) -> None:
    required = required_backends()
    if not required:
        return
    problems = []
    tested = os.environ.get("LAZY_TEST_BACKENDS")
    if tested:
        names = {b.strip() for b in tested.split(",")}
        problems += [f"{b}: not in LAZY_TEST_BACKENDS={tested}" for b in required if b not in names]
    for name in required:
        reason = unavailable_reason(name)
        if reason:
            problems.append(f"{name}: {reason}")
    if problems:
        raise pytest.UsageError(
            f"{ENV}={','.join(required)} but not every required backend can run here:\n  "
            + "\n  ".join(problems)
        )


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    required = required_backends()
    if not required or not report.skipped:
        return
    message = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    for m in _SKIP.finditer(message):
        name = m.group(1) or m.group(2)
        if name in required:
            _skipped.append((name, report.nodeid))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _skipped:
        return
    tr = terminalreporter
    tr.section(f"required backends skipped ({ENV})", red=True)
    for name, nodeid in _skipped:
        tr.line(f"{nodeid}: required backend {name} was unavailable")
    tr.line(f"{len(_skipped)} test(s) skipped a backend that {ENV} requires: the run fails.", red=True)
