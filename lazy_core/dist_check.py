"""Rank divergence check: every rank raises instead of hanging in a mismatched collective.

The most common distributed failure is ranks tracing different programs: one
rank takes a branch the others do not, calls a collective the others never
call (or a different one), and every rank waits forever, or worse, two
same-sized all-reduces of different tensors pair up and mix values silently.

With ``LAZY_DIST_CHECK=1`` (or ``LAZY_DEBUG=1``; ``LAZY_DIST_CHECK=0`` turns
it off again) each collective on lazy tensors first publishes, through the
process group's own key-value store, what this rank is about to do:

* the collective's number in its group and its op (``allreduce_``...),
* the shapes and dtypes of its tensors,
* the stable hash of the pending graph that feeds it (structure only, not
  values: the same program on different data hashes the same),
* the user's ``file:line``.

Then it reads every other rank's record for the same number. Any difference
raises ``RankDivergenceError`` on every rank, naming each rank's op and line;
a rank that does not arrive within ``LAZY_DIST_CHECK_TIMEOUT`` seconds
(default 120: a first compile may keep a rank busy) is named as missing.
Lines are compared by file name and line number (paths differ across nodes).

The store, not the process group, carries the records, so a rank stuck in a
different collective cannot block the check. It costs a store round trip
and a graph hash per collective: a debug mode.
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from typing import Any

import torch

from .graph import build_graph
from .source_location import SourceLocation

__all__ = ["RankDivergenceError", "enabled", "check", "reset"]


class RankDivergenceError(RuntimeError):
    """Ranks reached different collectives (raised on every rank that sees it)."""


_FALSE = ("", "0", "false", "no", "off")


def enabled() -> bool:
    """``LAZY_DIST_CHECK`` if set, else ``LAZY_DEBUG`` (read at every collective, so tests can flip it)."""
    from . import config

    value = str(config.get("LAZY_DIST_CHECK")).strip().lower()
    if not value:
        return config.debug_level() > 0
    return value not in _FALSE


def _timeout() -> float:
    from . import config

    return float(config.get("LAZY_DIST_CHECK_TIMEOUT"))


#: Collectives checked so far, by group name.
_counts: dict[str, int] = {}


def reset() -> None:
    """Forget the collective numbers (after ``destroy_process_group``)."""
    _counts.clear()


def _process_group(args: tuple) -> Any:
    ProcessGroup = torch._C._distributed_c10d.ProcessGroup
    for a in args:
        if isinstance(a, torch.ScriptObject):
            try:
                return ProcessGroup.unbox(a)
            except (RuntimeError, TypeError):
                continue
    raise RuntimeError("lazy_core: a c10d op without a process group argument")


def _store(pg: Any) -> Any:
    from torch.distributed import distributed_c10d as c10d

    entry = c10d._world.pg_map.get(pg)
    if entry is not None:
        return entry[1]
    return c10d.PrefixStore(f"lazy_dist_check/{pg.group_name}/", c10d._get_default_store())


def _signature(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
    if isinstance(x, list | tuple):
        return [_signature(v) for v in x]
    return None


def _graph_hash(inputs: list[Any]) -> str:
    roots = [t._lz_value() for t in inputs]
    pending = [v for v in roots if not v.node.is_leaf()]
    if not pending:
        return "-"
    return build_graph(pending).stable_hash


def _where(loc: SourceLocation | None) -> str:
    return f"{os.path.basename(loc.filename)}:{loc.line}" if loc is not None else "?"


def _describe(rank: int, rec: dict) -> str:
    return (f"rank {rank} is at {rec['op']} {rec['tensors']} from {rec['at']} "
            f"(in {rec['function']}, pending graph {rec['graph']})")


def check(op: str, args: tuple, inputs: list[Any], loc: SourceLocation | None) -> None:
    """Compare this collective with every other rank's; raise ``RankDivergenceError`` on a mismatch."""
    pg = _process_group(args)
    rank, size = pg.rank(), pg.size()
    if size == 1:
        return
    group = pg.group_name
    n = _counts.get(group, 0) + 1
    _counts[group] = n
    tensors = [s for s in (_signature(a) for a in args) if s is not None]
    mine = {
        "op": op,
        "tensors": json.dumps(tensors),
        "graph": _graph_hash(inputs),
        "at": _where(loc),
        "function": loc.function if loc is not None else "?",
        "path": loc.filename if loc is not None else "?",
    }
    store = _store(pg)
    prefix = f"lazy_dist_check/{n}/"
    store.set(prefix + str(rank), json.dumps(mine))
    others: dict[int, dict] = {}
    for r in range(size):
        if r == rank:
            continue
        try:
            store.wait([prefix + str(r)], timedelta(seconds=_timeout()))
        except RuntimeError as e:  # c10d's DistStoreError is a RuntimeError
            raise RankDivergenceError(
                f"lazy_core (LAZY_DIST_CHECK): rank {r} did not reach collective #{n} of group {group} "
                f"within {_timeout():g} s; {_describe(rank, mine)}. The ranks ran different "
                f"programs (a rank-dependent branch, an early exit, or a different number of steps); "
                f"LAZY_DIST_CHECK_TIMEOUT sets the wait."
            ) from e
        others[r] = json.loads(store.get(prefix + str(r)))
    if n > 2:
        # Every rank has read our record n-2: it is at n-1 or later.
        store.delete_key(f"lazy_dist_check/{n - 2}/{rank}")
    keys = ("op", "tensors", "graph", "at")
    bad = {r: rec for r, rec in others.items() if any(rec[k] != mine[k] for k in keys)}
    if bad:
        lines = [_describe(rank, mine)] + [_describe(r, rec) for r, rec in sorted(bad.items())]
        raise RankDivergenceError(
            f"lazy_core (LAZY_DIST_CHECK): ranks diverged at collective #{n} of group {group}:\n  "
            + "\n  ".join(lines)
            + "\nEvery rank raises this error instead of waiting in mismatched collectives. "
            "Make every rank trace the same program up to each collective (same ops, same lines)."
        )
