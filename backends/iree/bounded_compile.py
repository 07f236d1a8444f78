"""``iree-compile`` with a time and a memory bound, so an upstream compiler loop cannot hang the user.

``iree.compiler.compile_str`` runs the compiler and waits for it, however long it runs. IREE
3.13 has passes that never return on some inputs (``reshaped_slices.py``; the softmax
decomposition in ``barriers.py``), and one of them grew its memory by about 100 MB a second:
left alone it takes the machine down with the training loop that asked for the graph. Here the
same command line (``build_compile_command_line``, so flags mean what they mean there) runs in a
child process that is stopped when it runs past ``LAZY_IREE_COMPILE_TIMEOUT`` seconds or its
resident memory passes ``LAZY_IREE_COMPILE_MEMORY`` MiB; the caller turns that into a
``CompileError`` (the graph then runs eagerly, or raises under ``LAZY_STRICT``). The memory is
sampled from ``/proc`` twice a second; where there is no ``/proc``, only the time is bounded.

A child that uses no CPU at all for ``_STALL`` seconds is stuck, not working: it is stopped and
the compile tried once more in a fresh child (counter ``iree_compile_stalled``). The stalls CI saw
(a GPT-2 step that takes 6 s alone still running at the 600 s bound, later one ~120 s test per run)
were this module's own: the MLIR went through a pipe whose rest was never written when the child
had not read it all within the first poll. The input now comes from a file; the bound stays for
whatever else could leave a child waiting.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time

from lazy_core import config as lazy_config
from lazy_core import metrics

#: How often the child's time and memory are looked at, in seconds.
_POLL = 0.5
#: Seconds without any CPU use after which the child is stuck, not working (``supervise``).
_STALL = 120.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class CompileRanAway(RuntimeError):
    """iree-compile passed its time or memory bound and was stopped."""


class CompileStalled(CompileRanAway):
    """iree-compile stopped using CPU (a deadlock in the child) and was stopped."""


def memory_bound_mib() -> int:
    """``LAZY_IREE_COMPILE_MEMORY``, or half the machine's memory (at least 4 GiB) when unset."""
    configured = int(lazy_config.get("LAZY_IREE_COMPILE_MEMORY"))
    if configured:
        return configured
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        return 8192
    return max(4096, total // 2)


def compile_str(mlir: str | bytes, *, input_type: str, target_backends: list[str], extra_args: list[str]) -> bytes:
    """The vmfb ``iree-compile`` makes of ``mlir``; raises ``CompilerToolError`` as
    ``iree.compiler.compile_str`` does, or ``CompileRanAway`` past a bound."""
    from iree.compiler.tools.core import CompilerOptions, build_compile_command_line
    from iree.compiler.tools.debugging import TempFileSaver

    options = CompilerOptions(input_type=input_type, target_backends=target_backends, extra_args=extra_args)
    with TempFileSaver.implicit() as tfs:
        command = build_compile_command_line("-", tfs, options)
    payload = mlir.encode("utf-8") if isinstance(mlir, str) else mlir
    try:
        return supervise(command, payload)
    except CompileStalled:
        # A child that stopped using CPU is stuck, not working: a fresh one compiles the
        # same input in its usual time.
        metrics.counter_add("iree_compile_stalled")
        return supervise(command, payload)


def supervise(command: list[str], payload: bytes | None, stall_seconds: float | None = None) -> bytes:
    """Run ``command`` with ``payload`` on stdin and return its stdout, within the bounds.

    Raises ``CompileRanAway`` past the time or memory bound, ``CompileStalled``
    (also a ``CompileRanAway``) when the child used no CPU for ``stall_seconds``
    (default ``_STALL``), ``CompilerToolError`` when it fails.
    """
    from iree.compiler.tools.binaries import CompilerToolError

    seconds = int(lazy_config.get("LAZY_IREE_COMPILE_TIMEOUT"))
    stall = _STALL if stall_seconds is None else stall_seconds
    limit_mib = memory_bound_mib()
    start = time.monotonic()
    # The input comes from a file, not a pipe: ``communicate(payload, timeout)`` retried after a
    # timeout writes the rest of the input only when given it again, and a retry without it left
    # a compiler that had not read its whole module in the first poll waiting for it forever (CI's
    # 120 s stalls; test_a_child_slow_to_read_its_input_gets_all_of_it).
    with tempfile.TemporaryFile() as source:
        if payload:
            source.write(payload)
            source.seek(0)
        proc = subprocess.Popen(command, stdin=source if payload else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    cpu, busy = None, start
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=_POLL)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            elapsed = now - start
            if seconds and elapsed > seconds:
                raise CompileRanAway(f"iree-compile ran past {seconds} s (LAZY_IREE_COMPILE_TIMEOUT)")
            rss = _resident_mib(proc.pid)
            if rss is not None and rss > limit_mib:
                raise CompileRanAway(f"iree-compile grew past {limit_mib} MiB of memory in {elapsed:.0f} s "
                                     "(LAZY_IREE_COMPILE_MEMORY)")
            used = _cpu_seconds(proc.pid)
            if used is not None and used != cpu:
                cpu, busy = used, now
            elif used is not None and stall and now - busy > stall:
                raise CompileStalled(f"iree-compile used no CPU for {now - busy:.0f} s (stuck)")
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise CompilerToolError(subprocess.CompletedProcess(command, proc.returncode, out, err))
    return out


def _cpu_seconds(pid: int) -> float | None:
    """CPU seconds process ``pid`` has used (all its threads), or None where ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime
    except (OSError, ValueError, IndexError):
        return None


def _resident_mib(pid: int) -> int | None:
    """The resident memory of process ``pid`` in MiB, or None where ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
