"""torch.distributed on device ``lazy``: 2 ranks, gloo over loopback, one thread each.

Every collective is compared with the same collective on CPU tensors (computed
here from its definition), and DDP training with the model on ``lazy`` with
the parameters of one CPU process training on the concatenated batch. The rank
programs live in ``_dist_workers.py``; each test spawns its ranks with
``torch.multiprocessing`` like a user would.
"""

from __future__ import annotations

import os
import socket
import time

import _dist_workers as workers
import pytest
import torch
import torch.multiprocessing as mp
from conftest import backend_unavailable_reason

import lazy_core

WORLD = 2
pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn: str, out: str, timeout: float, **args: object) -> list[dict]:
    """Run ``_dist_workers.<fn>`` on WORLD ranks; their saved results, in rank order."""
    os.environ.setdefault("LAZY_REFERENCE_OPT_LEVEL", "0")  # compile time dominates at these sizes
    ctx = mp.start_processes(workers.run, args=(fn, WORLD, _free_port(), out, args), nprocs=WORLD,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=max(0.1, deadline - time.monotonic())):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"{fn}: ranks still running after {timeout} s (hang)")
    results = [torch.load(os.path.join(out, f"rank{r}.pt"), weights_only=False) for r in range(WORLD)]
    for r, res in enumerate(results):
        assert "error" not in res, f"rank {r}: {res.get('traceback', res)}"
    return results


BACKENDS = ["iree-cpu", "reference"]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], str]:
    """One launch of 2 ranks running every program (``_dist_workers.suite``); starting ranks
    (torch, MLIR and DDP's import of torch._dynamo) costs more than the programs."""
    available = [b for b in BACKENDS if not backend_unavailable_reason(b)]
    if not available:
        pytest.skip("neither iree-cpu nor reference can run here")
    out = str(tmp_path_factory.mktemp("ddp"))
    # 400 s was too little on a loaded machine (2 cores, load 15+: the ranks compile every
    # graph twice); a hang still fails before pytest-timeout's 1200 s per test.
    return spawn("suite", out, timeout=1000, backends=available), out


def _results(ranks: tuple[list[dict], str], key: str) -> list[dict]:
    results, _ = ranks
    if key not in results[0]:
        pytest.skip(f"{key}: backend unavailable")
    return [r[key] for r in results]


# -- collectives ---------------------------------------------------------------------


def _expected_collectives() -> dict[str, object]:
    """The same collectives on CPU tensors, from their definitions."""
    ranks = [float(r + 1) for r in range(WORLD)]
    gathered = [torch.ones(2, 3) * r for r in ranks]
    total = sum(torch.arange(6.0) * r for r in ranks)
    return {
        "all_reduce_sum": total,
        "all_reduce_max": torch.stack([torch.arange(6.0) - 3 * r for r in ranks]).amax(0),
        "alias_all_reduced": torch.full((3,), sum(ranks)),
        "broadcast": torch.arange(4.0) + 10,
        "all_gather_list": gathered,
        "all_gather_into_tensor": torch.cat([g + 0.5 for g in gathered]),
        "all_gather_views": torch.cat([torch.tensor([r, -r]) for r in ranks]),
        "reduce_scatter_tensor": None,  # per rank, below
        "after": total * 2 + 1,
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_collective_equals_cpu(backend: str, ranks: tuple[list[dict], str]) -> None:
    """iree-cpu used to keep each rank's value; reference let gloo write into a shared buffer.
    The first backend runs on the stock ``gloo`` group, the second on a ``"lazy"`` group."""
    results = _results(ranks, f"collectives/{backend}")
    expected = _expected_collectives()
    ranks = [float(r + 1) for r in range(WORLD)]
    for rank, res in enumerate(results):
        for name, want in expected.items():
            if want is None:
                continue
            got = res[name]
            if isinstance(want, list):
                assert len(got) == len(want)
                for g, w in zip(got, want):
                    torch.testing.assert_close(g, w, rtol=0, atol=0, msg=f"rank {rank} {name}")
            else:
                torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"rank {rank} {name}")
        # The twin shared the all-reduced tensor's buffer before the collective: unchanged.
        torch.testing.assert_close(res["alias_twin"], torch.full((3,), ranks[rank]), rtol=0, atol=0)
        # reduce_scatter: rank r gets sum over ranks of inputs[r].
        torch.testing.assert_close(res["reduce_scatter"], torch.full((3,), sum(ranks) * (rank + 1)))
        full = sum(torch.arange(2.0 * WORLD) * r for r in ranks)
        torch.testing.assert_close(res["reduce_scatter_tensor"], full[rank * 2:(rank + 1) * 2])
        if rank == 0:
            torch.testing.assert_close(res["reduce"], torch.arange(3.0) * sum(ranks))
            torch.testing.assert_close(res["gather"], [torch.tensor([r, 2 * r]) for r in ranks])
        torch.testing.assert_close(res["scatter"], torch.full((2,), 10.0 + rank))
        torch.testing.assert_close(res["all_to_all_single"], torch.tensor([rank + 10.0 * s for s in range(WORLD)]))
        torch.testing.assert_close(res["send_recv"], torch.full((2,), 7.0))
        torch.testing.assert_close(res["functional_all_reduce"], torch.arange(3.0) * sum(ranks))
        torch.testing.assert_close(res["functional_all_gather"], torch.cat([torch.full((2,), r) for r in ranks]))
        torch.testing.assert_close(res["functional_reduce_scatter"], full[rank * 2:(rank + 1) * 2])
        assert res["counters"]["collective::allreduce_"] == 3


# -- DDP training ------------------------------------------------------------------------

STEPS, GLOBAL_BATCH = 10, 16


def _cpu_reference() -> dict[str, torch.Tensor]:
    """One process, the concatenated batch, eager CPU."""
    model = workers._mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in workers._batches(STEPS, GLOBAL_BATCH):
        opt.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        opt.step()
    return model.state_dict()


@pytest.mark.parametrize("backend", BACKENDS)
def test_ddp_training_matches_one_process_on_the_whole_batch(backend: str, ranks: tuple[list[dict], str]) -> None:
    """Stock DDP (default buckets, gradient_as_bucket_view, one bucket per parameter, no_sync):
    parameters after 10 steps equal one CPU process's (<= 1e-6), both ranks compile the same
    graphs, and rank 0's checkpoint loads in one CPU process."""
    results = _results(ranks, "ddp")
    if f"{backend}/default" not in results[0]:
        pytest.skip(f"backend {backend} unavailable")
    tmp_path = ranks[1]
    want = _cpu_reference()
    for variant in workers.VARIANTS[backend]:
        key = f"{backend}/{variant}"
        for rank, res in enumerate(results):
            for name, w in want.items():
                torch.testing.assert_close(res[key][name], w, rtol=0, atol=1e-6,
                                           msg=lambda m, k=key, n=name, r=rank: f"{k} rank {r} {n}: {m}")
        g0, g1 = results[0]["graphs"][key], results[1]["graphs"][key]
        assert g0 == g1, f"{key}: ranks ran different graphs"
        assert g0, key
        assert results[0]["compile_fallbacks"][key] == 0, f"{key}: graphs ran eagerly after a compile error"
    ckpt = torch.load(os.path.join(tmp_path, f"ckpt-{backend}.pt"))
    model = workers._mlp()
    model.load_state_dict(ckpt)
    assert all(t.device.type == "cpu" for t in ckpt.values())
    for name, w in want.items():
        torch.testing.assert_close(model.state_dict()[name], w, rtol=0, atol=1e-6)


def test_bucket_slot_views_lower_and_match_cpu(backend: lazy_core.BackendImpl) -> None:
    """DDP's bucket slots are ``as_strided`` chunks of a flat buffer, written through with
    ``copy_``: recorded as view/slice they compile (as_strided and as_strided_scatter did not)."""
    def program(dev: str) -> torch.Tensor:
        flat = torch.zeros(10, device=dev)
        slot = flat.as_strided((2, 4), (4, 1), 2)
        slot.copy_(torch.arange(8.0).reshape(2, 4).to(dev))
        flat.as_strided((2,), (1,), 0).add_(5)
        return torch.cat([flat, slot.reshape(-1) * 2])

    lazy_core.metrics.reset()
    got = program("lazy").cpu()
    torch.testing.assert_close(got, program("cpu"), rtol=0, atol=0)
    assert lazy_core.metrics.counter("fallback::compile_error") == 0


# -- collectives in flight -------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_collective_returns_before_its_peer_arrives(backend: str, ranks: tuple[list[dict], str]) -> None:
    """Rank 1 is 3 s late to an all_reduce. Rank 0's call returns at once and a graph that does not
    read the result runs meanwhile; reading the result waits for rank 1 and gives the sum."""
    results = _results(ranks, f"in_flight/{backend}")
    want = torch.arange(6.0) * 3
    for res in results:
        torch.testing.assert_close(res["value"], want, rtol=0, atol=0)
        assert res["other"] == res["other_eager"] and res["async"] == 1, res
    first = results[0]
    assert first["issued"] < 1.0 and first["ran_other"] < 1.5, first
    assert first["read"] > 2.0, first  # it did wait for rank 1
    # wait_device_ops() waits for the collective in flight (rank 1 is 1.5 s late).
    assert first["wait_device_ops"] > 1.0, first
    for res in results:
        torch.testing.assert_close(res["waited_value"], torch.full((2,), 3.0), rtol=0, atol=0)
        # CPU outputs beside a lazy input hold the result when the call returns.
        torch.testing.assert_close(res["cpu_outputs"], torch.tensor([1.0] * 3 + [2.0] * 3), rtol=0, atol=0)


def test_collectives_on_two_groups_complete_each_on_its_own(ranks: tuple[list[dict], str]) -> None:
    """Rank 0 reads the result of its second collective (group 2) while its first (group 1) waits
    for rank 1, which joins it only after hearing from rank 0: no wait on the first, no timeout."""
    results = _results(ranks, "independent_groups")
    for res in results:
        torch.testing.assert_close(res["a"], torch.full((2,), 3.0), rtol=0, atol=0)
        torch.testing.assert_close(res["b"], torch.full((2,), 30.0), rtol=0, atol=0)
    assert results[0]["read_b"] < 10, results[0]


def test_a_failed_collective_in_flight_raises_at_the_read(ranks: tuple[list[dict], str]) -> None:
    """Rank 1 never joins (3 s group timeout): rank 0's all_reduce returned, and its read raises the
    process group's error instead of hanging or returning the unreduced value."""
    results = _results(ranks, "in_flight_failure")
    first = results[0]
    assert first["raised"] is not None and "Timed out" in first["raised"], first
    assert first["seconds"] < 30, first


# -- rank divergence check -------------------------------------------------------------------


def test_divergent_rank_raises_on_both_ranks_naming_both_lines(ranks: tuple[list[dict], str]) -> None:
    """Rank 1 traces an extra op and calls all_reduce from another line: both ranks raise at once."""
    results = _results(ranks, "diverge/different_graph")
    src = open(workers.__file__).read().splitlines()
    line0 = next(i + 1 for i, s in enumerate(src) if "# rank-0 line" in s)
    line1 = next(i + 1 for i, s in enumerate(src) if "# rank-1 line" in s)
    for rank, res in enumerate(results):
        msg = res["raised"]
        assert msg is not None, f"rank {rank} did not raise"
        assert "ranks diverged at collective #2" in msg, msg
        assert f"_dist_workers.py:{line0}" in msg and f"_dist_workers.py:{line1}" in msg, msg
        assert res["seconds"] < 30


def test_missing_rank_is_named_after_the_timeout(ranks: tuple[list[dict], str]) -> None:
    """Rank 1 never reaches rank 0's all_reduce: rank 0 raises after LAZY_DIST_CHECK_TIMEOUT (3 s)."""
    results = _results(ranks, "diverge/missing")
    msg = results[0]["raised"]
    assert msg is not None and "rank 1 did not reach collective #4" in msg, msg
    assert 3 <= results[0]["seconds"] < 30


def test_fills_into_disjoint_bucket_slots_hash_alike_in_either_order(backend: lazy_core.BackendImpl) -> None:
    """DDP's reducer zero-fills unused parameters' bucket slots in the order of an unordered_map keyed
    by AccumulateGrad addresses (differs per process): both orders must record the same graph."""
    from lazy_core.graph import build_graph

    def program(order: list[int], dev: str) -> torch.Tensor:
        flat = torch.empty(484, device=dev)
        slots = {212: flat.as_strided((16, 16), (16, 1), 212), 468: flat.as_strided((16,), (1,), 468)}
        for offset in order:
            slots[offset].zero_()
        flat.as_strided((8, 4), (4, 1), 0).copy_(torch.ones(8, 4).to(dev) * 3)
        return flat

    a, b = program([212, 468], "lazy"), program([468, 212], "lazy")
    assert build_graph([a._lz_storage.value]).stable_hash == build_graph([b._lz_storage.value]).stable_hash
    want = program([468, 212], "cpu")
    for got in (a, b):
        torch.testing.assert_close(got.cpu()[:32], want[:32], rtol=0, atol=0)
        torch.testing.assert_close(got.cpu()[212:], want[212:], rtol=0, atol=0)
