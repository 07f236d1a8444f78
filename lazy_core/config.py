"""Every ``LAZY_*`` environment variable, parsed in one place.

Before this module each reader parsed its own variable, and they disagreed:
``LAZY_STRICT=off`` turned strict mode *on* (any non-empty value but "0"),
``LAZY_ASYNC=no`` left async on, and ``LAZY_CACHE_SIZE=abc`` made
``import lazy_core`` die with a bare ``ValueError`` that named nothing.
Now one table lists every variable with its type, default and meaning, and
one parser reads them:

* booleans accept ``1/0``, ``true/false``, ``on/off``, ``yes/no`` in any case
  (empty means the default);
* integers accept a decimal number within the variable's bounds;
* a bad value raises :class:`ConfigError` (a ``ValueError``) naming the
  variable, the value and what is accepted.

``import lazy_core`` checks every variable once (:func:`validate`), so a typo
fails at once and not in the middle of a run. Values are looked up when read
(a dict lookup, memoized per raw string): tools and tests that set a variable
at run time (``LAZY_DUMP_DIR``, ``LAZY_BACKEND``) see the new value.

``python -m lazy_core.config`` prints the table (the documentation).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = ["ConfigError", "VARIABLES", "get", "table", "validate"]

_TRUE = ("1", "true", "on", "yes")
_FALSE = ("0", "false", "off", "no")


class ConfigError(ValueError):
    """A ``LAZY_*`` environment variable holds a value its parser does not accept."""


@dataclass(frozen=True, slots=True)
class Variable:
    """One environment variable: its type (``bool``, ``auto``, ``int``, ``level`` or ``str``), default and meaning.

    A ``level`` is an integer that also takes the boolean words (``on`` = 1); an ``auto`` is a
    boolean that may be left unset (or ``auto``, None: the program decides).
    """

    name: str
    kind: str
    default: Any
    doc: str
    minimum: int | None = None
    maximum: int | None = None

    def accepted(self) -> str:
        if self.kind == "bool":
            return "one of 1/0, true/false, on/off, yes/no (any case)"
        if self.kind == "auto":
            return "one of 1/0, true/false, on/off, yes/no (any case), or auto"
        if self.kind == "level":
            return "an integer >= 0, or one of true/false, on/off, yes/no (any case)"
        if self.kind == "int":
            lo = "" if self.minimum is None else f" >= {self.minimum}"
            hi = "" if self.maximum is None else f" <= {self.maximum}"
            both = " and".join(p for p in (lo, hi) if p)
            return f"an integer{both}"
        return "any text"

    def parse(self, raw: str) -> Any:
        text = raw.strip()
        if text == "":
            return self.default
        if self.kind in ("bool", "auto"):
            low = text.lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            if self.kind == "auto" and low == "auto":
                return None
        elif self.kind == "level" and text.lower() in _TRUE + _FALSE:
            return 1 if text.lower() in _TRUE else 0
        elif self.kind in ("int", "level"):
            try:
                value = int(text, 10)
            except ValueError:
                value = None
            if value is not None and (self.minimum is None or value >= self.minimum) and (
                self.maximum is None or value <= self.maximum
            ):
                return value
        else:
            return text
        raise ConfigError(
            f"environment variable {self.name}={raw!r} is not valid: expected {self.accepted()} "
            f"(default {self.default!r}). {self.doc}"
        )


#: The table: every variable lazy-mlir reads. Keep it sorted by area.
VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in [
        # -- runtime --------------------------------------------------------------
        Variable("LAZY_BACKEND", "str", "", "The backend init() activates (empty: iree-cpu, registry.DEFAULT_BACKEND)."),
        Variable("LAZY_ASYNC", "bool", True,
                 "mark_step() queues the execution on the worker thread and returns; "
                 "off: it waits for the execution (which still runs on the worker)."),
        Variable("LAZY_WAIT_TIMEOUT", "int", 0,
                 "Seconds any wait for a queued execution may last before it raises (0: no limit).",
                 minimum=0),
        Variable("LAZY_STRICT", "bool", False,
                 "Raise when a graph cannot be compiled instead of running it eagerly on the CPU."),
        Variable("LAZY_CHECKS", "bool", True,
                 "Check indices and integer divisors in compiled graphs; a bad one raises PyTorch's "
                 "error at the next read (off: no checks, out-of-range reads are undefined)."),
        Variable("LAZY_DIST_ASYNC", "bool", True,
                 "A collective on lazy tensors returns once issued; its results arrive in the background "
                 "(lazy_core.collective_queue). Off: it waits for the communication."),
        Variable("LAZY_DIST_CHECK", "str", "",
                 "Rank divergence check before each collective (1/0; unset: on when LAZY_DEBUG is)."),
        Variable("LAZY_DIST_CHECK_TIMEOUT", "int", 120,
                 "Seconds the divergence check waits for the other ranks.", minimum=1),
        Variable("LAZY_DONATE", "bool", True,
                 "Let compiled steps write new values into dead input buffers (buffer donation)."),
        Variable("LAZY_DYNAMIC", "bool", True,
                 "Compile a graph that recurs at other sizes once, with dynamic dimensions (lazy_core.dynamic_shapes)."),
        Variable("LAZY_DYNAMIC_SPECULATE", "bool", True,
                 "When a graph goes dynamic, compile ahead the dynamic plan of a recent graph that made tensors "
                 "of a size it made dynamic (a generate() prefill; lazy_core.dynamic_shapes)."),
        Variable("LAZY_GC_YOUNG", "int", 10000,
                 "At the first mark_step(), CPython's youngest-generation threshold is raised to this many "
                 "objects if it is still its default 700 (lazy_core.gc_debt: a step's IR objects then die "
                 "young instead of filling the oldest generation); 0 leaves the collector alone.", minimum=0),
        Variable("LAZY_HOST_EVAL", "bool", True,
                 "At a scalar read, run a small graph of values the host holds on the host instead of "
                 "compiling it (lazy_core.host_eval), and read a view of device data by viewing its "
                 "downloaded base (lazy_core.view_reads)."),
        Variable("LAZY_TIERED", "auto", None,
                 "Run a graph seen for the first time op by op on the CPU and compile it when it recurs "
                 "(unset or auto: on for backends whose memory is the host's, reference and iree-cpu, unless "
                 "LAZY_STRICT or LAZY_DUMP_DIR is set; lazy_core.tiering)."),
        Variable("LAZY_CACHE_SIZE", "int", 1024, "Compiled graphs kept in memory (LRU).", minimum=1),
        Variable("LAZY_SHAPE_CACHE_SIZE", "int", 100000, "Cached meta-kernel results (output shapes).",
                 minimum=0),
        Variable("LAZY_MAX_PENDING_NODES", "int", 100000,
                 "Pending ops after which a graph is cut and executed (0: never cut).", minimum=0),
        Variable("LAZY_SOURCE_LOCATIONS", "bool", True,
                 "Record the user's source line of each traced op (for errors and dumps)."),
        # -- diagnostics ----------------------------------------------------------
        Variable("LAZY_DEBUG", "level", 0,
                 "Print why each graph recompiled (1), with more detail at higher levels.", minimum=0),
        Variable("LAZY_DUMP_DIR", "str", "",
                 "Write the IR, MLIR, stack and metrics of each compiled graph to this directory."),
        Variable("LAZY_REPRO_DIR", "str", "",
                 "Where failing compiler pipelines write their reproducer (default: a temp folder)."),
        # -- backends ---------------------------------------------------------------
        Variable("LAZY_REFERENCE_OPT_LEVEL", "int", 2, "Optimization level of the reference backend's JIT.",
                 minimum=0, maximum=3),
        Variable("LAZY_DISK_CACHE", "bool", True, "Keep compiled executables in an on-disk cache."),
        Variable("LAZY_CACHE_MAX_BYTES", "str", "",
                 "Size bound of the on-disk cache, bytes or with a K/M/G/T suffix (0: none; default 2G)."),
        Variable("LAZY_CACHE_DIR", "str", "", "The on-disk cache folder (default: ~/.cache/lazy-mlir)."),
        Variable("LAZY_IREE_DEVICE", "str", "", "The IREE device to open (a URI or an index)."),
        Variable("LAZY_IREE_INPUT", "str", "", "Comma-separated IREE input forms to try, in order."),
        Variable("LAZY_IREE_FLAGS", "str", "", "Extra iree-compile flags (shell-quoted) for every IREE target."),
        Variable("LAZY_IREE_COMPILE_TIMEOUT", "int", 600,
                 "Seconds one iree-compile may run before it is stopped and its graph runs eagerly "
                 "(raises under LAZY_STRICT; 0: no limit).", minimum=0),
        Variable("LAZY_IREE_COMPILE_MEMORY", "int", 0,
                 "MiB of memory one iree-compile may hold before it is stopped (0: half the machine's, "
                 "at least 4096).", minimum=0),
        Variable("LAZY_IREE_VULKAN_SIGNAL_LAYER", "bool", True,
                 "Load lazy-mlir's Vulkan layer that keeps IREE's host semaphore signals in order "
                 "and declares IEEE floats in its shaders (off: IREE's wake-up race can lose the "
                 "device, and the driver may drop infinities, NaNs and signed zeros)."),
        # -- tests ------------------------------------------------------------------
        Variable("LAZY_TEST_BACKENDS", "str", "", "Comma-separated backends the test suite parametrizes over."),
    ]
}

_memo: dict[tuple[str, str], Any] = {}


def _lookup(name: str) -> Variable:
    var = VARIABLES.get(name)
    if var is not None:
        return var
    # Per-target IREE variables (LAZY_IREE_CPU_DEVICE, LAZY_IREE_VULKAN_FLAGS ...) are text.
    if name.startswith("LAZY_IREE_"):
        return Variable(name, "str", "", "A per-target IREE setting.")
    raise KeyError(f"{name} is not a lazy-mlir environment variable; add it to lazy_core.config.VARIABLES")


def get(name: str) -> Any:
    """The parsed value of ``name`` (its default when unset or empty); raises :class:`ConfigError`."""
    raw = os.environ.get(name)
    if raw is None:
        return _lookup(name).default
    key = (name, raw)
    try:
        return _memo[key]
    except KeyError:
        pass
    value = _lookup(name).parse(raw)
    _memo[key] = value
    return value


def validate() -> None:
    """Parse every set ``LAZY_*`` variable in the table; raise on the first bad one."""
    for name in VARIABLES:
        get(name)


def table() -> str:
    """The variables as a Markdown table (the documentation)."""
    rows = ["| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
    for v in VARIABLES.values():
        rows.append(f"| `{v.name}` | {v.kind} | `{v.default!r}` | {v.doc} |")
    return "\n".join(rows)


def debug_level() -> int:
    """The ``LAZY_DEBUG`` level (0: off)."""
    return int(get("LAZY_DEBUG"))


if __name__ == "__main__":
    print(table())
