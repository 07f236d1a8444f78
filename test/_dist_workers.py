"""Rank programs for test_distributed.py (a module of their own: spawn pickles them by name).

Each worker joins a 2-rank gloo group over loopback with one thread, runs its
program on lazy tensors and ``torch.save``s what the parent compares with
eager CPU results into ``<out>/rank<r>.pt``.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Any

import torch
import torch.distributed as dist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _join(rank: int, world: int, port: int, backend: str, pg: str = "gloo") -> Any:
    import lazy_core
    from lazy_core.dist_setup import limit_threads

    limit_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(pg, rank=rank, world_size=world)
    lazy_core.init(backend)
    return lazy_core


def _graphs() -> list[str]:
    """Stable hashes of every graph this rank runs (registered as an executor hook)."""
    import lazy_core

    seen: list[str] = []
    lazy_core.executor().hooks.append(lambda graph, entry, reason: seen.append(graph.stable_hash))
    return seen


def run(rank: int, fn_name: str, world: int, port: int, out: str, args: dict) -> None:
    """Entry point for spawn: run ``fn_name`` and save its results (or its error)."""
    try:
        result = globals()[fn_name](rank, world, port, out=out, **args)
    except BaseException as e:  # reported to the parent, which fails the test
        result = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    torch.save(result, os.path.join(out, f"rank{rank}.pt"))
    if dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:
            pass


# -- programs -----------------------------------------------------------------------


def suite(rank: int, world: int, port: int, out: str, backends: list[str]) -> dict:
    """Everything test_distributed checks, in one launch (starting ranks costs more than the tests).

    The default group is stock ``gloo``; a second group uses the ``"lazy"``
    process-group name. The divergence checks come last: they leave the
    ranks' collective numbering apart on purpose.
    """
    start = time.monotonic()
    lazy_core = _join(rank, world, port, backends[0], "gloo")
    lazy_group = dist.new_group(backend="lazy")
    res: dict[str, Any] = {"seconds": {"join": time.monotonic() - start}}

    def timed(key: str, value: Any) -> None:
        res[key] = value
        res["seconds"][key] = time.monotonic() - start - sum(res["seconds"].values())

    for i, backend in enumerate(backends):
        lazy_core.init(backend)
        lazy_core.metrics.reset()
        group = lazy_group if i % 2 else None
        timed(f"collectives/{backend}", dict(collectives(rank, world, group), group="lazy" if group else "gloo"))
    timed("ddp", train_ddp(rank, out, backends, steps=10, global_batch=16))
    for backend in backends:
        lazy_core.init(backend)
        timed(f"in_flight/{backend}", in_flight(rank, delay=3.0))
    timed("in_flight_failure", in_flight_failure(rank, timeout=3.0))
    timed("independent_groups", independent_groups(rank, timeout=20.0))
    os.environ["LAZY_DIST_CHECK"] = "1"
    timed("diverge/different_graph", diverge(rank, "different_graph"))
    os.environ["LAZY_DIST_CHECK_TIMEOUT"] = "3"
    timed("diverge/missing", diverge(rank, "missing"))
    return res


def collectives(rank: int, world: int, group: Any) -> dict:
    """Every collective on lazy tensors whose inputs are pending (computed in the trace)."""
    import lazy_core

    r = float(rank + 1)
    res: dict[str, Any] = {}

    t = torch.arange(6.0).to("lazy") * r
    dist.all_reduce(t, group=group)
    res["all_reduce_sum"] = t.cpu()
    m = torch.arange(6.0).to("lazy") - 3 * r
    dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
    res["all_reduce_max"] = m.cpu()

    # Regression: the reference backend's host copy aliases the device buffer;
    # gloo wrote into it, changing a tensor that shares the buffer.
    shared = torch.full((3,), r).to("lazy")
    twin = torch.empty(3, device="lazy")
    twin.copy_(shared)
    dist.all_reduce(shared, group=group)
    res["alias_all_reduced"] = shared.cpu()
    res["alias_twin"] = twin.cpu()

    b = torch.arange(4.0).to("lazy") + 10 * rank
    dist.broadcast(b, src=1, group=group)
    res["broadcast"] = b.cpu()

    outs = [torch.zeros(2, 3, device="lazy") for _ in range(world)]
    dist.all_gather(outs, torch.ones(2, 3).to("lazy") * r, group=group)
    res["all_gather_list"] = [o.cpu() for o in outs]

    into = torch.zeros(world * 2, 3, device="lazy")
    dist.all_gather_into_tensor(into, torch.ones(2, 3).to("lazy") * r + 0.5, group=group)
    res["all_gather_into_tensor"] = into.cpu()

    # Outputs that are views of one buffer (all_gather into chunks).
    buf = torch.zeros(world * 2, device="lazy")
    dist.all_gather(list(buf.chunk(world)), torch.tensor([r, -r]).to("lazy"), group=group)
    res["all_gather_views"] = buf.cpu()

    rs = torch.zeros(3, device="lazy")
    dist.reduce_scatter(rs, [torch.full((3,), r * (i + 1)).to("lazy") for i in range(world)], group=group)
    res["reduce_scatter"] = rs.cpu()

    rst = torch.zeros(2, device="lazy")
    dist.reduce_scatter_tensor(rst, torch.arange(2.0 * world).to("lazy") * r, group=group)
    res["reduce_scatter_tensor"] = rst.cpu()

    red = torch.arange(3.0).to("lazy") * r
    dist.reduce(red, dst=0, group=group)
    res["reduce"] = red.cpu()  # rank 0: the sum; other ranks: whatever gloo left (compared with gloo on CPU)

    gat = [torch.zeros(2, device="lazy") for _ in range(world)] if rank == 0 else None
    dist.gather(torch.tensor([r, 2 * r]).to("lazy"), gat, dst=0, group=group)
    res["gather"] = [g.cpu() for g in gat] if gat else None

    sc = torch.zeros(2, device="lazy")
    dist.scatter(sc, [torch.full((2,), 10.0 + i).to("lazy") for i in range(world)] if rank == 1 else None,
                 src=1, group=group)
    res["scatter"] = sc.cpu()

    a2a = torch.zeros(world, device="lazy")
    dist.all_to_all_single(a2a, torch.arange(float(world)).to("lazy") + 10 * rank, group=group)
    res["all_to_all_single"] = a2a.cpu()

    msg = torch.full((2,), 7.0).to("lazy") * r
    if rank == 0:
        dist.send(msg, dst=1, group=group)
    elif rank == 1:
        dist.recv(msg, src=0, group=group)
    res["send_recv"] = msg.cpu()

    # Functional collectives (torch.distributed._functional_collectives, used by DTensor):
    # they used to return each rank's own input.
    import torch.distributed._functional_collectives as fc

    g = group if group is not None else dist.group.WORLD
    res["functional_all_reduce"] = fc.all_reduce(torch.arange(3.0).to("lazy") * r, "sum", g).cpu()
    res["functional_all_gather"] = fc.all_gather_tensor(torch.full((2,), r).to("lazy"), 0, g).cpu()
    res["functional_reduce_scatter"] = fc.reduce_scatter_tensor(
        torch.arange(2.0 * world).to("lazy") * r, "sum", 0, g).cpu()

    dist.barrier(group=group)
    # Tracing continues from the results: one more op on a collective's output.
    res["after"] = (t * 2 + 1).cpu()
    res["counters"] = {k: v for k, v in lazy_core.metrics.counters().items() if k.startswith("collective::")}
    return res


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


class _WithUnused(torch.nn.Module):
    """``_mlp`` beside a layer the forward never uses (DDP's ``find_unused_parameters``: its
    reducer zero-fills the unused slots of a bucket, which IREE 3.13 failed to compile:
    ``backends/iree/chained_fills.py``)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = _mlp()
        self.unused = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def _batches(steps: int, global_batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(global_batch, 8, generator=g), torch.randn(global_batch, 4, generator=g))
            for _ in range(steps)]


#: DDP configurations trained per backend: every one on iree-cpu; on reference (whose JIT
#: compiles every graph anew in each process) the default and the one with most graphs.
VARIANTS = {
    "iree-cpu": ["default", "bucket_view", "small_buckets", "no_sync", "unused_parameter"],
    "reference": ["default", "small_buckets"],
}


def train_ddp(rank: int, out: str, backends: list[str], steps: int, global_batch: int) -> dict:
    """``steps`` SGD steps of stock DDP on this rank's share of each global batch, per backend and variant."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    import lazy_core

    world = dist.get_world_size()
    graphs = _graphs()
    res: dict[str, Any] = {"graphs": {}, "compile_fallbacks": {}}
    started = time.monotonic()
    share = global_batch // world
    for backend in backends:
        lazy_core.init(backend)
        variants = VARIANTS[backend]
        for variant in variants:
            del graphs[:]
            lazy_core.metrics.reset()
            model = (_WithUnused() if variant == "unused_parameter" else _mlp()).to("lazy")
            kwargs: dict[str, Any] = {}
            if variant == "unused_parameter":
                kwargs["find_unused_parameters"] = True
            if variant == "bucket_view":
                kwargs["gradient_as_bucket_view"] = True
            if variant == "small_buckets":
                kwargs["bucket_cap_mb"] = 0.0003  # ~80 floats: one bucket per parameter
            ddp = DDP(model, **kwargs)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
            for x, y in _batches(steps, global_batch):
                x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
                opt.zero_grad()
                if variant == "no_sync":
                    # Two micro-batches: the first accumulates without communicating.
                    half = share // 2
                    with ddp.no_sync():
                        loss = ((ddp(x[:half].to("lazy")) - y[:half].to("lazy")) ** 2).mean() / 2
                        loss.backward()
                    loss = ((ddp(x[half:].to("lazy")) - y[half:].to("lazy")) ** 2).mean() / 2
                    loss.backward()
                else:
                    loss = ((ddp(x.to("lazy")) - y.to("lazy")) ** 2).mean()
                    loss.backward()
                opt.step()
                lazy_core.mark_step()
            key = f"{backend}/{variant}"
            trained = model.net if variant == "unused_parameter" else model
            res[key] = {k: v.cpu() for k, v in trained.state_dict().items()}
            res.setdefault("seconds", {})[key] = time.monotonic() - started
            started = time.monotonic()
            res["graphs"][key] = list(graphs)
            # Graphs that failed to compile ran op by op: DDP's bucket views must lower.
            res["compile_fallbacks"][key] = lazy_core.metrics.counter("fallback::compile_error")
            if rank == 0 and variant == variants[0]:
                # A checkpoint saved by rank 0 from lazy parameters loads in one CPU process.
                torch.save(ddp.module.state_dict(), os.path.join(out, f"ckpt-{backend}.pt"))
            dist.barrier()
    return res


def in_flight(rank: int, delay: float) -> dict:
    """Rank 1 reaches an all_reduce ``delay`` s after rank 0: rank 0's call returns at once and
    runs another graph meanwhile; only reading the result waits (lazy_core.collective_queue)."""
    import lazy_core

    def other(device: str = "lazy") -> float:  # a graph that does not read the collective's tensor
        return (torch.ones(4, 4).to(device) @ torch.full((4, 4), 2.0).to(device)).sum().item()

    other()  # compiled before the clock starts
    t = torch.arange(6.0).to("lazy") * (rank + 1)
    lazy_core.mark_step()
    before = lazy_core.metrics.counter("collective_async")
    dist.barrier()
    if rank == 1:
        time.sleep(delay)
    start = time.monotonic()
    dist.all_reduce(t)
    issued = time.monotonic() - start
    computed = other()
    ran_other = time.monotonic() - start
    value = t.cpu()
    res = {"issued": issued, "ran_other": ran_other, "read": time.monotonic() - start, "value": value,
           "other": computed, "other_eager": other("cpu"), "async": lazy_core.metrics.counter("collective_async") - before}

    # wait_device_ops() waits for collectives in flight too (it returned at once).
    u = torch.ones(2).to("lazy") * (rank + 1)
    dist.barrier()
    if rank == 1:
        time.sleep(delay / 2)
    start = time.monotonic()
    dist.all_reduce(u)
    lazy_core.wait_device_ops()
    res["wait_device_ops"] = time.monotonic() - start
    res["waited_value"] = u.cpu()

    # CPU tensors beside lazy ones are the caller's memory: the call waits for them (the
    # outputs were still zeros after the call returned).
    outs = [torch.zeros(3), torch.zeros(3)]
    dist.barrier()
    if rank == 1:
        time.sleep(delay / 3)
    dist.all_gather(outs, torch.full((3,), float(rank + 1)).to("lazy"))
    res["cpu_outputs"] = torch.cat(outs).clone()
    return res


def independent_groups(rank: int, timeout: float) -> dict:
    """Collectives on two groups complete each on its own: rank 0 issues A (group 1) then B (group
    2) and reads B; rank 1 joins B, then waits for rank 0's message before joining A. Reading B must
    not wait for A (it timed out when one thread waited for the collectives in issue order)."""
    from datetime import timedelta

    g1, g2, g3 = (dist.new_group(timeout=timedelta(seconds=timeout)) for _ in range(3))
    a = torch.ones(2).to("lazy") * (rank + 1)
    b = torch.ones(2).to("lazy") * 10 * (rank + 1)
    flag = torch.zeros(1)
    start = time.monotonic()
    if rank == 0:
        dist.all_reduce(a, group=g1)
        dist.all_reduce(b, group=g2)
        got_b = b.cpu()
        read_b = time.monotonic() - start
        dist.send(flag + 1, dst=1, group=g3)
    else:
        dist.all_reduce(b, group=g2)
        dist.recv(flag, src=0, group=g3)
        dist.all_reduce(a, group=g1)
        got_b, read_b = b.cpu(), None
    return {"a": a.cpu(), "b": got_b, "read_b": read_b, "seconds": time.monotonic() - start}


def in_flight_failure(rank: int, timeout: float) -> dict:
    """Rank 1 never joins rank 0's all_reduce on a group with a ``timeout`` s limit: the call
    returned, so rank 0's read must raise the process group's error, not hang or return stale data."""
    from datetime import timedelta

    group = dist.new_group(timeout=timedelta(seconds=timeout))
    t = torch.ones(3).to("lazy") * 5
    start = time.monotonic()
    raised = None
    if rank == 0:
        try:
            dist.all_reduce(t, group=group)  # LAZY_DIST_ASYNC=0: raises here
            t.cpu()
        except RuntimeError as e:
            raised = f"{type(e).__name__}: {e}"
    else:
        time.sleep(timeout + 3)
    return {"raised": raised, "seconds": time.monotonic() - start}


def diverge(rank: int, mode: str) -> dict:
    """Rank 1 runs a different program; with LAZY_DIST_CHECK both ranks must raise, not hang."""
    from lazy_core.dist_check import RankDivergenceError

    t = torch.ones(4).to("lazy") * 2
    dist.all_reduce(t)  # collective #1: the same on both ranks
    start = time.monotonic()
    try:
        if mode == "different_graph":
            if rank == 1:
                t = t.exp()  # an extra op only rank 1 traces
                dist.all_reduce(t)  # rank-1 line
            else:
                dist.all_reduce(t)  # rank-0 line
        elif mode == "missing":
            if rank == 0:
                dist.all_reduce(t)  # rank 1 never gets here
            else:
                time.sleep(float(os.environ["LAZY_DIST_CHECK_TIMEOUT"]) + 3)
                return {"raised": None, "seconds": time.monotonic() - start}
        t.cpu()
    except RankDivergenceError as e:
        return {"raised": str(e), "seconds": time.monotonic() - start}
    return {"raised": None, "seconds": time.monotonic() - start}
