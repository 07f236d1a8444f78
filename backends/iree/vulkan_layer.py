"""Builds and enables lazy-mlir's Vulkan layer before IREE opens a Vulkan instance.

The layer fixes three things between IREE 3.13 and the Vulkan driver:

- host signals in order: IREE's Vulkan queue can signal its wake-up timeline
  semaphore out of order when two threads promote deferred submissions at
  once, and Mesa's lavapipe answers an out-of-order signal by losing the
  device for the rest of the process (``vulkan_monotonic_signals.c`` has the
  details). CI saw it as VK_ERROR_DEVICE_LOST in one test followed by every
  later Vulkan test of that pytest worker failing. The layer makes host
  signals take turns and drops a signal whose value the semaphore already
  passed.
- IEEE floats: IREE's shaders do not declare SignedZeroInfNanPreserve, so the
  driver may assume no infinities or NaNs (lavapipe folded ``x - x`` to 0 for
  x = inf: ``softmax([inf])`` was 1.0, not NaN). The layer adds the execution
  mode to every shader module it sees (``vulkan_float_controls.c``).
- no spinning: IREE's queue completion threads wait for any of several
  timeline semaphores, which lavapipe (Mesa's common sync code) answers by
  polling in a loop without sleeping: each process holding an IREE Vulkan
  device kept two cores busy while idle, which made CI three times slower.
  On lavapipe the layer polls with sleeps of 10 to 500 us instead.

Nothing else is intercepted.

The layer is a small C file, compiled here with the system C compiler (``$CC``
or ``cc``) and the Vulkan headers (Debian: ``libvulkan-dev``) into the cache
folder, once per version of its source. Without a compiler or headers the
backend still runs and warns once that the device may be lost.
``LAZY_IREE_VULKAN_SIGNAL_LAYER=0`` turns the layer off.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

from lazy_core import config

from ..disk_cache import default_dir

LAYER_NAME = "VK_LAYER_LAZY_MLIR_iree_fixes"
#: The layer's sources: its dispatch and the signal fix, and the SPIR-V float-controls rewrite.
_SOURCES = [Path(__file__).with_name(n) for n in ("vulkan_monotonic_signals.c", "vulkan_float_controls.c")]
_LIBRARY = "liblazy_mlir_vk_monotonic_signals.so"
_MANIFEST = "VkLayer_lazy_mlir_iree_fixes.json"


def _manifest() -> dict:
    return {
        "file_format_version": "1.1.2",
        "layer": {
            "name": LAYER_NAME,
            "type": "GLOBAL",
            "library_path": f"./{_LIBRARY}",
            "api_version": "1.3.0",
            "implementation_version": "1",
            "description": "lazy-mlir: IREE's host semaphore signals in order; IEEE floats in its shaders; wait-any without spinning on lavapipe",
            "functions": {
                "vkGetInstanceProcAddr": "lazy_mlir_GetInstanceProcAddr",
                "vkGetDeviceProcAddr": "lazy_mlir_GetDeviceProcAddr",
            },
        },
    }


def _build(folder: Path) -> None:
    """Compile the layer into ``folder`` (created whole by one rename: pytest
    workers and other processes may build at the same moment)."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise RuntimeError("no C compiler (set CC or install gcc)")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=folder.parent))
    try:
        proc = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-o",
             str(staging / _LIBRARY), *map(str, _SOURCES), "-lpthread"],
            capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["(no output)"])[0]
            raise RuntimeError(f"{compiler} failed to build the layer: {first}")
        (staging / _MANIFEST).write_text(json.dumps(_manifest(), indent=1) + "\n")
        try:
            staging.rename(folder)
        except OSError:
            if not (folder / _LIBRARY).exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _prepend(variable: str, value: str) -> None:
    old = os.environ.get(variable, "")
    parts = [p for p in old.split(os.pathsep) if p]
    if value not in parts:
        os.environ[variable] = os.pathsep.join([value, *parts])


@functools.cache
def enable() -> Path | None:
    """Build the layer if needed and tell the Vulkan loader to use it.

    Must run before the process's first Vulkan instance (IREE creates one
    with its driver). Returns the layer library's path, or None (with a
    warning naming the cause) when it is off or cannot be built.
    """
    if not config.get("LAZY_IREE_VULKAN_SIGNAL_LAYER"):
        return None
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _SOURCES)).hexdigest()[:16]
    folder = Path(default_dir()) / "vulkan-layer" / digest
    if not (folder / _LIBRARY).exists():
        try:
            _build(folder)
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            warnings.warn(
                f"lazy-mlir's Vulkan layer is unavailable ({e}); IREE's Vulkan queue may then lose "
                "the device (VK_ERROR_DEVICE_LOST) when two threads wake it at once, and the driver "
                "may drop infinities, NaNs and signed zeros. "
                "Install a C compiler and the Vulkan headers (Debian: gcc libvulkan-dev).",
                RuntimeWarning, stacklevel=3)
            return None
    _prepend("VK_ADD_LAYER_PATH", str(folder))
    _prepend("VK_INSTANCE_LAYERS", LAYER_NAME)
    return folder / _LIBRARY


def _counter(symbol: str) -> int | None:
    """A counter the loaded layer exports, for this process (None: the layer is not loaded)."""
    if not enable.cache_info().currsize:
        return None  # never enabled in this process
    lib = enable()
    if lib is None:
        return None
    try:
        handle = ctypes.CDLL(str(lib), mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError:
        return None  # the loader has not loaded it (no Vulkan instance yet)
    function = getattr(handle, symbol)
    function.restype = ctypes.c_uint64
    return int(function())


def absorbed_signals() -> int | None:
    """How many out-of-order signals the layer dropped in this process (None: not loaded)."""
    return _counter("lazy_mlir_absorbed_signals")


def sleeping_waits() -> int | None:
    """How many of IREE's wait-any calls on lavapipe the layer answered by polling with
    sleeps instead of the driver's spin (None: not loaded)."""
    return _counter("lazy_mlir_sleeping_waits")
