"""Asynchronous execution at process exit (lazy_core.async_exec)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import weakref
from typing import Any

import pytest
import torch
from conftest import use_backend

import lazy_core
from lazy_core.eager_backend import EagerBackend

_SCRIPT = textwrap.dedent(
    """
    import torch, lazy_core
    x = torch.randn(32, 32).to("lazy")
    w = torch.randn(32, 32).to("lazy")
    lazy_core.mark_step()
    y = x
    for _ in range(25):
        y = (y * 1.0001 + 0.5).tanh() - w
    lazy_core.mark_step()  # queued on the worker thread; the script ends at once
    raise SystemExit(3)
    """
)


def test_exit_right_after_mark_step_keeps_the_exit_status():
    # The worker used to be killed mid-execution at interpreter exit, which
    # aborted the process (C++ terminate, SIGABRT) about one run in three.
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert "terminate called" not in proc.stderr


class _RuntimeFailure(EagerBackend):
    """The eager backend with a device that fails every execution (a lost device)."""

    name = "eager-failing-device"

    def execute_computation(self, executable: Any, arguments: Any, device: Any) -> Any:
        raise RuntimeError("device lost during execution")


def test_execution_error_surfaces_at_the_next_read_with_the_step_label():
    previous = lazy_core.active_backend()
    lazy_core.init(_RuntimeFailure())
    try:
        x = torch.ones(3).to("lazy")
        y = x + 1
        lazy_core.mark_step()  # queued: returns before the failure
        with pytest.raises(RuntimeError, match=r"lazy execution \(mark_step at .*test_async.py:\d+, graph .*failed: device lost"):
            y.cpu()
        # Tensors that were not part of the failed execution still work.
        torch.testing.assert_close(x.cpu(), torch.ones(3))
    finally:
        del y
        lazy_core.init(previous)


def test_a_kept_result_does_not_keep_the_rest_of_its_step_alive():
    use_backend("eager")
    x = torch.ones(1000).to("lazy")
    keep = x + 1
    dropped = x * 2
    lazy_core.mark_step()
    lazy_core.wait_device_ops()
    data = dropped._lz_value().node.data
    value = data.wait() if hasattr(data, "wait") else data
    handle = weakref.ref(value.handle)
    del dropped, data, value
    gc.collect()
    assert handle() is None, "the dropped result's buffer is still referenced"
    torch.testing.assert_close(keep.cpu(), torch.full((1000,), 2.0))


_RACE = textwrap.dedent(
    """
    import sys, time, torch
    sys.path.insert(0, {root!r})
    import lazy_core
    from lazy_core import async_exec

    make = async_exec.PendingBatch.placeholders
    def late(self, n):  # the caller is descheduled between queueing a step and returning
        time.sleep(0.3)
        return make(self, n)
    async_exec.PendingBatch.placeholders = late
    lazy_core.init("eager")
    y = torch.ones(3).to("lazy") + 1
    lazy_core.mark_step()
    z = y * 2
    lazy_core.mark_step()  # its input is the first step's result
    print(z.cpu().tolist())
    """
)


def test_a_step_the_worker_finishes_before_mark_step_returns_does_not_hang():
    """Regression: the result placeholders were made after the job was queued; a
    worker that ran the job first found none to fill, died, and the next step
    waited for them forever."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", _RACE.format(root=root)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, LAZY_ASYNC="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[4.0, 4.0, 4.0]"
