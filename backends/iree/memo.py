"""Process-wide memo of compiled and loaded IREE modules and scalar buffers.

lazy_core builds a new backend object on every ``init`` (each test does), and
the executor clears its own cache when the backend changes. Compiled VM
flatbuffers, modules loaded on a device and the device buffers of scalar
parameters are therefore kept here, keyed by content, for the whole process.
Bounded LRUs; thread-safe (the executor's worker thread and the tracing
thread both reach them).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import torch

from .runtime import IreeExecutable

MEMO_SIZE = 512
_lock = threading.Lock()
# Process-wide: cache key -> (vmfb bytes, arguments it may write), and
# (device uri, key) -> loaded executable.
vmfb_memo: OrderedDict[str, tuple[bytes, frozenset[int]]] = OrderedDict()
exe_memo: OrderedDict[tuple[str, str], IreeExecutable] = OrderedDict()
# (device uri, dtype, bytes) -> device buffer of a 0-d tensor.
scalar_memo: OrderedDict[tuple[str, torch.dtype, bytes], Any] = OrderedDict()


def memo_get(memo: OrderedDict, key: Any) -> Any:
    with _lock:
        value = memo.get(key)
        if value is not None:
            memo.move_to_end(key)
        return value


def memo_put(memo: OrderedDict, key: Any, value: Any) -> None:
    with _lock:
        memo[key] = value
        memo.move_to_end(key)
        while len(memo) > MEMO_SIZE:
            memo.popitem(last=False)


def memo_pop(memo: OrderedDict, key: Any) -> None:
    """Forget ``key`` (an entry that turned out unusable)."""
    with _lock:
        memo.pop(key, None)


def clear_memory_caches() -> None:
    """Forget compiled and loaded modules kept in this process (not the disk cache)."""
    with _lock:
        vmfb_memo.clear()
        exe_memo.clear()
        scalar_memo.clear()
