"""A pytest plugin that reports what lazy-mlir's Vulkan signal layer absorbed.

The layer (backends/iree/vulkan_layer.py) drops out-of-order host signals of
a timeline semaphore, each of which would otherwise have lost the Vulkan
device for the rest of the process. The race that produces them is rare and
shows under load, so the summary says how often it happened in this run:
with pytest-xdist each worker sends its count to the controller.
"""

from __future__ import annotations

import pytest

_KEY = "vulkan_absorbed_signals"
_counts: list[int] = []


def _absorbed() -> int | None:
    try:
        from lazy_mlir.backends.iree import vulkan_layer
    except ImportError:  # IREE not installed
        return None
    return vulkan_layer.absorbed_signals()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    count = _absorbed()
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller reports
        workeroutput[_KEY] = count
    elif count is not None:
        _counts.append(count)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # xdist controller, once per worker
    count = getattr(node, "workeroutput", {}).get(_KEY)
    if count is not None:
        _counts.append(count)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _counts:
        terminalreporter.write_line(
            f"Vulkan signal layer: {sum(_counts)} out-of-order host semaphore signal(s) absorbed "
            f"in {len(_counts)} process(es) (IREE's wake-up race; each would have lost the device)")
