"""``lazy-mlir-opsupport``: which ATen ops import into the torch dialect and
lower to linalg, TOSA and StableHLO.

    lazy-mlir-opsupport [--ops add,atan2] [--limit N] [--targets ...]
                        [--out table.md|table.csv|table.json] [--static]

For each PyTorch OpInfo (the op database PyTorch and LTC test with), the
first sample input is traced on the lazy device (``eager`` backend: tracing
only), the resulting graph is imported with ``lowering.lower_graph`` and then
lowered to each target with ``lowering.lower``. A row says which ATen ops the
OpInfo traced to, whether all of them have a torch-dialect definition, and
per target "yes" or the op that failed. So a vendor choosing a target sees
what is missing, and the lowering's gaps are measured rather than guessed.

``--static`` skips tracing and lists every registered ``aten`` overload with
only its torch-dialect status (fast; no OpInfo needed).

This is a sweep, seconds per op at worst: it lives in tools/, not in CI.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

DEFAULT_TARGETS = ("linalg-on-tensors", "tosa", "stablehlo")
_SAMPLE_DTYPES = (torch.float32, torch.int64, torch.bool)


@dataclass
class OpRow:
    """One OpInfo (or, with --static, one ATen overload) and its status per stage."""

    name: str
    aten_ops: list[str] = field(default_factory=list)
    torch_dialect: str = "-"
    targets: dict[str, str] = field(default_factory=dict)
    note: str = ""


# -- tracing one OpInfo sample -----------------------------------------------------------


def _to_lazy(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().to("lazy")
    if isinstance(x, torch.device) and x.type == "cpu" or x == "cpu":
        return torch.device("lazy")
    if isinstance(x, list):
        return [_to_lazy(v) for v in x]
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_to_lazy(v) for v in x)
    if isinstance(x, dict):
        return {k: _to_lazy(v) for k, v in x.items()}
    return x


def _lazy_tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x] if x.device.type == "lazy" else []
    if isinstance(x, list | tuple):
        return [t for v in x for t in _lazy_tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _lazy_tensors(v)]
    return []


def _first_sample(op: Any) -> tuple[Any, torch.dtype] | None:
    supported = op.supported_dtypes("cpu")
    for dtype in _SAMPLE_DTYPES:
        if dtype in supported:
            torch.manual_seed(0)
            for sample in op.sample_inputs("cpu", dtype, requires_grad=False):
                return sample, dtype
    return None


def _short(message: str, limit: int = 90) -> str:
    line = message.strip().splitlines()[0] if message.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def check_opinfo(op: Any, targets: Iterable[str]) -> OpRow:
    """Trace ``op``'s first sample and try every lowering stage on the graph."""
    import lazy_core
    from lazy_core.graph import build_graph
    from lazy_mlir import lowering

    name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
    row = OpRow(name)
    found = _first_sample(op)
    if found is None:
        row.note = "no float32/int64/bool sample"
        return row
    sample, dtype = found
    before = {k: v for k, v in lazy_core.metrics.counters().items() if k.startswith("fallback::")}
    try:
        args = _to_lazy((sample.input, *sample.args))
        kwargs = _to_lazy(dict(sample.kwargs))
        result = op.op(*args, **kwargs)
    except Exception as e:
        row.note = f"tracing failed: {type(e).__name__}: {_short(str(e))}"
        return row
    after = lazy_core.metrics.counters()
    fallbacks = sorted(
        k.split("::", 1)[1] for k, v in after.items()
        if k.startswith("fallback::") and v > before.get(k, 0) and k != "fallback::compile_error"
    )
    outputs = [t._lz_value() for t in _lazy_tensors(result)]
    outputs = [o for o in outputs if not o.node.is_leaf()]
    if fallbacks:
        row.note = "ran eagerly: " + ", ".join(fallbacks)
    if not outputs:
        row.note = row.note or "no traced computation"
        return row
    graph = build_graph(outputs)
    row.aten_ops = sorted({n.name for n in graph.nodes})
    missing = [n.name for n in graph.nodes if not lowering.is_importable(n.op)]
    row.torch_dialect = "yes" if not missing else "no: " + ", ".join(sorted(set(missing)))
    if dtype is not torch.float32:
        row.note = (row.note + "; " if row.note else "") + f"sample dtype {str(dtype).replace('torch.', '')}"
    try:
        computation = lowering.lower_graph(graph)
    except Exception as e:
        row.torch_dialect = f"no: {_short(str(e))}"
        return row
    for target in targets:
        try:
            lowering.lower(computation, target)
            row.targets[target] = "yes"
        except lowering.LoweringError as e:
            op_name = getattr(e, "op", None)
            row.targets[target] = f"no: {op_name}" if op_name else f"no: {_short(str(e), 60)}"
        except Exception as e:
            row.targets[target] = f"no: {type(e).__name__}"
    return row


def opinfo_rows(selectors: list[str], targets: list[str], limit: int | None) -> list[OpRow]:
    """Rows for the OpInfos whose name matches one of ``selectors`` (all when empty)."""
    from torch.testing._internal.common_methods_invocations import op_db

    import lazy_core

    lazy_core.init("eager")
    ops = [op for op in op_db if _selected(op, selectors)]
    if limit is not None:
        ops = ops[:limit]
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, op in enumerate(ops):
            print(f"[{i + 1}/{len(ops)}] {op.name}", file=sys.stderr, flush=True)
            rows.append(check_opinfo(op, targets))
            lazy_core.mark_step()  # drop what this op left pending
    return rows


def _selected(op: Any, selectors: list[str]) -> bool:
    if not selectors:
        return True
    full = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
    return any(s in (op.name, full, op.aten_name) for s in selectors)


def static_rows(pattern: str | None) -> list[OpRow]:
    """Every registered ``aten`` overload with its torch-dialect status."""
    from lazy_mlir import lowering

    rows = []
    for packet_name in sorted(dir(torch.ops.aten)):
        if pattern and not re.search(pattern, packet_name):
            continue
        packet = getattr(torch.ops.aten, packet_name, None)
        overloads = getattr(packet, "overloads", None)
        if overloads is None:
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            row = OpRow(f"aten.{packet_name}.{overload}")
            row.torch_dialect = "yes" if lowering.is_importable(op) else "no"
            rows.append(row)
    return rows


# -- output ------------------------------------------------------------------------------


def render(rows: list[OpRow], targets: list[str], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([asdict(r) for r in rows], indent=2) + "\n"
    header = ["op", "aten ops", "torch dialect", *targets, "note"]
    table = [
        [r.name, " ".join(r.aten_ops), r.torch_dialect, *(r.targets.get(t, "-") for t in targets), r.note]
        for r in rows
    ]
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf)
        writer.writerow(header)
        writer.writerows(table)
        return buf.getvalue()
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in table]
    lines.append("")
    lines.append(summary(rows, targets))
    return "\n".join(lines) + "\n"


def summary(rows: list[OpRow], targets: list[str]) -> str:
    """One line of counts: how many rows pass each stage."""
    parts = [f"{len(rows)} ops", f"torch dialect {sum(r.torch_dialect == 'yes' for r in rows)}"]
    parts += [f"{t} {sum(r.targets.get(t) == 'yes' for r in rows)}" for t in targets]
    return "summary: " + ", ".join(parts)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lazy-mlir-opsupport",
        description="Table of which ATen ops import into the torch dialect and lower to "
        "linalg-on-tensors, TOSA and StableHLO (traced from PyTorch OpInfo samples).",
    )
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--limit", type=int, help="stop after this many OpInfos")
    parser.add_argument("--targets", default=",".join(DEFAULT_TARGETS),
                        help="comma-separated lowering targets (default: %(default)s)")
    parser.add_argument("--static", action="store_true",
                        help="list every aten overload's torch-dialect status, no tracing")
    parser.add_argument("--pattern", help="with --static: regex on the op name")
    parser.add_argument("--format", choices=("md", "csv", "json"),
                        help="output format (default: from --out's extension, else md)")
    parser.add_argument("--out", help="write the table to this file instead of stdout")
    ns = parser.parse_args(argv)
    ns.ops = [s for s in ns.ops.split(",") if s]
    ns.targets = [t for t in ns.targets.split(",") if t]
    from lazy_mlir import lowering

    for t in ns.targets:
        if t not in lowering.TARGETS or t == "raw":
            parser.error(f"unknown target {t!r}")
    if ns.format is None:
        ext = (ns.out or "").rsplit(".", 1)[-1]
        ns.format = ext if ext in ("csv", "json") else "md"
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    if ns.static:
        rows, targets = static_rows(ns.pattern), []
    else:
        rows, targets = opinfo_rows(ns.ops, ns.targets, ns.limit), ns.targets
    text = render(rows, targets, ns.format)
    if ns.out:
        with open(ns.out, "w") as f:
            f.write(text)
        print(summary(rows, targets), file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
