"""Hand a graph's results back in calls of at most ``MAX_RESULTS_PER_CALL`` each.

torch-mlir's ``refback-munge-calling-conventions`` replaces a function's
``return`` by one call of ``refbackend_consume_func_return_<types>`` with every
result, and the backend receives that call through a ctypes callback. ctypes
refuses a callback of more than 1024 arguments, so a graph with more results
could not run on the reference backend at all: an AdamW training step returns
each parameter, its gradient and two moments, and MobileViT's (251
parameters, 1,102 results) failed with "_argtypes_ has too many arguments"
and ran op by op.

After that pass, each such call is split into consecutive calls of at most
``MAX_RESULTS_PER_CALL`` results (each chunk's callee named by its own types,
so chunks of one signature share a callback), and the callbacks append the
chunks in order. The compiled code frees nothing it hands back, so the
backend frees the buffers only after the last chunk is copied (one result
may be a view of another's buffer).
"""

from __future__ import annotations

import re

__all__ = ["CONSUME_PREFIX", "MAX_RESULTS_PER_CALL", "split_result_calls"]

CONSUME_PREFIX = "refbackend_consume_func_return_"
#: Below ctypes' limit of 1024 callback arguments.
MAX_RESULTS_PER_CALL = 512

_CALL = re.compile(r"^(?P<indent>\s*)call @" + CONSUME_PREFIX + r"(?P<tokens>\w+)\((?P<args>[^)]*)\) : "
                   r"\((?P<types>[^)]*)\) -> \(\)\s*$")
_DECL = re.compile(r"^\s*func\.func private @" + CONSUME_PREFIX + r"(?P<tokens>\w+)\(")


def _types(text: str) -> list[str]:
    """``memref<*xf32>, memref<*xi1>`` split at top-level commas."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    if text.strip():
        out.append(text[start:].strip())
    return out


def split_result_calls(text: str, limit: int = MAX_RESULTS_PER_CALL) -> str | None:
    """``text`` (a module after the munge pass) with every consume call of more than ``limit``
    results split into calls of at most ``limit``; None if no call needed it."""
    lines = text.splitlines()
    declared: dict[str, str] = {}  # tokens -> declaration line
    split: set[str] = set()
    out: list[str] = []
    for line in lines:
        m = _CALL.match(line)
        if m is None or len(m["tokens"].split("_")) <= limit:
            out.append(line)
            continue
        tokens, args, types = m["tokens"].split("_"), [a.strip() for a in m["args"].split(",")], _types(m["types"])
        if not len(tokens) == len(args) == len(types):
            raise ValueError(f"unexpected consume call: {line[:200]}")
        split.add(m["tokens"])
        for i in range(0, len(args), limit):
            name = "_".join(tokens[i:i + limit])
            sig = ", ".join(types[i:i + limit])
            out.append(f"{m['indent']}call @{CONSUME_PREFIX}{name}({', '.join(args[i:i + limit])}) : ({sig}) -> ()")
            declared.setdefault(name, f"  func.func private @{CONSUME_PREFIX}{name}({sig}) "
                                      "attributes {llvm.emit_c_interface}")
    if not split:
        return None
    kept = []
    for line in out:
        d = _DECL.match(line)
        if d is not None and (d["tokens"] in split or d["tokens"] in declared):
            continue  # the unsplit callee (its callback would be too wide) or redeclared below
        kept.append(line)
    # The declarations go first in the module body, after ``module {``.
    at = next(i for i, line in enumerate(kept) if line.startswith("module"))
    return "\n".join(kept[:at + 1] + list(declared.values()) + kept[at + 1:])
