"""A persistent, process-safe cache of compiled artifacts, usable by any backend.

Compiling a graph costs from a fraction of a second to minutes; a training
script run twice, or a test suite run again, should not pay it twice. Any
backend can keep its executables (bytes) here under a key that covers
everything deciding the compiled code: ``DiskCache.key(mlir, target, flags,
compiler_version)``.

Where: ``$LAZY_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/lazy-mlir`` or
``~/.cache/lazy-mlir``; one subfolder per namespace (``iree``, ...).
``LAZY_DISK_CACHE=0`` turns it off.

Size: the whole cache folder (every namespace) is kept under
``LAZY_CACHE_MAX_BYTES`` (default 2 GiB, suffixes K/M/G allowed, ``0`` for
no bound). After each write, the least recently used entries go first until
the folder is back under 90% of the bound; a hit refreshes its entry's mtime,
which is what "recently used" means (atime is often off). The same pass
removes temporary files older than ten minutes: a writer that died mid-write
left them.

Safety:
* writes go to a temporary file in the same folder, then ``os.replace``, so a
  reader sees either no entry or a whole one, and concurrent writers of the
  same key just replace one complete entry with an identical one;
* every entry carries a SHA-256 of its payload and its length, so a corrupt
  or truncated file (disk full, a crash mid-write, bit rot) is detected,
  deleted and reported as a miss: the caller recompiles, never runs bad code;
* an intact entry that its user cannot load (``discard``) is deleted too, so
  the next run compiles and stores a good one instead of failing again;
* entries are readable by others as the umask allows (0644 under the usual
  022), so one cache can serve several users; a user who may not write it
  just counts write errors;
* removing an entry another process is reading is harmless (POSIX keeps an
  open file readable), and every removal tolerates a file already gone.

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
import time

from lazy_core import config, metrics

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


#: Default bound of the cache folder's size.
DEFAULT_MAX_BYTES = 2 << 30
#: Temporary files older than this (seconds) belong to a writer that died.
STALE_TMP_SECONDS = 600
_TMP_PREFIX = ".tmp-"
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def max_bytes() -> int:
    """``LAZY_CACHE_MAX_BYTES`` (bytes, or with a K/M/G/T suffix; 0: unbounded); default 2 GiB.

    The one place this variable is read, so it can move to a central parser.
    """
    text = str(config.get("LAZY_CACHE_MAX_BYTES")).strip()
    if not text:
        return DEFAULT_MAX_BYTES
    number, unit = text.upper().removesuffix("B").removesuffix("I"), ""
    if number[-1:].isalpha():
        number, unit = number[:-1], number[-1]
    try:
        value = int(number) * _SUFFIXES[unit] if number.isdigit() else -1
    except KeyError:
        value = -1
    if value < 0:
        raise ValueError(f"LAZY_CACHE_MAX_BYTES={text!r}: expected a size in bytes such as 2147483648, "
                         "2G or 512M (0: no bound)")
    return value


def _read_umask() -> int:
    """The process umask, without the race of setting it (Linux reports it in /proc)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)  # once, at import, before any thread could create files
    os.umask(mask)
    return mask


_UMASK = _read_umask()


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
        self.max_bytes = max_bytes()

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
        try:
            os.utime(path)  # recently used: evicted last
        except OSError:
            pass  # a cache this user may only read
        return payload

    def discard(self, key: str) -> None:
        """Delete ``key``'s entry: it is intact but its user could not load it.

        The caller then compiles and ``put``s a good one, so the next run
        loads that instead of failing (and falling back) on the same entry.
        """
        metrics.counter_add(f"{self.counters}_discard")
        try:
            os.remove(self.path(key))
        except OSError:
            pass

    def put(self, key: str, payload: bytes) -> bool:
        """Store ``payload`` atomically; False (and a counter) if the disk refused."""
        if not self.enabled:
            return False
        path = self.path(key)
        tmp = None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, suffix=".bin", dir=os.path.dirname(path))
            with os.fdopen(fd, "wb") as f:
                # mkstemp makes 0600; entries are as readable as any file this user makes.
                os.fchmod(f.fileno(), 0o666 & ~_UMASK)
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
        self.maintain()
        return True

    def maintain(self) -> None:
        """Remove stale temporary files, then the least recently used entries over ``max_bytes``.

        Walks the whole cache folder (all namespaces share the bound). Runs
        after each write, which follows a compile that took far longer.
        """
        now = time.time()
        entries: list[tuple[float, int, str]] = []
        for folder, _, files in os.walk(self.root):
            for name in files:
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue  # removed meanwhile by another process
                if name.startswith(_TMP_PREFIX):
                    if now - st.st_mtime > STALE_TMP_SECONDS:
                        _remove(path, f"{self.counters}_stale_tmp_removed")
                elif name.endswith(".bin"):
                    entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        if not self.max_bytes or total <= self.max_bytes:
            return
        target = self.max_bytes * 9 // 10
        for _, size, path in sorted(entries):
            if total <= target:
                break
            if _remove(path, f"{self.counters}_evict"):
                total -= size

    def clear(self) -> None:
        """Delete every entry of this namespace."""
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)


def _remove(path: str, counter: str) -> bool:
    try:
        os.remove(path)
    except OSError:
        return False  # gone already, or not ours to remove
    metrics.counter_add(counter)
    return True


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
