"""The CPU that ``--iree-llvmcpu-target-cpu=host`` really means, for cache keys.

iree-cpu compiles for ``host``: code that may use every instruction of the
CPU it was compiled on. A cache key holding the literal flag would let a
cache shared between machines (an NFS home, a restored CI cache, an image
layer) hand one machine code built for another, which dies with SIGILL. So
keys hold what IREE resolves ``host`` to instead: LLVM's host CPU name and
feature list, exactly as IREE writes them into its
``#hal.executable.target<... cpu = "znver1", cpu_features = "+avx2,...">``.

How: compile a four-line module to the global-optimization phase with the
backend's CPU flags and read the target attribute (about 0.4 s). Asking the
compiler itself, rather than reading /proc/cpuinfo, gives the name and
features LLVM uses (a VM may hide flags; LLVM may not know a new CPU and
fall back to a generic name), so the key changes exactly when the code may.
The answer is remembered per process, and on disk (``DiskCache``
"host-targets") under a fingerprint of /proc/cpuinfo (vendor, family, model,
stepping, model name, flags) and the compiler version, so later processes
skip the compile; where there is no /proc/cpuinfo the compiler is asked
every process.
"""

from __future__ import annotations

import functools
import hashlib
import platform
import re

from ..disk_cache import DiskCache

_HOST_OPTIONS = ("--iree-llvmcpu-target-cpu", "--iree-llvmcpu-target-cpu-features")
_TARGET = re.compile(r'cpu = "(?P<cpu>[^"]*)", cpu_features = "(?P<features>[^"]*)"')
_PROBE = ("func.func @probe(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
          "  %0 = arith.addf %a, %a : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
_CPUINFO_KEYS = ("vendor_id", "cpu family", "model", "model name", "stepping", "flags", "Features",
                 "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "isa", "uarch")


def uses_host(flags: tuple[str, ...]) -> bool:
    """Whether ``flags`` leave the CPU or its features to the host."""
    return any(f.split("=", 1)[0] in _HOST_OPTIONS and f.split("=", 1)[-1].strip() == "host" for f in flags)


def target_key(flags: tuple[str, ...], compiler_version: str, cache: DiskCache | None = None) -> str:
    """``cpu=NAME;features=...`` when ``flags`` target the host, else "" (the flags say it all).

    ``cache`` (the backend's own) says where the answer is remembered on disk.
    """
    if not uses_host(flags):
        return ""
    cpu_flags = tuple(f for f in flags if f.split("=", 1)[0] in _HOST_OPTIONS)
    root, enabled = (cache.root, cache.enabled) if cache is not None else (None, None)
    return _resolved(cpu_flags, compiler_version, root, enabled)


@functools.cache
def _resolved(cpu_flags: tuple[str, ...], compiler_version: str, root: str | None, enabled: bool | None) -> str:
    fingerprint = _cpuinfo_fingerprint()
    cache = key = None
    if fingerprint:
        cache = DiskCache("host-targets", directory=root, enabled=enabled, counters="host_target_cache")
        key = DiskCache.key("host-target-1", fingerprint, compiler_version, *cpu_flags)
        hit = cache.get(key)
        if hit is not None:
            return hit.decode()
    answer = ask_compiler(cpu_flags)
    if cache is not None and key is not None:
        cache.put(key, answer.encode())
    return answer


def ask_compiler(cpu_flags: tuple[str, ...]) -> str:
    """What IREE's llvm-cpu target makes of ``cpu_flags`` here, as ``cpu=...;features=...``."""
    import iree.compiler as ic

    text = ic.compile_str(_PROBE, target_backends=["llvm-cpu"],
                          extra_args=[*cpu_flags, "--compile-to=global-optimization"],
                          output_format=ic.OutputFormat.MLIR_TEXT)
    text = text.decode() if isinstance(text, bytes) else text
    m = _TARGET.search(text)
    if m is None:  # an IREE that prints its target differently: never share code across machines
        raise RuntimeError("could not read the resolved llvm-cpu target from iree-compile's output")
    return f"cpu={m.group('cpu')};features={m.group('features')}"


def _cpuinfo_fingerprint() -> str:
    """A digest of what identifies this CPU in /proc/cpuinfo (first processor), or "" if unreadable."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return ""
    first = text.split("\n\n", 1)[0]
    lines = [ln for ln in first.splitlines() if ln.split(":", 1)[0].strip() in _CPUINFO_KEYS]
    if not lines:
        return ""
    return hashlib.sha256("\n".join([platform.machine(), *lines]).encode()).hexdigest()
