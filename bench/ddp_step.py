"""DDP training-step time: stock DistributedDataParallel on lazy (iree-cpu) against eager DDP on the CPU.

Same model, same seeded global batches, same ranks (2 by default, gloo over
loopback, ``--threads`` per rank, default 1), one run. Each system runs in
its own driver process, which spawns the ranks; rank 0 reports.

* ``eager``: the model on the CPU, stock DDP;
* ``lazy-mlir/<backend>``: the model on ``lazy``, stock DDP; each bucket's
  all-reduce is a cut (``lazy_core.distributed``), the optimizer step one
  graph at ``mark_step()``. The cut only issues the all-reduce: its result
  arrives in the background while the rest of the backward is traced and
  run (``lazy_core.collective_queue``);
* ``lazy-mlir/<backend>:sync``: the same with ``LAZY_DIST_ASYNC=0``: each cut
  waits for its communication. The difference is the overlap.

Reported per system: median ms/step after warm-up (wall, rank 0, each step
ends when its results are ready), the time the training thread spent in
collective calls per step (lazy: the segment's results copied out, the
all-reduce issued, and, for ``:sync``, waited for), the time collectives
were in flight on the communication thread, graphs per step, compiles after
warm-up, and the max parameter difference from eager after the run.

Models: MLP 784-256-128-10 (global batch 64, SGD); tiny BERT (hidden 128,
2 layers, 2 heads, global batch 8 x 64 tokens, AdamW), as in train_step.py.

    python bench/ddp_step.py [--model mlp,bert] [--systems eager,lazy-mlir/iree-cpu] [--steps 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from typing import Any

import _common as C

MODELS = ("mlp", "bert")
SYSTEMS = ("eager", "lazy-mlir/iree-cpu", "lazy-mlir/iree-cpu:sync")


def build(model_name: str, world: int, steps: int) -> tuple[Any, list[tuple[Any, Any]], Any, Any]:
    """(model, global batches, loss_fn(model, x, y), optimizer factory), seeded."""
    import torch

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    if model_name == "mlp":
        model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                                    torch.nn.ReLU(), torch.nn.Linear(128, 10))
        batches = [(torch.randn(64, 784, generator=g), torch.randint(0, 10, (64,), generator=g))
                   for _ in range(steps)]

        def loss_fn(m: Any, x: Any, y: Any) -> Any:
            return torch.nn.functional.cross_entropy(m(x), y)

        def opt(params: Any) -> Any:
            return torch.optim.SGD(params, lr=0.01)

        return model, batches, loss_fn, opt
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                        max_position_embeddings=128,
                        num_labels=2)
    config._attn_implementation = "eager"
    model = BertForSequenceClassification(config)
    batches = [(torch.randint(0, config.vocab_size, (8, 64), generator=g), torch.randint(0, 2, (8,), generator=g))
               for _ in range(steps)]

    def bert_loss(m: Any, x: Any, y: Any) -> Any:
        return m(input_ids=x, labels=y).loss

    def adamw(params: Any) -> Any:
        return torch.optim.AdamW(params, lr=1e-4)

    return model, batches, bert_loss, adamw


def _timer_seconds(name: str) -> float:
    """Seconds recorded so far by lazy_core timer ``name`` (``collective``: the calls on the
    training thread; ``collective_in_flight``: waits of the communication thread)."""
    import lazy_core

    return lazy_core.metrics.snapshot()["timers"].get(name, (0, 0.0))[1]


def rank_main(rank: int, world: int, port: int, args: argparse.Namespace, out: str) -> None:
    """One rank: warm-up and timed DDP steps; rank 0 writes the results to ``out``."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    lazy = args.system.startswith("lazy-mlir/")
    if lazy:
        if args.system.endswith(":sync"):
            os.environ["LAZY_DIST_ASYNC"] = "0"
        import lazy_core
        from lazy_core.dist_setup import limit_threads

        limit_threads(args.threads)
    else:
        torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if lazy:
        lazy_core.init(args.system.split("/", 1)[1].split(":")[0])
    device = "lazy" if lazy else "cpu"
    model, batches, loss_fn, make_opt = build(args.model, world, args.warmup + args.steps)
    model = model.to(device)
    ddp = DDP(model)
    opt = make_opt(ddp.parameters())
    times, comm, flight, graphs = [], [], [], []
    for i, (x, y) in enumerate(batches):
        share = x.shape[0] // world
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        if lazy:
            comm_before = _timer_seconds("collective")
            flight_before = _timer_seconds("collective_in_flight")
            execs = lazy_core.metrics.counter("execute")
        torch.manual_seed(1000 + 10 * i + rank)  # dropout at its default: the same masks in both runs
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = loss_fn(ddp, x.to(device), y.to(device))
        loss.backward()
        opt.step()
        if lazy:
            lazy_core.mark_step()
            lazy_core.wait_device_ops()
        dt = time.perf_counter() - t0
        if i == args.warmup and lazy:
            compiles_before = lazy_core.metrics.counter("compile")
        if i >= args.warmup:
            times.append(dt)
            if lazy:
                comm.append(_timer_seconds("collective") - comm_before)
                flight.append(_timer_seconds("collective_in_flight") - flight_before)
                graphs.append(lazy_core.metrics.counter("execute") - execs)
    if rank == 0:
        params = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        result = {
            "system": args.system, "model": args.model, "world": world, "threads_per_rank": args.threads,
            "steps": args.steps, "warmup": args.warmup,
            "step_ms": statistics.median(times) * 1e3, "step_ms_min": min(times) * 1e3,
            "collective_ms": statistics.median(comm) * 1e3 if comm else None,
            "in_flight_ms": statistics.median(flight) * 1e3 if flight else None,
            "graphs_per_step": statistics.median(graphs) if graphs else None,
            "compiles_after_warmup": (lazy_core.metrics.counter("compile") - compiles_before) if lazy else None,
            "final_loss": float(loss.detach().cpu()),
        }
        torch.save({"result": result, "params": params}, out)
    dist.barrier()
    dist.destroy_process_group()


def worker(args: argparse.Namespace) -> None:
    """One system: spawn the ranks, emit rank 0's results (and save its parameters)."""
    import torch
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = os.path.join(args.tmp, f"{args.system.replace('/', '_')}-{args.model}.pt")
    mp.spawn(rank_main, args=(args.world, port, args, out), nprocs=args.world)
    C.emit(torch.load(out)["result"])


def param_diff(tmp: str, system: str, model: str) -> float | None:
    import torch

    def load(s: str) -> Any:
        path = os.path.join(tmp, f"{s.replace('/', '_')}-{model}.pt")
        return torch.load(path)["params"] if os.path.exists(path) else None

    a, b = load(system), load("eager")
    if a is None or b is None:
        return None
    return max(float((a[k].double() - b[k].double()).abs().max()) for k in a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mlp,bert")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="threads per rank")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--system", help=argparse.SUPPRESS)
    parser.add_argument("--tmp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    tmp = tempfile.mkdtemp(prefix="ddp-bench-")
    rows, results = [], []
    for model in args.model.split(","):
        for system in args.systems.split(","):
            r = C.run_worker("ddp_step.py", ["--worker", "--system", system, "--model", model, "--world",
                                             str(args.world), "--threads", str(args.threads), "--steps",
                                             str(args.steps), "--warmup", str(args.warmup), "--tmp", tmp],
                             env=C.thread_env(args.threads), timeout=1800)
            r.setdefault("system", system)
            r.setdefault("model", model)
            if "error" not in r and system != "eager":
                r["max_param_diff_vs_eager"] = param_diff(tmp, system, model)
            results.append(r)
            print(f"{model} {system}: {C.error_summary(r) if 'error' in r else 'done'}", file=sys.stderr)
    for model in args.model.split(","):
        eager = next((r for r in results if r["model"] == model and r["system"] == "eager" and "error" not in r), None)
        for r in (r for r in results if r["model"] == model):
            if "error" in r:
                rows.append([model, r["system"], C.error_summary(r)] + ["-"] * 6)
                continue
            ratio = r["step_ms"] / eager["step_ms"] if eager else None
            rows.append([model, r["system"], r["step_ms"], ratio, r.get("collective_ms"), r.get("in_flight_ms"),
                         r.get("graphs_per_step"),
                         r.get("compiles_after_warmup"), r.get("max_param_diff_vs_eager")])
    print(C.table(["model", "system", "ms/step", "x eager", "in collective calls ms", "in flight ms",
                   "graphs/step", "recompiles",
                   "max |dw| vs eager"], rows,
                  title=f"DDP step, {args.world} ranks x {args.threads} thread(s), gloo loopback"))
    path = C.write_json("ddp_step", {"machine": C.machine_info(), "results": results})
    print(f"JSON: {path}")


if __name__ == "__main__":
    sys.path.insert(0, str(C.REPO_ROOT))
    main()
