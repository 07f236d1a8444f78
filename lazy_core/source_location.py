"""The user's file:line for each traced op.

Compiler errors and fallback reports are only useful when they name the
user's code, not a frame inside torch or this package. Walking the stack on
every op is the main cost of this, so the walk skips internal frames by
filename with a per-filename cache, stops at the torch frame the last walk
passed while that frame still runs (every op of one ``opt.step()`` or
``loss.backward()``), and can be switched off with ``LAZY_SOURCE_LOCATIONS=0``.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

import torch

from . import config


class SourceLocation(NamedTuple):
    """Where in user code a node was made."""

    filename: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.filename}:{self.line}"


_ENABLED = bool(config.get("LAZY_SOURCE_LOCATIONS"))
_TORCH_DIR = os.path.dirname(torch.__file__)
_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_internal_cache: dict[str, bool] = {}


def _is_internal(filename: str) -> bool:
    cached = _internal_cache.get(filename)
    if cached is None:
        cached = (
            filename.startswith(_TORCH_DIR)
            or filename.startswith(_PKG_DIR)
            or filename.startswith("<frozen")
            or os.sep + "contextlib.py" in filename
            or os.sep + "functools.py" in filename
        )
        _internal_cache[filename] = cached
    return cached


def set_enabled(enabled: bool) -> None:
    """Turn location capture on or off at run time."""
    global _ENABLED
    _ENABLED = enabled


def enabled() -> bool:
    return _ENABLED


# (code object, line) -> SourceLocation: one shared object per user line, so a
# traced op costs a dict hit instead of building a tuple (and graphs of
# thousands of nodes do not hold thousands of equal locations).
_loc_cache: dict[tuple, SourceLocation] = {}
_LOC_CACHE_LIMIT = 1 << 16


#: Frames whose code object may be resumed from another caller (generators, coroutines): the
#: frames above one are not fixed while it lives, so it never keys ``_last``.
_RESUMABLE = 0x20 | 0x80 | 0x100 | 0x200
#: [frame, location]: the first frame inside torch (not this package) that the last walk
#: passed, and the user location above it. While that frame executes, every frame above it
#: is suspended at the same line, so an op traced under it (each op of one ``opt.step()``
#: or ``loss.backward()``) has the same location: one identity test instead of a walk.
#: The frame is held (a dead frame's id could be reused), and dropped at every barrier
#: (``forget_frames``) so that the tensors in its locals do not count as live there.
_last: list = [None, None]


_USER, _TORCH, _OWN = 0, 1, 2
#: filename -> _USER, _TORCH (internal, not this package: torch, contextlib...) or _OWN.
_kind_cache: dict[str, int] = {}


def _kind(filename: str) -> int:
    kind = _kind_cache.get(filename)
    if kind is None:
        inside = _internal_cache.get(filename)
        if inside is None:
            inside = _is_internal(filename)
        kind = _kind_cache[filename] = _OWN if filename.startswith(_PKG_DIR) else _TORCH if inside else _USER
    return kind


def forget_frames() -> None:
    """Drop the frame ``current`` holds (at barriers, before live tensors are counted)."""
    _last[0] = _last[1] = None


def current(skip: int = 2) -> SourceLocation | None:
    """The innermost frame outside torch and lazy_core, or None if disabled."""
    if not _ENABLED:
        return None
    try:
        frame = sys._getframe(skip)
    except ValueError:
        return None
    kinds = _kind_cache
    anchor = None
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        kind = kinds.get(name)
        if kind is None:
            kind = _kind(name)
        if kind == _USER:
            key = (code, frame.f_lineno)
            loc = _loc_cache.get(key)
            if loc is None:
                if len(_loc_cache) >= _LOC_CACHE_LIMIT:
                    _loc_cache.clear()
                loc = _loc_cache[key] = SourceLocation(name, key[1], code.co_name)
            if anchor is not None:
                _last[0], _last[1] = anchor, loc
            return loc
        if kind == _TORCH and anchor is None:
            if frame is _last[0]:
                return _last[1]
            if not code.co_flags & _RESUMABLE:
                anchor = frame
        frame = frame.f_back
    return None


def user_stack(limit: int = 8) -> list[SourceLocation]:
    """The user's frames (innermost first), for barrier and error reports."""
    out: list[SourceLocation] = []
    frame = sys._getframe(1)
    while frame is not None and len(out) < limit:
        code = frame.f_code
        if not _is_internal(code.co_filename):
            out.append(SourceLocation(code.co_filename, frame.f_lineno, code.co_name))
        frame = frame.f_back
    return out
