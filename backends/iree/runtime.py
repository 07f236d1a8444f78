"""One IREE runtime device per URI, shared by every backend instance in the process.

Opening a device (a Vulkan instance, a CUDA context, a CPU task pool) is
costly and some drivers dislike being opened repeatedly, while lazy_core
builds a fresh backend object on every ``init``. So devices live here,
keyed by URI, for the life of the process; backends borrow them.

``IreeExecutable`` is one compiled module loaded into a VM context on such a
device, called with buffer views directly (no per-call reflection or numpy
packing): arguments in, buffer views out, nothing copied to the host.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence

import iree.runtime as rt

from . import vulkan_layer

# Devices, loaded modules and the device buffers of live lazy tensors are
# process-lifetime objects here; Python does not free them before the
# extension unloads, and nanobind would list each one as "leaked" at exit.
# IREE's runtime exposes this switch for exactly that situation.
try:
    from iree._runtime_libs._runtime import disable_leak_checker

    disable_leak_checker()
except ImportError:  # pragma: no cover - other runtime builds
    pass

_lock = threading.Lock()
_devices: dict[str, IreeDevice] = {}
_parsed: set[str] = set()


def prepare_driver(driver: str) -> None:
    """What must be in place before a driver's first instance: runtime flags,
    and for Vulkan lazy-mlir's layer (``vulkan_layer``: signal order, IEEE floats)."""
    if driver == "vulkan":
        vulkan_layer.enable()
    _parse_runtime_flags(driver)


def _parse_runtime_flags(driver: str) -> None:
    """Runtime flags, given once per process before the first device of a driver.

    The CPU task pool gets one worker per usable core (IREE's default counts
    physical cores only, half of them on an SMT machine);
    ``LAZY_IREE_RUNTIME_FLAGS`` adds any other runtime flag and may override it.
    """
    flags = []
    if driver.startswith("local-task") and "local-task" not in _parsed:
        _parsed.add("local-task")
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cores = os.cpu_count() or 1
        flags.append(f"--task_topology_group_count={max(1, cores)}")
    if flags or "env" not in _parsed:
        _parsed.add("env")
        flags += os.environ.get("LAZY_IREE_RUNTIME_FLAGS", "").split()  # last, so the user wins
    if flags:
        rt.flags.parse_flags(*flags)


class IreeDevice:
    """A HAL device plus the VM instance and HAL module that programs on it share."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.driver_name = uri.split("://", 1)[0].split(":", 1)[0]
        prepare_driver(self.driver_name)
        self.instance = rt.VmInstance()
        self.hal_device = rt.get_device(uri)
        self.hal_module = rt.create_hal_module(self.instance, self.hal_device)
        self.allocator = self.hal_device.allocator

    def load(self, vmfb: bytes, func_name: str) -> IreeExecutable:
        return IreeExecutable(self, vmfb, func_name)

    def describe(self) -> str:
        return f"{self.uri}"


def get_device(uri: str) -> IreeDevice:
    """The process-wide device for ``uri``, opened on first use."""
    with _lock:
        dev = _devices.get(uri)
        if dev is None:
            dev = IreeDevice(uri)
            _devices[uri] = dev
        return dev


def probe(driver: str, uri: str) -> str | None:
    """None if ``uri`` can be opened here, else a sentence naming what is missing."""
    try:
        prepare_driver(driver)
        drv = rt.get_driver(driver)
    except Exception as e:  # the driver's user-space library is absent
        return f"IREE {driver} driver unavailable ({_first_line(e)})"
    try:
        found = drv.query_available_devices()
    except Exception as e:
        return f"no {driver} device: {_first_line(e)}"
    if not found:
        return f"no {driver} device present (the driver found none)"
    try:
        get_device(uri)
    except Exception as e:
        return f"cannot open IREE device {uri!r}: {_first_line(e)}"
    return None


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class IreeExecutable:
    """A loaded vmfb: call ``run(buffer_views)`` to get result buffer views."""

    def __init__(self, device: IreeDevice, vmfb: bytes, func_name: str) -> None:
        self.device = device
        self.func_name = func_name
        self.module = rt.VmModule.copy_buffer(device.instance, vmfb)
        self.context = rt.VmContext(device.instance, modules=[device.hal_module, self.module])
        fn = self.module.lookup_function(func_name)
        if fn is None:
            raise RuntimeError(f"compiled IREE module has no function {func_name!r}")
        self.function = fn

    def run(self, args: Sequence[rt.HalBufferView], n_results: int) -> list[rt.HalBufferView]:
        arg_list = rt.VmVariantList(len(args))
        for bv in args:
            arg_list.push_ref(bv)
        ret_list = rt.VmVariantList(max(1, n_results))
        self.context.invoke(self.function, arg_list, ret_list)
        return [ret_list.get_as_object(i, rt.HalBufferView) for i in range(len(ret_list))]
