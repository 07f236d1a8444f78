"""Data-parallel training on the ``lazy`` device with stock ``DistributedDataParallel``.

    python examples/ddp.py                                   # 2 ranks (torch.multiprocessing.spawn)
    python examples/ddp.py --backend iree-cpu --nproc 4
    torchrun --nproc-per-node 2 examples/ddp.py --backend iree-cpu
    LAZY_DIST_CHECK=1 python examples/ddp.py                 # ranks check they trace the same program

Each rank runs ordinary PyTorch DDP code on ``device="lazy"``: the process
group is gloo over loopback (``--pg lazy`` picks the ``"lazy"`` name that
lazy_core registers, gloo underneath), each rank takes its share of every
global batch, DDP all-reduces the gradients, and ``lazy_core.mark_step()``
runs the optimizer step as one graph. Each rank limits its threads
(``lazy_core.dist_setup.limit_threads``) so N ranks do not oversubscribe
the cores.

Rank 0 then checks the result: the same model trained by one CPU process on
the concatenated batches must have the same parameters (DDP averages the
gradients of equal shares, which is the gradient of the whole batch), and
the checkpoint rank 0 saved from its lazy parameters loads in a CPU model.
Data: scikit-learn's 8x8 digits (64 features, 10 classes), never the network.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from _common import add_common_args, write_json
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

import lazy_core
from lazy_core.dist_setup import limit_threads


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))


def load_digits() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """scikit-learn's digits, standardized; the last 297 images are the test set."""
    from sklearn.datasets import load_digits as sk_digits

    data = sk_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    x = (x - x.mean(0)) / (x.std(0) + 1e-3)
    y = torch.tensor(data.target, dtype=torch.int64)
    return x[:1500], y[:1500], x[1500:], y[1500:]


def batches(x: torch.Tensor, y: torch.Tensor, steps: int, global_batch: int, seed: int) -> list[tuple[Any, Any]]:
    """The global batches every rank and the CPU check see (same seed, same order)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        idx = torch.randint(0, len(x), (global_batch,), generator=g)
        out.append((x[idx], y[idx]))
    return out


def train_rank(rank: int, world: int, args: argparse.Namespace) -> None:
    """One rank: stock DDP training on its share of each global batch."""
    threads = limit_threads(args.threads)
    dist.init_process_group(args.pg, rank=rank, world_size=world)
    lazy_core.init(args.backend)
    x, y, x_test, y_test = load_digits()
    share = args.batch_size // world
    model = make_model().to("lazy")
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    times = []
    for xb, yb in batches(x, y, args.steps, args.batch_size, args.seed):
        t0 = time.perf_counter()
        xb, yb = xb[rank * share:(rank + 1) * share], yb[rank * share:(rank + 1) * share]
        opt.zero_grad()
        loss = nn.functional.cross_entropy(ddp(xb.to("lazy")), yb.to("lazy"))
        loss.backward()  # DDP all-reduces the gradient buckets (a cut in the trace)
        opt.step()
        lazy_core.mark_step()  # the optimizer step: one graph
        lazy_core.wait_device_ops()
        times.append(time.perf_counter() - t0)
    final_loss = loss.item()
    if rank == 0:
        path = args.save or os.path.join(os.environ.get("TMPDIR", "/tmp"), f"ddp-example-{os.getpid()}.pt")
        torch.save(ddp.module.state_dict(), path)  # lazy parameters are saved as CPU tensors
        report(args, world, threads, path, final_loss, times, (x, y, x_test, y_test))
    dist.barrier()
    dist.destroy_process_group()


def report(args: argparse.Namespace, world: int, threads: int, path: str, final_loss: float,
           times: list[float], data: tuple) -> None:
    """Rank 0: compare with one CPU process on the whole batches; print and write the results."""
    x, y, x_test, y_test = data
    cpu = make_model()
    opt = torch.optim.SGD(cpu.parameters(), lr=args.lr, momentum=0.9)
    for xb, yb in batches(x, y, args.steps, args.batch_size, args.seed):
        opt.zero_grad()
        nn.functional.cross_entropy(cpu(xb), yb).backward()
        opt.step()
    loaded = make_model()
    loaded.load_state_dict(torch.load(path))
    diff = max(float((a - b).abs().max()) for a, b in zip(loaded.state_dict().values(), cpu.state_dict().values()))
    with torch.no_grad():
        acc = float((loaded(x_test).argmax(1) == y_test).float().mean())
        acc_cpu = float((cpu(x_test).argmax(1) == y_test).float().mean())
    steady = times[3:] or times
    results = {
        "backend": args.backend, "world": world, "threads_per_rank": threads, "steps": args.steps,
        "global_batch": args.batch_size, "final_loss_rank0": final_loss, "max_weight_diff": diff,
        "test_accuracy": acc, "test_accuracy_cpu": acc_cpu, "step_ms_median": statistics.median(steady) * 1e3,
        "compiles_rank0": lazy_core.metrics.counter("compile"),
        "collectives_rank0": {k: v for k, v in lazy_core.metrics.counters().items() if k.startswith("collective::")},
        "match": diff <= args.tolerance,
    }
    print(f"{world} ranks x {threads} thread(s), backend {args.backend}, {args.steps} steps of "
          f"{args.batch_size} images ({args.batch_size // world} per rank)")
    print(f"final loss (rank 0):       {final_loss:.4f}")
    print(f"test accuracy:             {acc:.3f} (one CPU process on the whole batches: {acc_cpu:.3f})")
    print(f"max |w_ddp - w_cpu|:       {diff:.2e} (tolerance {args.tolerance:g})")
    print(f"median step:               {results['step_ms_median']:.2f} ms")
    print(f"checkpoint (rank 0):       {path}")
    write_json(args.json, results)
    if not results["match"]:
        print("MISMATCH: DDP on lazy differs from one process training on the whole batch", file=sys.stderr)
        os._exit(1)  # the other ranks would wait in the barrier for a normal exit


def _spawned(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_WORLD_SIZE=str(world))
    train_rank(rank, world, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--nproc", type=int, default=2, help="ranks to spawn (ignored under torchrun)")
    parser.add_argument("--pg", default="gloo", choices=["gloo", "lazy"], help="process-group backend name")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch (split across ranks)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=None, help="threads per rank (default: cores / ranks)")
    parser.add_argument("--save", help="checkpoint path for rank 0 (default: a temporary file)")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="max parameter difference from one CPU process")
    args = parser.parse_args()
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun sets these and MASTER_*
        train_rank(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
        return
    if args.batch_size % args.nproc:
        parser.error("--batch-size must be divisible by --nproc")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_spawned, args=(args.nproc, port, args), nprocs=args.nproc)


if __name__ == "__main__":
    main()
