"""One parser for every LAZY_* variable, and the small environment failures of issue 14 item 9."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import pytest
import torch
from conftest import ROOT, use_backend

import lazy_core
from lazy_core import config
from lazy_core.async_exec import enabled_by_default
from lazy_core.executor import _strict


@pytest.mark.parametrize("word", ["1", "true", "TRUE", "On", "yes", " YES "])
def test_boolean_true_words(monkeypatch, word):
    monkeypatch.setenv("LAZY_STRICT", word)
    assert config.get("LAZY_STRICT") is True


@pytest.mark.parametrize("word", ["0", "false", "FALSE", "off", "Off", "no", "NO"])
def test_boolean_false_words(monkeypatch, word):
    # LAZY_STRICT=off used to turn strict mode on; LAZY_ASYNC=off/no/FALSE left async on.
    monkeypatch.setenv("LAZY_STRICT", word)
    monkeypatch.setenv("LAZY_ASYNC", word)
    assert _strict() is False
    assert enabled_by_default() is False


def test_an_empty_value_means_the_default(monkeypatch):
    monkeypatch.setenv("LAZY_ASYNC", "")
    assert enabled_by_default() is True


@pytest.mark.parametrize(("name", "value", "accepted"), [
    ("LAZY_STRICT", "maybe", "1/0, true/false, on/off, yes/no"),
    ("LAZY_ASYNC", "2", "1/0, true/false, on/off, yes/no"),
    ("LAZY_CACHE_SIZE", "abc", "an integer >= 1"),
    ("LAZY_CACHE_SIZE", "0", "an integer >= 1"),
    ("LAZY_REFERENCE_OPT_LEVEL", "7", "an integer >= 0 and <= 3"),
    ("LAZY_DEBUG", "verbose", "an integer >= 0, or one of"),
])
def test_a_bad_value_names_the_variable_and_what_is_accepted(monkeypatch, name, value, accepted):
    monkeypatch.setenv(name, value)
    with pytest.raises(config.ConfigError, match=re.escape(f"{name}={value!r}")) as info:
        config.get(name)
    assert accepted in str(info.value)
    assert isinstance(info.value, ValueError)


def test_import_fails_naming_the_variable():
    env = dict(os.environ, LAZY_CACHE_SIZE="abc", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-c", "import lazy_core"], capture_output=True, text=True,
                          env=env, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lazy_core.config.ConfigError: environment variable LAZY_CACHE_SIZE='abc'"), last


def test_every_lazy_variable_is_read_through_config():
    """No module parses a LAZY_* variable itself (each used to parse its own, differently)."""
    offenders = []
    for folder in ("lazy_core", "backends"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in files:
                if not f.endswith(".py") or f == "config.py" and folder == "lazy_core":
                    continue
                path = os.path.join(dirpath, f)
                with open(path) as fh:
                    for n, line in enumerate(fh, 1):
                        if re.search(r"environ(\.get)?\s*[\[(]\s*[\"']LAZY_(?!IREE)", line):
                            offenders.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
    assert not offenders, "read these through lazy_core.config.get:\n" + "\n".join(offenders)
    for name in config.VARIABLES:
        assert config.VARIABLES[name].doc, name
    assert "| `LAZY_ASYNC` | bool |" in config.table()


def test_an_unwritable_dump_dir_warns_once_and_goes_on(monkeypatch, tmp_path):
    use_backend("eager")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("LAZY_DUMP_DIR", str(blocker / "dumps"))
    x = torch.ones(3).to("lazy")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = x + 1
        lazy_core.mark_step()
        z = x * 5  # another graph: compiled and dumped again
        lazy_core.mark_step()
    dump_warnings = [w for w in caught if "LAZY_DUMP_DIR" in str(w.message)]
    assert len(dump_warnings) == 1, [str(w.message) for w in caught]
    torch.testing.assert_close(y.cpu(), torch.full((3,), 2.0))
    torch.testing.assert_close(z.cpu(), torch.full((3,), 5.0))


@pytest.mark.parametrize("spelling", ["lazy:1", "lazy:3"])
def test_a_device_index_past_the_backend_devices_is_an_error(spelling):
    use_backend("eager")
    assert len(lazy_core.active_backend().devices()) == 1
    with pytest.raises(RuntimeError, match=f"invalid device ordinal: {spelling}; .* has 1 device \\(lazy:0\\)"):
        torch.ones(2).to(spelling)
    with pytest.raises(RuntimeError, match="invalid device ordinal"):
        torch.zeros(2, device=spelling)
    torch.testing.assert_close(torch.ones(2).to("lazy:0").cpu(), torch.ones(2))


def test_a_raising_step_closure_does_not_drop_the_closures_after_it():
    use_backend("eager")
    ran: list[str] = []

    def boom() -> None:
        ran.append("boom")
        raise ValueError("closure failed")

    lazy_core.add_step_closure(boom)
    lazy_core.add_step_closure(lambda: ran.append("after"))
    lazy_core.add_step_closure(lambda: (_ for _ in ()).throw(KeyError("second")))
    with pytest.raises(ValueError, match="closure failed") as info:
        lazy_core.mark_step()
    assert ran == ["boom", "after"]
    assert any("KeyError" in note for note in getattr(info.value, "__notes__", []))
    lazy_core.mark_step()  # nothing left over
    assert ran == ["boom", "after"]
