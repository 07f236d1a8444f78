"""``lazy-mlir-trace``: run a Python script on the lazy device and keep its MLIR.

    lazy-mlir-trace [--backend B] [--out DIR] [--lowered linalg-on-tensors,tosa]
                    [--inline-locations] script.py [args...]

The script runs unmodified (``runpy``, with ``sys.argv`` set to the script and
its arguments). Every computation the executor runs is written once, on its
first execution, as torch-dialect MLIR with source locations:

    DIR/001-lazy_graph_<hash>.torch.mlir
    DIR/001-lazy_graph_<hash>.linalg-on-tensors.mlir   (with --lowered)

then, when the script ends, ``DIR/index.json`` (each graph: name, first
reason, executions, nodes, files) and ``DIR/metrics.txt`` (the
``lazy_core.metrics.report()``, also printed to stderr). This is how a user
sees what a training loop compiles, and what a compiler engineer feeds to
``torch-mlir-opt``/``iree-compile`` to reproduce a problem.

It observes through ``lazy_core.executor().hooks`` only: the executor runs
exactly as it would without the tool.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from dataclasses import dataclass, field
from typing import Any

import lazy_core
from lazy_core.graph import LazyGraph
from lazy_core.registry import DEFAULT_BACKEND
from lazy_mlir import lowering


@dataclass
class GraphRecord:
    """What the tool knows about one distinct graph."""

    index: int
    name: str
    reason: str
    nodes: int
    executions: int = 0
    files: list[str] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)


class TraceRecorder:
    """An executor hook that writes each new graph's MLIR into ``out_dir``."""

    def __init__(self, out_dir: str, lowered: list[str], inline_locations: bool = False) -> None:
        self.out_dir = out_dir
        self.lowered = lowered
        self.inline_locations = inline_locations
        self.graphs: dict[str, GraphRecord] = {}
        os.makedirs(out_dir, exist_ok=True)

    def __call__(self, graph: LazyGraph, entry: Any, reason: str) -> None:
        record = self.graphs.get(graph.name)
        if record is None:
            record = GraphRecord(len(self.graphs) + 1, graph.name, reason, len(graph.nodes))
            self.graphs[graph.name] = record
            self._write(graph, entry, record)
        record.executions += 1

    def _computation(self, graph: LazyGraph, entry: Any) -> lowering.Computation:
        # MLIR backends cache the Computation they compiled; the eager backend
        # (and graphs that fell back to eager) only have the graph: lower it here.
        computation = getattr(entry, "computation", None)
        if isinstance(computation, lowering.Computation):
            return computation
        return lowering.lower_graph(graph)

    def _write(self, graph: LazyGraph, entry: Any, record: GraphRecord) -> None:
        stem = f"{record.index:03d}-{graph.name}"
        try:
            computation = self._computation(graph, entry)
        except Exception as e:  # the user's program must go on; the failure is recorded
            self._error(record, stem, "torch", e)
            return
        header = (
            f"// {computation.signature()}\n"
            f"// first executed for: {record.reason}; nodes: {record.nodes}\n"
        )
        self._save(record, f"{stem}.torch.mlir", header + self._text(computation))
        for target in self.lowered:
            try:
                lowered = lowering.lower(computation, target)
            except Exception as e:
                self._error(record, stem, target, e)
                continue
            self._save(record, f"{stem}.{target}.mlir", header + self._text(lowered))

    def _text(self, computation: lowering.Computation) -> str:
        if self.inline_locations:
            return computation.asm(locations=True, inline_locations=True)
        return computation.mlir

    def _save(self, record: GraphRecord, filename: str, text: str) -> None:
        with open(os.path.join(self.out_dir, filename), "w") as f:
            f.write(text)
        record.files.append(filename)

    def _error(self, record: GraphRecord, stem: str, target: str, e: Exception) -> None:
        message = f"{type(e).__name__}: {e}"
        record.errors[target] = message.splitlines()[0]
        self._save(record, f"{stem}.{target}.error.txt", message + "\n")

    def finish(self) -> str:
        """Write index.json and metrics.txt; return the metrics report."""
        index = [vars(r) for r in sorted(self.graphs.values(), key=lambda r: r.index)]
        with open(os.path.join(self.out_dir, "index.json"), "w") as f:
            json.dump({"graphs": index}, f, indent=2)
        report = lazy_core.metrics.report()
        with open(os.path.join(self.out_dir, "metrics.txt"), "w") as f:
            f.write(report if report.endswith("\n") else report + "\n")
        return report


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="lazy-mlir-trace",
        description="Run a Python script on the lazy device and write the MLIR of every "
        "computation it executes, plus a metrics report.",
    )
    parser.add_argument("--backend", help=f"backend to activate (default: LAZY_BACKEND or {DEFAULT_BACKEND})")
    parser.add_argument("--out", default="lazy-mlir-trace", help="output folder (default: %(default)s)")
    parser.add_argument(
        "--lowered", default="",
        help=f"comma-separated lowered forms to write too: {', '.join(lowering.TARGETS[1:])}",
    )
    parser.add_argument("--inline-locations", action="store_true",
                        help="print loc(...) on every op instead of as #loc aliases (grep-friendly)")
    parser.add_argument("--quiet", action="store_true", help="do not print the metrics report")
    parser.add_argument("script", help="the Python script to run")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    ns = parser.parse_args(argv)
    ns.lowered = [t for t in ns.lowered.split(",") if t]
    for target in ns.lowered:
        if target not in lowering.TARGETS or target == "raw":
            parser.error(f"unknown --lowered target {target!r}; choose from {', '.join(lowering.TARGETS[1:])}")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(argv)
    if ns.backend:
        # Scripts that call lazy_core.init() without a name pick it up too.
        os.environ["LAZY_BACKEND"] = ns.backend
        lazy_core.init(ns.backend)
    recorder = TraceRecorder(ns.out, ns.lowered, ns.inline_locations)
    hooks = lazy_core.executor().hooks
    hooks.append(recorder)
    script = os.path.abspath(ns.script)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [script, *ns.args]
    sys.path.insert(0, os.path.dirname(script))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
        # Work still pending when the script ends is traced too.
        lazy_core.mark_step()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        hooks.remove(recorder)
        report = recorder.finish()
        if not ns.quiet:
            print(report, file=sys.stderr)
        print(f"lazy-mlir-trace: {len(recorder.graphs)} graphs written to {ns.out}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
