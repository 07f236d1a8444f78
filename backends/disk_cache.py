"""A persistent, process-safe cache of compiled artifacts, usable by any backend.

Compiling a graph costs from a fraction of a second to minutes; a training
script run twice, or a test suite run again, should not pay it twice. Any
backend can keep its executables (bytes) here under a key that covers
everything deciding the compiled code: ``DiskCache.key(mlir, target, flags,
compiler_version)``.

Where: ``$LAZY_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/lazy-mlir`` or
``~/.cache/lazy-mlir``; one subfolder per namespace (``iree``, ...).
``LAZY_DISK_CACHE=0`` turns it off.

Safety:
* writes go to a temporary file in the same folder, then ``os.replace``, so a
  reader sees either no entry or a whole one, and concurrent writers of the
  same key just replace one complete entry with an identical one;
* every entry carries a SHA-256 of its payload and its length, so a corrupt
  or truncated file (disk full, a crash mid-write, bit rot) is detected,
  deleted and reported as a miss: the caller recompiles, never runs bad code.

Counters: ``disk_cache_hit``, ``disk_cache_miss``, ``disk_cache_corrupt``,
``disk_cache_write`` and ``disk_cache_write_error`` (``counters`` names
another prefix, e.g. ``graph_cache`` for ``MlirBackend``'s graph-keyed
entries, so each cache level can be told apart).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile

from lazy_core import metrics

_MAGIC = b"LAZYMLIR-CACHE-1\n"
_HEADER = struct.Struct("<32sQ")  # sha256 of payload, payload length


def default_dir() -> str:
    """The cache root: ``$LAZY_CACHE_DIR``, else the user's cache folder."""
    from lazy_core import config

    explicit = config.get("LAZY_CACHE_DIR")
    if explicit:
        return os.path.abspath(os.path.expanduser(explicit))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lazy-mlir")


def enabled_by_env() -> bool:
    from lazy_core import config

    return bool(config.get("LAZY_DISK_CACHE"))


class DiskCache:
    """Bytes on disk under content keys. ``get`` never raises for a bad entry."""

    def __init__(self, namespace: str, directory: str | None = None, enabled: bool | None = None,
                 counters: str = "disk_cache") -> None:
        self.namespace = namespace
        self.counters = counters
        self.root = directory or default_dir()
        self.directory = os.path.join(self.root, namespace)
        self.enabled = enabled_by_env() if enabled is None else enabled

    @staticmethod
    def key(*parts: str | bytes) -> str:
        """A hex SHA-256 over ``parts``, each length-prefixed so boundaries matter."""
        h = hashlib.sha256()
        for p in parts:
            b = p.encode() if isinstance(p, str) else p
            h.update(struct.pack("<Q", len(b)))
            h.update(b)
        return h.hexdigest()

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key[:2], key + ".bin")

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``, or None (counted as a miss)."""
        if not self.enabled:
            return None
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                blob = f.read()
        except OSError:
            metrics.counter_add(f"{self.counters}_miss")
            return None
        payload = _unpack(blob)
        if payload is None:
            metrics.counter_add(f"{self.counters}_corrupt")
            metrics.counter_add(f"{self.counters}_miss")
            try:
                os.remove(path)
            except OSError:
                pass
            return None
        metrics.counter_add(f"{self.counters}_hit")
        return payload

    def put(self, key: str, payload: bytes) -> bool:
        """Store ``payload`` atomically; False (and a counter) if the disk refused."""
        if not self.enabled:
            return False
        path = self.path(key)
        tmp = None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".bin", dir=os.path.dirname(path))
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC)
                f.write(_HEADER.pack(hashlib.sha256(payload).digest(), len(payload)))
                f.write(payload)
            os.replace(tmp, path)
            tmp = None
        except OSError:
            metrics.counter_add(f"{self.counters}_write_error")
            return False
        finally:
            if tmp is not None:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
        metrics.counter_add(f"{self.counters}_write")
        return True

    def clear(self) -> None:
        """Delete every entry of this namespace."""
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def _unpack(blob: bytes) -> bytes | None:
    """The payload of a stored entry, or None if it is not intact."""
    start = len(_MAGIC) + _HEADER.size
    if len(blob) < start or not blob.startswith(_MAGIC):
        return None
    digest, length = _HEADER.unpack_from(blob, len(_MAGIC))
    payload = blob[start:]
    if len(payload) != length or hashlib.sha256(payload).digest() != digest:
        return None
    return payload
