"""The persistent compilation cache: keys, atomic writes, corruption, two processes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from conftest import ROOT, use_backend

import lazy_core
from lazy_core import metrics
from lazy_mlir.backends.disk_cache import DiskCache, default_dir
from lazy_mlir.backends.iree import IreeBackend
from lazy_mlir.backends.iree import backend as iree_backend

# -- the store itself --------------------------------------------------------------------------


def test_put_get_and_counters(tmp_path) -> None:
    cache = DiskCache("t", directory=str(tmp_path), enabled=True)
    key = DiskCache.key("module", "llvm-cpu", "--flag")
    metrics.reset()
    assert cache.get(key) is None
    assert cache.put(key, b"\x00payload\xff")
    assert cache.get(key) == b"\x00payload\xff"
    assert metrics.counter("disk_cache_miss") == 1 and metrics.counter("disk_cache_hit") == 1
    # Written atomically: the entry and no temporary file are left behind.
    files = [f for _, _, fs in os.walk(tmp_path) for f in fs]
    assert files == [os.path.basename(cache.path(key))]


def test_key_covers_every_part_and_their_boundaries() -> None:
    assert DiskCache.key("ab", "c") != DiskCache.key("a", "bc")
    assert DiskCache.key("m", "llvm-cpu") != DiskCache.key("m", "vulkan-spirv")
    assert DiskCache.key("m", "x") == DiskCache.key(b"m", "x")


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "garbage"])
def test_damaged_entry_is_discarded(tmp_path, damage: str) -> None:
    cache = DiskCache("t", directory=str(tmp_path), enabled=True)
    key = DiskCache.key("x")
    payload = os.urandom(4096)
    cache.put(key, payload)
    path = cache.path(key)
    blob = bytearray(open(path, "rb").read())
    if damage == "flip":
        blob[-100] ^= 0x40
    elif damage == "truncate":
        blob = blob[:-1000]
    elif damage == "empty":
        blob = bytearray()
    else:
        blob = bytearray(b"not a cache entry at all")
    with open(path, "wb") as f:
        f.write(blob)
    metrics.reset()
    assert cache.get(key) is None
    assert metrics.counter("disk_cache_corrupt") == 1 and metrics.counter("disk_cache_miss") == 1
    assert not os.path.exists(path)
    cache.put(key, payload)
    assert cache.get(key) == payload


def test_environment_moves_and_disables_it(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("LAZY_CACHE_DIR", str(tmp_path / "here"))
    assert default_dir() == str(tmp_path / "here")
    assert DiskCache("iree").directory == str(tmp_path / "here" / "iree")
    monkeypatch.delenv("LAZY_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_dir() == str(tmp_path / "xdg" / "lazy-mlir")
    monkeypatch.setenv("LAZY_DISK_CACHE", "0")
    off = DiskCache("t", directory=str(tmp_path))
    assert not off.enabled and not off.put("k" * 64, b"x") and off.get("k" * 64) is None
    assert not os.path.exists(os.path.join(str(tmp_path), "t"))


def test_unwritable_directory_is_not_fatal(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder should be")
    cache = DiskCache("t", directory=str(blocker), enabled=True)
    metrics.reset()
    assert not cache.put(DiskCache.key("x"), b"data")
    assert metrics.counter("disk_cache_write_error") == 1


# -- with the IREE backend ---------------------------------------------------------------------


def test_corrupt_executable_is_recompiled_and_correct(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Both levels (the graph-keyed entry and IREE's MLIR-keyed vmfb) detect a
    flipped bit, drop the entry and recompile; the rewritten entries are good."""
    monkeypatch.setenv("LAZY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZY_STRICT", "1")
    x, w = torch.randn(5, 7), torch.randn(7, 3)

    def run() -> torch.Tensor:
        iree_backend.clear_memory_caches()
        use_backend("iree-cpu")
        return ((x.to("lazy") @ w.to("lazy")).sigmoid() * 3).cpu()

    ref = (x @ w).sigmoid() * 3
    torch.testing.assert_close(run(), ref)
    assert metrics.counter("iree_compile") == 1 and metrics.counter("disk_cache_write") == 1
    assert metrics.counter("graph_cache_write") == 1
    torch.testing.assert_close(run(), ref)
    # The graph-keyed entry answers: no lowering, no read of the MLIR-keyed one.
    assert metrics.counter("iree_compile") == 0 and metrics.counter("graph_cache_hit") == 1
    assert "lower" not in metrics.timers() and metrics.counter("disk_cache_hit") == 0
    entries = sorted(os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs
                     if os.path.relpath(d, tmp_path).split(os.sep)[0] != "host-targets")
    assert sorted(os.path.relpath(e, tmp_path).split(os.sep)[0] for e in entries) == ["graphs", "iree"]
    for entry in entries:  # a bit flips inside each
        with open(entry, "r+b") as f:
            f.seek(os.path.getsize(entry) // 2)
            byte = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([byte[0] ^ 0x01]))
    torch.testing.assert_close(run(), ref)
    assert metrics.counter("graph_cache_corrupt") == 1 and metrics.counter("disk_cache_corrupt") == 1
    assert metrics.counter("iree_compile") == 1
    torch.testing.assert_close(run(), ref)  # and the rewritten entries are good again
    assert metrics.counter("graph_cache_hit") == 1 and metrics.counter("iree_compile") == 0


def test_cache_key_ignores_source_lines(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """The same graph traced from another line of code reuses the executable."""
    monkeypatch.setenv("LAZY_CACHE_DIR", str(tmp_path))
    backend = use_backend("iree-cpu")
    x = torch.randn(4).to("lazy")
    a = (x * 5).exp()
    a.cpu()
    first = backend.lower(lazy_core.executor().last_graph())
    b = (x * 5).exp()  # different line
    b.cpu()
    second = backend.lower(lazy_core.executor().last_graph())
    assert first.mlir != second.mlir
    assert backend.compile_key(first) == backend.compile_key(second)
    assert IreeBackend("iree-cpu", flags=["--iree-opt-level=O1"]).compile_key(first) != backend.compile_key(first)


_SCRIPT = textwrap.dedent(
    """
    import json, sys, torch
    sys.path.insert(0, {root!r})
    import lazy_core
    from lazy_core import metrics

    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        losses = []
        for step in range(4):
            x, y = torch.randn(5, 6, generator=g), torch.randn(5, 3, generator=g)
            loss = ((model(x.to(device))[:, 0] - y.to(device)[:, 1]) ** 2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if device == "lazy":
                lazy_core.mark_step()
            losses.append(loss)
        return [float(v.item()) for v in losses], [p.detach().cpu() for p in model.parameters()]

    lazy_core.init({backend!r})
    losses, params = train("lazy")
    ref_losses, ref_params = train("cpu")
    out = dict(losses=losses, ref_losses=ref_losses,
               max_param_diff=max(float((a - b).abs().max()) for a, b in zip(params, ref_params)),
               lowerings=metrics.timers().get("lower", {{}}).get("count", 0),
               **{{k: metrics.counter(k) for k in
                  ("iree_compile", "disk_cache_hit", "disk_cache_miss", "graph_cache_hit", "graph_cache_miss",
                   "cache_miss", "fallback::compile_error", "compile", "persistent_cache_hit")}})
    print("RESULT" + json.dumps(out))
    """
)


@pytest.mark.parametrize("backend_name", ["reference", "iree-cpu"])
def test_second_process_lowers_and_compiles_nothing(tmp_path, backend_name: str) -> None:
    """A second process with the same cache folder finds every graph by its
    stable hash: no lowering, no compiler, and results equal eager PyTorch's."""
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT.format(root=ROOT, backend=backend_name))
    env = dict(os.environ, LAZY_CACHE_DIR=str(tmp_path / "cache"), LAZY_STRICT="1")
    env.pop("LAZY_DISK_CACHE", None)
    results = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
        results.append(json.loads(line[len("RESULT"):]))
    first, second = results
    assert first["lowerings"] == first["cache_miss"] >= 1 and first["graph_cache_miss"] == first["cache_miss"]
    assert second["lowerings"] == 0
    assert second["graph_cache_hit"] == second["cache_miss"] == first["cache_miss"]
    assert second["graph_cache_miss"] == 0 and second["iree_compile"] == 0 and second["disk_cache_miss"] == 0
    assert first["fallback::compile_error"] == second["fallback::compile_error"] == 0
    # Loads are not compiles (XLA's UncachedCompile vs PersistentCacheHit).
    assert first["compile"] == first["cache_miss"] and first["persistent_cache_hit"] == 0
    assert second["compile"] == 0 and second["persistent_cache_hit"] == first["compile"]
    for r in results:
        torch.testing.assert_close(r["losses"], r["ref_losses"], rtol=1e-5, atol=1e-6)
        assert r["max_param_diff"] < 1e-5
    assert second["losses"] == first["losses"]


# -- issue 14.6: sharing between machines, size, stale files, unloadable entries, modes ------------


def test_key_holds_the_cpu_that_host_resolves_to(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """``--iree-llvmcpu-target-cpu=host`` is keyed as IREE's resolved CPU name and features, so a
    cache shared with a machine whose CPU differs never hands it this machine's code (SIGILL)."""
    from lazy_mlir.backends.iree import host_target

    cache = DiskCache("iree", directory=str(tmp_path), enabled=True)
    here = IreeBackend("iree-cpu", disk_cache=cache)
    identity = here.target_identity()
    cpu = host_target.ask_compiler(("--iree-llvmcpu-target-cpu=host",))
    assert cpu in identity and "cpu=host" not in cpu and "+" in cpu.split("features=")[1]
    assert "driver=local-task" in identity
    # Pinned CPUs need no resolution: the flags say it all.
    assert host_target.target_key(("--iree-llvmcpu-target-cpu=generic",), "v") == ""

    use_backend("iree-cpu")
    x = torch.randn(4).to("lazy")
    (x * 3).cpu()
    computation = here.lower(lazy_core.executor().last_graph())
    # Another machine: same flags, same compiler, another CPU (as IREE would resolve it there).
    host_target._resolved.cache_clear()
    monkeypatch.setattr(host_target, "_cpuinfo_fingerprint", lambda: "another machine")
    monkeypatch.setattr(host_target, "ask_compiler", lambda flags: "cpu=skylake-avx512;features=+avx512f")
    there = IreeBackend("iree-cpu", disk_cache=cache)
    assert there.config.compile_flags == here.config.compile_flags
    assert there.compile_key(computation) != here.compile_key(computation)
    assert there.persistent_key() != here.persistent_key()
    host_target._resolved.cache_clear()


def test_host_resolution_is_remembered_on_disk(tmp_path) -> None:
    """A second process reads the resolved CPU from the cache folder instead of asking the compiler."""
    from lazy_mlir.backends.iree import host_target

    cache = DiskCache("iree", directory=str(tmp_path), enabled=True)
    flags = ("--iree-llvmcpu-target-cpu=host",)
    host_target._resolved.cache_clear()
    metrics.reset()
    first = host_target.target_key(flags, "test-version", cache)
    assert metrics.counter("host_target_cache_write") == 1
    host_target._resolved.cache_clear()  # a new process
    assert host_target.target_key(flags, "test-version", cache) == first
    assert metrics.counter("host_target_cache_hit") == 1
    host_target._resolved.cache_clear()


def test_size_bound_evicts_least_recently_used(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("LAZY_CACHE_MAX_BYTES", str(10 * 1100))
    cache = DiskCache("t", directory=str(tmp_path), enabled=True)
    keys = [DiskCache.key(str(i)) for i in range(10)]
    for n, k in enumerate(keys[:9]):
        cache.put(k, bytes(1000))
        os.utime(cache.path(k), (1000 + n, 1000 + n))  # written in this order, long ago
    assert cache.get(keys[0]) == bytes(1000)  # used now: the most recent
    metrics.reset()
    cache.put(keys[9], bytes(1000))
    cache.put(DiskCache.key("big"), bytes(2000))
    sizes = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp_path) for f in fs)
    assert sizes <= 10 * 1100
    assert metrics.counter("disk_cache_evict") >= 2
    assert cache.get(keys[0]) is not None  # recently read
    assert cache.get(keys[1]) is None and cache.get(keys[2]) is None  # the oldest went first
    assert cache.get(keys[9]) is not None


def test_max_bytes_variable_is_checked(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from lazy_mlir.backends.disk_cache import DEFAULT_MAX_BYTES, max_bytes

    monkeypatch.delenv("LAZY_CACHE_MAX_BYTES", raising=False)
    assert max_bytes() == DEFAULT_MAX_BYTES == 2 << 30
    for text, value in [("512M", 512 << 20), ("1GiB", 1 << 30), ("4096", 4096), ("0", 0)]:
        monkeypatch.setenv("LAZY_CACHE_MAX_BYTES", text)
        assert max_bytes() == value
    monkeypatch.setenv("LAZY_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="LAZY_CACHE_MAX_BYTES"):
        DiskCache("t", directory=str(tmp_path))


def test_stale_temporary_files_are_removed(tmp_path) -> None:
    """A writer that died mid-write left ``.tmp-*``; old ones go at the next write, fresh ones stay."""
    cache = DiskCache("t", directory=str(tmp_path), enabled=True)
    key = DiskCache.key("x")
    folder = os.path.dirname(cache.path(key))
    os.makedirs(folder)
    stale, fresh = os.path.join(folder, ".tmp-dead.bin"), os.path.join(folder, ".tmp-writing.bin")
    for p in (stale, fresh):
        with open(p, "wb") as f:
            f.write(b"half an entry")
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    cache.put(key, b"payload")
    assert not os.path.exists(stale) and os.path.exists(fresh)
    assert cache.get(key) == b"payload"


def test_entries_are_readable_as_the_umask_allows(tmp_path) -> None:
    """Not mkstemp's 0600: another user sharing the cache can read it (0644 under umask 022)."""
    from lazy_mlir.backends.disk_cache import _UMASK

    cache = DiskCache("t", directory=str(tmp_path), enabled=True)
    key = DiskCache.key("x")
    cache.put(key, b"payload")
    assert stat.S_IMODE(os.stat(cache.path(key)).st_mode) == 0o666 & ~_UMASK
    if _UMASK == 0o022:
        assert stat.S_IMODE(os.stat(cache.path(key)).st_mode) == 0o644


def test_intact_entries_that_fail_to_load_are_replaced(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """An entry with a valid checksum that cannot be loaded (another layout, a module the runtime
    refuses) is deleted and recompiled once; the next run loads the new entries without a fallback."""
    monkeypatch.setenv("LAZY_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LAZY_STRICT", "1")
    x, w = torch.randn(5, 7), torch.randn(7, 3)

    def run() -> torch.Tensor:
        iree_backend.clear_memory_caches()
        use_backend("iree-cpu")
        return ((x.to("lazy") @ w.to("lazy")).tanh() - 1).cpu()

    ref = (x @ w).tanh() - 1
    torch.testing.assert_close(run(), ref)
    for namespace, junk in (("graphs", b"\x00\x00\x00\x00\x00\x00\x00\x00junk"), ("iree", b"0;\nnot a vm module")):
        store = DiskCache(namespace, directory=str(tmp_path), enabled=True)
        for _, _, files in os.walk(tmp_path / namespace):
            for name in files:
                store.put(name[:-len(".bin")], junk)  # a valid checksum over bytes that do not load
    torch.testing.assert_close(run(), ref)
    assert metrics.counter("graph_cache_load_error") == 1 and metrics.counter("iree_cached_module_load_error") == 1
    assert metrics.counter("iree_compile") == 1
    torch.testing.assert_close(run(), ref)
    assert metrics.counter("graph_cache_hit") == 1 and metrics.counter("graph_cache_load_error") == 0
    assert metrics.counter("iree_compile") == 0


_WORKER = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from lazy_mlir.backends.disk_cache import DiskCache
    cache = DiskCache("t", directory={directory!r}, enabled=True)
    for i in range(150):
        k = DiskCache.key(str(i % 20))
        payload = (str(i % 20) * 400).encode()
        got = cache.get(k)
        assert got is None or got == payload, (i, len(got))
        assert cache.put(k, payload)
    print("OK")
    """
)


def test_several_processes_share_a_small_cache(tmp_path) -> None:
    """Four processes writing, reading and evicting the same keys at once: every read is whole."""
    script = tmp_path / "worker.py"
    script.write_text(_WORKER.format(root=ROOT, directory=str(tmp_path / "cache")))
    env = dict(os.environ, LAZY_CACHE_MAX_BYTES="20000")
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0 and out.strip() == "OK", err[-2000:]
    leftovers = [f for _, _, fs in os.walk(tmp_path / "cache") for f in fs if f.startswith(".tmp-")]
    assert leftovers == []
