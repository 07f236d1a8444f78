"""Steady-state training-step time, side by side, for three small models.

``--model mlp|cnn|bert`` (default: all three). Systems, each in its own
process (``torch._lazy`` and lazy-mlir cannot share one):

* ``eager``: PyTorch on the CPU, the baseline;
* ``torch._lazy``: PyTorch's C++ LTC with the TorchScript backend;
* ``torch.compile``: inductor on forward+backward (optimizer step eager),
  as a reference point; its compile time is reported (a fresh inductor cache
  per run, so it is a cold compile);
* ``lazy-mlir/<backend>``: this project on ``reference`` and ``iree-cpu``.

Each worker builds the same seeded model and batches, runs warm-up steps,
then timed steps, and reports: median ms/step (wall and process CPU), warm-up
seconds, compiles during warm-up and after, fallbacks, and the per-step
losses, which the driver compares with eager. A second lazy-mlir variant
changes the learning rate every step (``lr-sched``): the scalar is a graph
parameter, so it must not recompile.

Models: MLP 784-256-128-10 (batch 64, SGD); a small CNN on 28x28 (batch 64,
SGD with momentum); tiny BERT (``transformers`` BertConfig, hidden 128, 2
layers, 2 heads, HF's default dropout 0.1, sequence classification, batch 8 x 64 tokens,
AdamW).

    python bench/train_step.py [--model mlp] [--quick] [--systems eager,lazy-mlir/iree-cpu]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from typing import Any

import _common as C
import zoo

MODELS = ("mlp", "cnn", "bert")
#: The real-model zoo (bench/zoo.py): ``--model NAME`` or ``--zoo``; not in the default run.
ZOO = zoo.MODELS
# label -> (worker system, lr schedule)
SYSTEMS: dict[str, tuple[str, bool]] = {
    "eager": ("eager", False),
    "torch._lazy": ("torch_lazy", False),
    "torch.compile": ("compile", False),
    "lazy-mlir/reference": ("lazy:reference", False),
    "lazy-mlir/iree-cpu": ("lazy:iree-cpu", False),
    "eager lr-sched": ("eager", True),
    "lazy-mlir/iree-cpu lr-sched": ("lazy:iree-cpu", True),
}
#: Mixed precision (``--amp``; not in the default run): eager under ``torch.autocast("cpu")``,
#: lazy-mlir under ``lazy_core.autocast`` (docs/amp.md), bf16, no scaler. Their losses are
#: compared with eager's under the same autocast.
AMP_SYSTEMS: dict[str, str] = {"eager amp-bf16": "eager", "lazy-mlir/iree-cpu amp-bf16": "lazy:iree-cpu"}
# Left out unless --all-systems: the reference backend's naive loops and its
# LLVM pipeline take minutes on BERT's step graph (measured: ~4 min warm-up).
SLOW = {("bert", "lazy-mlir/reference")} | {(m, "lazy-mlir/reference") for m in ZOO}
DEFAULT_STEPS = {"mlp": (3, 20), "cnn": (3, 15), "bert": (3, 8)}  # (warm-up, timed)
# Three warm-up steps even when quick: with tiering (lazy_core.tiering, on by default) the first
# step and the steady graph's first sight run interpreted, and the steady graph compiles at step 3.
QUICK_STEPS = (3, 3)
LOSS_RTOL, LOSS_ATOL = 2e-3, 2e-4
#: Eager's own sensitivity: the eager worker trains a second copy whose parameters are scaled by
#: ``1 + PERTURBATION`` (about one float32 rounding) and reports its losses. A model whose training
#: is chaotic (the zoo's ResNet-18: eager float32 and float64 differ by 0.017 at step 5) amplifies
#: any rounding difference, a compiler's summation order included; a loss then agrees if it is
#: within ``SENSITIVITY`` times eager's own divergence at that step, on top of the fixed tolerance.
PERTURBATION, SENSITIVITY = 1e-7, 10.0


# ---------------------------------------------------------------------------
# Models and data (built on the CPU with fixed seeds, then moved)


def build(model_name: str, quick: bool) -> tuple[Any, list[tuple[Any, Any]], Any, Any]:
    """(model, batches, loss(model, x, y), optimizer factory)."""
    import torch
    from torch import nn

    if model_name in ZOO:
        model, batches, loss_fn, opt = zoo.build(model_name, quick)
        model.train()
        return model, batches, loss_fn, opt
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if model_name == "mlp":
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
        batches = [(torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g)) for _ in range(4)]

        def loss_fn(m: Any, x: Any, y: Any) -> Any:
            return nn.functional.cross_entropy(m(x), y)

        def opt(params: Any) -> Any:
            return torch.optim.SGD(params, lr=0.05)

    elif model_name == "cnn":
        model = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 7 * 7, 10),
        )
        batches = [(torch.randn(64, 1, 28, 28, generator=g), torch.randint(0, 10, (64,), generator=g))
                   for _ in range(4)]

        def loss_fn(m: Any, x: Any, y: Any) -> Any:
            return nn.functional.cross_entropy(m(x), y)

        def opt(params: Any) -> Any:
            return torch.optim.SGD(params, lr=0.02, momentum=0.9)

    elif model_name == "bert":
        from transformers import BertConfig, BertForSequenceClassification

        config = BertConfig(
            hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
            max_position_embeddings=128,
            num_labels=2,
        )
        config._attn_implementation = "eager"
        model = BertForSequenceClassification(config)
        batches = [(torch.randint(0, config.vocab_size, (8, 64), generator=g), torch.randint(0, 2, (8,), generator=g))
                   for _ in range(4)]

        def loss_fn(m: Any, x: Any, y: Any) -> Any:
            return m(input_ids=x, labels=y).loss

        def opt(params: Any) -> Any:
            return torch.optim.AdamW(params, lr=1e-3)

    else:
        raise SystemExit(f"unknown model {model_name!r}; choose from {', '.join(MODELS)}")
    model.train()
    return model, batches, loss_fn, opt


# ---------------------------------------------------------------------------
# Systems (worker side)


class _Eager:
    label = "eager"
    device = "cpu"

    def prepare(self, loss_fn: Any) -> Any:
        return loss_fn

    def barrier(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def compiles(self) -> int:
        return 0

    def extra(self) -> dict[str, Any]:
        return {}


class _TorchLazy(_Eager):
    label = "torch._lazy"
    device = "lazy"

    def __init__(self) -> None:
        import torch._lazy
        import torch._lazy.metrics
        import torch._lazy.ts_backend

        torch._lazy.ts_backend.init()
        self._lazy = torch._lazy

    def barrier(self) -> None:
        self._lazy.mark_step()

    def finish(self) -> None:
        self._lazy.wait_device_ops()

    def compiles(self) -> int:
        return self._lazy.metrics.counter_value("UncachedCompile") or 0

    def extra(self) -> dict[str, Any]:
        m = self._lazy.metrics
        return {
            "cache_hits": m.counter_value("CachedCompile") or 0,
            "fallbacks": {n: m.counter_value(n) for n in m.counter_names() if n.startswith("aten::")},
        }


class _Compile(_Eager):
    label = "torch.compile"

    def prepare(self, loss_fn: Any) -> Any:
        import torch

        return torch.compile(loss_fn)

    def compiles(self) -> int:
        from torch._dynamo.utils import counters

        return counters["stats"]["unique_graphs"]

    def extra(self) -> dict[str, Any]:
        from torch._dynamo.utils import counters

        return {"dynamo": {k: dict(v) for k, v in counters.items() if k in ("stats", "inductor", "graph_break")}}


class _LazyMlir(_Eager):
    device = "lazy"

    def __init__(self, backend: str) -> None:
        import lazy_core

        self.label = f"lazy-mlir/{backend}"
        self._lc = lazy_core
        instance = lazy_core.create_backend(backend)
        why = getattr(instance, "unavailable_reason", lambda: None)()
        if why:
            raise SystemExit(f"backend {backend} unavailable: {why}")
        lazy_core.init(instance)

    def barrier(self) -> None:
        self._lc.mark_step()

    def finish(self) -> None:
        self._lc.wait_device_ops()

    def compiles(self) -> int:
        # Every cache miss is a compile attempt, including ones that failed
        # and fell back to eager interpretation (counted fallback::compile_error),
        # except a graph seen for the first time, interpreted (lazy_core.tiering).
        return self._lc.metrics.counter("cache_miss") - self._lc.metrics.counter("interpreted_first_sight")

    def extra(self) -> dict[str, Any]:
        counters = self._lc.metrics.counters()
        return {
            "cache_hits": counters.get("cache_hit", 0),
            "fallbacks": {k: v for k, v in counters.items() if k.startswith("fallback::")},
            "counters": counters,
            "timers": self._lc.metrics.timers(),
        }


def _make_system(name: str) -> _Eager:
    if name == "eager":
        return _Eager()
    if name == "torch_lazy":
        return _TorchLazy()
    if name == "compile":
        return _Compile()
    if name.startswith("lazy:"):
        return _LazyMlir(name.split(":", 1)[1])
    raise SystemExit(f"unknown system {name!r}")


def _lazy_timer_totals(system: _Eager) -> dict[str, float]:
    if not isinstance(system, _LazyMlir):
        return {}
    totals = {k: v["total"] for k, v in system._lc.metrics.timers().items()}
    totals["#executions"] = float(system._lc.metrics.counter("execute"))
    return totals


def _autocast(system: Any, amp: str | None) -> Any:
    """The autocast region of one step: none, eager's CPU autocast, or lazy_core's."""
    import contextlib

    import torch

    if amp is None:
        return contextlib.nullcontext()
    if isinstance(system, _LazyMlir):
        return system._lc.autocast(dtype=torch.bfloat16)
    if type(system) is _Eager:
        return torch.autocast("cpu", dtype=torch.bfloat16)
    raise SystemExit(f"--amp is measured for eager and lazy-mlir only, not {system.label}")


def worker(args: argparse.Namespace) -> None:
    import torch

    system = _make_system(args.worker)
    model, batches, loss_fn, make_opt = build(args.model, args.quick)
    warmup, steps = QUICK_STEPS if args.quick else DEFAULT_STEPS.get(args.model, (3, 8))
    if args.warmup is not None:
        warmup = args.warmup
    if args.steps is not None:
        steps = args.steps

    t0 = time.perf_counter()
    model = model.to(system.device)
    opt = make_opt(model.parameters())
    step_loss = system.prepare(loss_fn)
    base_lr = opt.param_groups[0]["lr"]
    setup_s = time.perf_counter() - t0

    losses: list[Any] = []
    walls: list[float] = []
    cpus: list[float] = []
    trace_s: list[float] = []
    compiles_after_step: list[int] = []

    def one_step(i: int) -> None:
        x, y = batches[i % len(batches)]
        # Dropout stays at its default; seeding each step alike gives every system that
        # draws masks from PyTorch's CPU generator (eager, lazy-mlir) the same masks.
        torch.manual_seed(1000 + i)
        c0 = time.process_time()
        w0 = time.perf_counter()
        if args.lr_schedule:
            for group in opt.param_groups:
                group["lr"] = base_lr * (1.0 - 0.5 * i / (warmup + steps))
        x, y = x.to(system.device), y.to(system.device)
        with _autocast(system, args.amp):
            loss = step_loss(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        w1 = time.perf_counter()
        system.barrier()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
        trace_s.append(w1 - w0)
        losses.append(loss.detach())
        compiles_after_step.append(system.compiles())

    t0 = time.perf_counter()
    first_step_s = None
    for i in range(warmup):
        one_step(i)
        if i == 0:
            system.finish()
            first_step_s = time.perf_counter() - t0
    system.finish()
    warmup_s = time.perf_counter() - t0
    compiles_warm = system.compiles()
    timers_before = _lazy_timer_totals(system)

    c0 = time.process_time()
    t0 = time.perf_counter()
    for i in range(warmup, warmup + steps):
        one_step(i)
    system.finish()
    steady_total = time.perf_counter() - t0
    steady_cpu = time.process_time() - c0
    timers_after = _lazy_timer_totals(system)

    steady_compiles = system.compiles() - compiles_warm  # before reading losses: a read may compile
    loss_values = [float(v.cpu()) for v in losses]
    steady_w, steady_c, steady_t = walls[warmup:], cpus[warmup:], trace_s[warmup:]
    last_compile_step, prev = 0, 0
    for i, c in enumerate(compiles_after_step):
        if c > prev:
            last_compile_step = i + 1
        prev = c
    result: dict[str, Any] = {
        "system": system.label,
        "model": args.model,
        "lr_schedule": args.lr_schedule,
        "amp": args.amp,
        "warmup_steps": warmup,
        "steps": steps,
        "setup_s": setup_s,
        "warmup_s": warmup_s,
        "first_step_s": first_step_s,  # including its compiles and the device wait
        # Steady steps back to back, ending with a wait for the device: the
        # step time an asynchronous runtime cannot hide in a queue.
        "ms_per_step": steady_total / max(steps, 1) * 1e3,
        # Per step, until the barrier returned (an async mark_step returns early).
        "ms_per_step_median_to_barrier": C.median(steady_w) * 1e3,
        "ms_per_step_min_to_barrier": min(steady_w) * 1e3 if steady_w else None,
        "cpu_ms_per_step": steady_cpu / max(steps, 1) * 1e3,
        "cpu_ms_per_step_median_to_barrier": C.median(steady_c) * 1e3,
        "trace_ms_per_step": C.median(steady_t) * 1e3,
        "compiles_warmup": compiles_warm,
        "compiles_steady": steady_compiles,
        "steps_to_steady": last_compile_step,
        "losses": loss_values,
        "torch_threads": torch.get_num_threads(),
        "steady_timers_s_per_step": {k: (timers_after[k] - timers_before.get(k, 0.0)) / max(steps, 1)
                                     for k in timers_after if not k.startswith("#")},
    }
    if "#executions" in timers_after:
        result["graphs_per_step"] = (timers_after["#executions"] - timers_before["#executions"]) / max(steps, 1)
    if type(system) is _Eager:  # after the timing: the reference's own sensitivity (_compare_losses)
        result["losses_perturbed"] = _perturbed_losses(args, system, warmup + steps, base_lr, loss_values[0])
    result.update(system.extra())
    C.emit(result)


def _perturbed_losses(args: argparse.Namespace, system: Any, n: int, base_lr: float, first: float) -> list[float]:
    """The first ``n`` losses of the same training with every parameter scaled by
    ``1 + PERTURBATION`` (eager only): how far eager itself moves from one rounding's change.
    ``first`` is the timed run's first loss: a twin that does not start there is not one."""
    import torch

    model, batches, loss_fn, make_opt = build(args.model, args.quick)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + PERTURBATION)
    opt = make_opt(model.parameters())
    step_loss = system.prepare(loss_fn)
    out = []
    for i in range(n):  # the timed loop's steps: same batches, seeds and schedule
        x, y = batches[i % len(batches)]
        torch.manual_seed(1000 + i)
        if args.lr_schedule:
            for group in opt.param_groups:
                group["lr"] = base_lr * (1.0 - 0.5 * i / n)
        with _autocast(system, args.amp):
            loss = step_loss(model, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(float(loss.detach()))
    if abs(out[0] - first) > 1e-3 * max(1.0, abs(first)):
        raise SystemExit(f"the perturbed twin's first loss {out[0]} is not the timed run's {first}: "
                         "build() must make the same model each time")
    return out


# ---------------------------------------------------------------------------
# Driver


def run_model(model: str, labels: list[str], quick: bool, timeout: float, env: dict[str, str] | None = None,
              extra_args: list[str] | None = None, threads: int | None = 1,
              include_slow: bool = False) -> dict[str, Any]:
    """Run every system on ``model``; returns {label: worker result}."""
    out: dict[str, Any] = {}
    env = {**C.thread_env(threads), **(env or {})}
    for label in labels:
        system, lr_sched = SYSTEMS[label] if label in SYSTEMS else (AMP_SYSTEMS[label], False)
        if (model, label) in SLOW and not include_slow:
            out[label] = {"error": "skipped by default (minutes); pass --all-systems"}
            continue
        wargs = ["--worker", system, "--model", model, *(extra_args or [])]
        if quick:
            wargs.append("--quick")
        if lr_sched:
            wargs.append("--lr-schedule")
        if label in AMP_SYSTEMS:
            wargs += ["--amp", "bf16"]
        wenv = dict(env or {})
        tmp = None
        if system.startswith("lazy:") and "LAZY_CACHE_DIR" not in wenv:
            # A fresh on-disk cache: these are cold-compile numbers.
            tmp = tempfile.TemporaryDirectory(prefix="lazy-bench-cache-")
            wenv["LAZY_CACHE_DIR"] = tmp.name
        if system == "compile":
            tmp = tempfile.TemporaryDirectory(prefix="inductor-bench-cache-")
            wenv["TORCHINDUCTOR_CACHE_DIR"] = tmp.name
        print(f"[train_step] {model}: {label} ...", file=sys.stderr, flush=True)
        out[label] = C.run_worker("train_step.py", wargs, env=wenv, timeout=timeout)
        if tmp is not None:
            tmp.cleanup()
    _compare_losses(out)
    return out


def _compare_losses(results: dict[str, Any]) -> None:
    """Mark each result with whether its losses match eager's with the same lr schedule."""
    refs = {(False, None): results.get("eager", {}),
            (True, None): results.get("eager lr-sched", {}),
            (False, "bf16"): results.get("eager amp-bf16", {})}
    for r in results.values():
        if "losses" not in r:
            continue
        eager = refs.get((bool(r.get("lr_schedule")), r.get("amp"))) or {}
        ref = eager.get("losses")
        if not ref:
            continue
        # Eager's divergence from its perturbed twin, per step (0 where it has none).
        own = [abs(a - b) for a, b in zip(eager.get("losses_perturbed") or [], ref)]
        own += [0.0] * (len(ref) - len(own))
        n = min(len(ref), len(r["losses"]))
        diffs = [abs(a - b) for a, b in zip(r["losses"][:n], ref[:n])]
        ok = all(math.isfinite(a) and abs(a - b) <= LOSS_ATOL + LOSS_RTOL * abs(b) + SENSITIVITY * own[i]
                 for i, (a, b) in enumerate(zip(r["losses"][:n], ref[:n])))
        r["loss_max_abs_diff_vs_eager"] = max(diffs) if diffs else None
        r["eager_self_divergence_max"] = max(own[:n]) if own else None
        r["losses_agree_with_eager"] = ok


def report(all_results: dict[str, dict[str, Any]]) -> None:
    headers = ["model", "system", "ms/step", "median to barrier", "cpu ms", "trace ms", "x eager", "warm-up s",
               "compiles warm-up", "after", "graphs/step", "fallbacks", "loss ok", "max |Δloss|"]
    rows = []
    for model, results in all_results.items():
        eager_ms = results.get("eager", {}).get("ms_per_step")
        for label, r in results.items():
            if "error" in r:
                rows.append([model, label] + ["-"] * 11 + [C.error_summary(r)[:120]])
                continue
            fallbacks = r.get("fallbacks") or {}
            fb = ", ".join(f"{k.split('::')[-1]}x{v}" for k, v in sorted(fallbacks.items())) or "0"
            rows.append([
                model, label, r["ms_per_step"], r["ms_per_step_median_to_barrier"], r["cpu_ms_per_step"],
                r["trace_ms_per_step"] if r["system"] not in ("eager", "torch.compile") else None,
                C.ratio(r["ms_per_step"], eager_ms), r["warmup_s"], r["compiles_warmup"],
                r["compiles_steady"], r.get("graphs_per_step"), fb[:60], r.get("losses_agree_with_eager"),
                f"{r['loss_max_abs_diff_vs_eager']:.1e}" if r.get("loss_max_abs_diff_vs_eager") is not None else "-",
            ])
    print(C.table(headers, rows, title="Training step, steady state after warm-up"))
    print("(ms/step: wall time of the timed steps run back to back, ending with a device wait, per step;\n"
          " median to barrier: per step until mark_step returned, which an asynchronous runtime makes early;\n"
          " cpu ms: process CPU time per step, all threads; trace ms: median Python time before the barrier,\n"
          " including any graph a fallback forced mid-step.)")


def chart(all_results: dict[str, dict[str, Any]], name: str = "train_step") -> Any:
    models = list(all_results)
    labels: list[str] = []
    for results in all_results.values():
        for label in results:
            if label not in labels:
                labels.append(label)
    series = {label: [all_results[m].get(label, {}).get("ms_per_step") for m in models] for label in labels}
    return C.bar_chart(name, "Training step (ms, median, log scale; lower is better)", models, series,
                       "ms / step", log=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", choices=MODELS + ZOO,
                    help=f"repeatable; default {', '.join(MODELS)} (the zoo models: bench/zoo.py)")
    ap.add_argument("--zoo", action="store_true", help=f"every zoo model: {', '.join(ZOO)}")
    ap.add_argument("--systems", help=f"comma-separated labels; default all of: {', '.join(SYSTEMS)}")
    ap.add_argument("--quick", action="store_true", help="2 warm-up + 3 timed steps (smoke test)")
    ap.add_argument("--all-systems", action="store_true", help=f"include slow combinations: {sorted(SLOW)}")
    ap.add_argument("--timeout", type=float, default=float(os.environ.get("LAZY_BENCH_TIMEOUT", "420")),
                    help="seconds per system before it is reported as timed out")
    ap.add_argument("--threads", type=int, default=C.default_threads(),
                    help="compute threads for every system (0: library defaults); default 1, see README")
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--lr-schedule", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--amp", nargs="?", const="bf16", choices=["bf16"],
                    help=f"also run the bf16 autocast systems: {', '.join(AMP_SYSTEMS)}")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.model = (args.model or ["mlp"])[0]
        worker(args)
        return {}

    labels = [s.strip() for s in args.systems.split(",")] if args.systems else list(SYSTEMS)
    if args.amp and not args.worker:
        labels += [label for label in AMP_SYSTEMS if label not in labels]
    for label in labels:
        if label not in SYSTEMS and label not in AMP_SYSTEMS:
            raise SystemExit(f"unknown system {label!r}; choose from {', '.join([*SYSTEMS, *AMP_SYSTEMS])}")
    extra = []
    if args.warmup is not None:
        extra += ["--warmup", str(args.warmup)]
    if args.steps is not None:
        extra += ["--steps", str(args.steps)]
    all_results = {}
    models = (args.model or []) + (list(ZOO) if args.zoo else [])
    for model in models or list(MODELS):
        all_results[model] = run_model(model, labels, args.quick, args.timeout, extra_args=extra,
                                       threads=args.threads, include_slow=args.all_systems)
    report(all_results)
    out = {"machine": C.machine_info(), "threads": args.threads, "models": all_results}
    name = "train_step" if not models else "train_step_" + ("zoo" if args.zoo else "_".join(models))
    path = C.write_json(name, out)
    png = chart(all_results, name)
    print(f"\nwrote {path}" + (f" and {png}" if png else ""))
    return out


if __name__ == "__main__":
    main()
