"""Train a small CNN on handwritten digits on the ``lazy`` device (what ``make demo`` runs).

    python examples/mnist.py                         # iree-cpu (the default), scikit-learn digits
    python examples/mnist.py --backend reference     # the correctness oracle; or LAZY_BACKEND=reference
    python examples/mnist.py --data-dir ~/data/mnist --epochs 1   # real MNIST IDX files
    python examples/mnist.py --steps 5 --dump-mlir /tmp/mnist-mlir

The training loop is ordinary PyTorch on ``device="lazy"`` plus one
``lazy_core.mark_step()`` per step: every step's forward, backward and
optimizer update become one compiled graph, compiled once and then served
from the cache (the learning rate changes every step, yet does not
recompile: it is a scalar parameter of the graph). The same model, seeds and
batches also train eagerly on the CPU: the first steps' losses must agree to
float precision, and the final test accuracies must agree (later steps drift
apart by amplified rounding differences, as two CPU libraries would).

Data never comes from the network: MNIST IDX files from ``--data-dir``, or
scikit-learn's bundled 8x8 digits upsampled to 28x28.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from _common import (
    StepTimer,
    add_common_args,
    fmt_ms,
    init_backend,
    lazy_summary,
    max_param_diff,
    print_runtime,
    progress,
    write_json,
)
from torch import nn

import lazy_core


@dataclass
class Digits:
    x_train: torch.Tensor  # [N, 1, 28, 28] float32, normalized
    y_train: torch.Tensor  # [N] int64
    x_test: torch.Tensor
    y_test: torch.Tensor
    source: str


def _read_idx(path: str) -> np.ndarray:
    """An IDX file (the MNIST format): magic, dims as big-endian int32, then uint8 data."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">i4", count=ndim, offset=4)
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(tuple(int(d) for d in dims))


def _find(data_dir: str, stem: str) -> str:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(f"no {stem}[.gz] in {data_dir}")


def _normalize(x_train: torch.Tensor, x_test: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = x_train.mean(), x_train.std()
    return (x_train - mean) / std, (x_test - mean) / std


def load_mnist(data_dir: str) -> Digits:
    """MNIST from local IDX files (train-images-idx3-ubyte etc., optionally gzipped)."""
    def images(stem: str) -> torch.Tensor:
        return torch.from_numpy(_read_idx(_find(data_dir, stem)).copy()).float().div_(255).unsqueeze(1)

    def labels(stem: str) -> torch.Tensor:
        return torch.from_numpy(_read_idx(_find(data_dir, stem)).copy()).long()

    x_train, x_test = _normalize(images("train-images-idx3-ubyte"), images("t10k-images-idx3-ubyte"))
    return Digits(x_train, labels("train-labels-idx1-ubyte"), x_test, labels("t10k-labels-idx1-ubyte"),
                  f"MNIST IDX files in {data_dir}")


def load_sklearn_digits(test_fraction: float = 0.2, seed: int = 0) -> Digits:
    """scikit-learn's 1,797 bundled 8x8 digits, upsampled to MNIST's 28x28."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.from_numpy(bunch.images).float().div_(16).unsqueeze(1)
    x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
    y = torch.from_numpy(bunch.target).long()
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))
    n_test = int(len(y) * test_fraction)
    test, train = perm[:n_test], perm[n_test:]
    x_train, x_test = _normalize(x[train], x[test])
    return Digits(x_train, y[train], x_test, y[test], "scikit-learn digits (8x8 upsampled to 28x28)")


class Net(nn.Module):
    """Two conv blocks and a linear classifier: small enough for the naive reference backend."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)   # 8 x 14 x 14
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)   # 16 x 7 x 7
        return self.fc(x.flatten(1))


#: Steps over which lazy and eager losses must agree to ``--tolerance``. Later on,
#: rounding differences (another summation order in the compiled convolutions)
#: grow as training amplifies them, e.g. where a max-pool winner flips, so the
#: whole run is compared by test accuracy instead.
EARLY_STEPS = 10


def epoch_orders(n: int, batch_size: int, epochs: int, seed: int) -> list[list[torch.Tensor]]:
    """Index batches per epoch. drop_last keeps every batch the same shape: a new shape
    would be a new graph, i.e. a recompile."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(epochs):
        perm = torch.randperm(n, generator=gen)
        out.append([perm[i:i + batch_size] for i in range(0, n - batch_size + 1, batch_size)])
    return out


def _show_loss(bar: Any, loss: torch.Tensor) -> None:
    bar.set_postfix(loss=f"{loss.item():.4f}")


def train(model: nn.Module, device: str, data: Digits, orders: list[list[torch.Tensor]],
          args: argparse.Namespace, label: str) -> tuple[list[float], StepTimer]:
    """The training loop; identical for the lazy device and the CPU except for mark_step."""
    lazy = device == "lazy"
    total = sum(len(o) for o in orders)
    if args.steps:
        total = min(total, args.steps)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # The learning rate changes every step; on the lazy device it is a graph
    # parameter, so this does not recompile.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.1 + 0.9 * (1 - s / total))
    timer = StepTimer(lazy)
    losses: list[torch.Tensor] = []
    model.train()
    for epoch, order in enumerate(orders):
        order = order[: total - len(losses)]
        if not order:
            break
        bar = progress(order, len(order), f"{label} epoch {epoch + 1}/{len(orders)}", args.progress)
        for idx in bar:
            with timer:
                x, y = data.x_train[idx].to(device), data.y_train[idx].to(device)
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                sched.step()
                show = len(losses) % 10 == 0 and hasattr(bar, "set_postfix")
                if lazy:
                    if show:  # runs after the step's graph: reading the loss forces no extra graph
                        lazy_core.add_step_closure(_show_loss, (bar, loss.detach()))
                    lazy_core.mark_step()  # one graph: forward + backward + SGD update
                elif show:
                    _show_loss(bar, loss)
            losses.append(loss.detach())
        timer.window_done()
    return [float(v.item()) for v in losses], timer


@torch.no_grad()
def evaluate(model: nn.Module, device: str, data: Digits, batch_size: int) -> float:
    """Test accuracy. The last batch is padded so every eval batch has one shape."""
    model.eval()
    n = len(data.y_test)
    correct = 0
    for start in range(0, n, batch_size):
        x = data.x_test[start:start + batch_size]
        real = x.shape[0]
        if real < batch_size:
            x = torch.cat([x, x.new_zeros(batch_size - real, *x.shape[1:])])
        pred = model(x.to(device)).argmax(dim=1)
        if device == "lazy":
            lazy_core.mark_step()
        correct += int((pred.cpu()[:real] == data.y_test[start:start + real]).sum())
    return correct / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--data-dir", help="directory with MNIST IDX files (else: scikit-learn digits)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--eval-batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many training steps (0: all)")
    parser.add_argument("--compare-eager", action=argparse.BooleanOptionalAction, default=True,
                        help="also train on the CPU eagerly from the same seed and compare (default: on)")
    parser.add_argument("--tolerance", type=float, default=1e-3,
                        help="largest loss difference vs eager accepted in the first "
                        f"{EARLY_STEPS} steps (exit status 1 above)")
    parser.add_argument("--accuracy-tolerance", type=float, default=0.02,
                        help="largest test-accuracy difference vs eager accepted")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args(argv)

    backend = init_backend(args)
    data = load_mnist(args.data_dir) if args.data_dir else load_sklearn_digits(seed=args.seed)
    print(f"data: {data.source}: {len(data.y_train)} train / {len(data.y_test)} test images")
    print(f"backend: {backend.describe()}")
    orders = epoch_orders(len(data.y_train), args.batch_size, args.epochs, args.seed)

    torch.manual_seed(args.seed)
    cpu_model = Net()
    lazy_model = copy.deepcopy(cpu_model).to("lazy")  # same initial weights

    t0 = time.perf_counter()
    lazy_losses, lazy_timer = train(lazy_model, "lazy", data, orders, args, f"lazy[{args.backend}]")
    lazy_acc = evaluate(lazy_model, "lazy", data, args.eval_batch_size)
    lazy_wall = time.perf_counter() - t0
    summary = lazy_summary()
    results = {
        "backend": args.backend, "data": data.source, "steps": len(lazy_losses),
        "batch_size": args.batch_size, "lazy_accuracy": lazy_acc, "lazy_final_loss": lazy_losses[-1],
        "lazy_ms_per_step": lazy_timer.steady_ms(), "lazy_wall_s": lazy_wall, **summary,
    }

    ok = True
    if args.compare_eager:
        eager_losses, eager_timer = train(cpu_model, "cpu", data, orders, args, "eager[cpu]")
        eager_acc = evaluate(cpu_model, "cpu", data, args.eval_batch_size)
        diffs = [abs(a - b) for a, b in zip(lazy_losses, eager_losses)]
        early_diff, loss_diff = max(diffs[:EARLY_STEPS]), max(diffs)
        weight_diff = max_param_diff(lazy_model, cpu_model)
        ok = early_diff <= args.tolerance and abs(lazy_acc - eager_acc) <= args.accuracy_tolerance
        results.update(eager_accuracy=eager_acc, eager_final_loss=eager_losses[-1],
                       eager_ms_per_step=eager_timer.steady_ms(), max_loss_diff=loss_diff,
                       max_early_loss_diff=early_diff,
                       max_weight_diff=weight_diff, match=ok)

    print()
    print(f"trained {len(lazy_losses)} steps of batch {args.batch_size} on {args.backend} "
          f"in {lazy_wall:.1f} s (final loss {lazy_losses[-1]:.4f})")
    if args.compare_eager:
        print(f"test accuracy:      lazy {lazy_acc:.2%}   eager {results['eager_accuracy']:.2%}")
        print(f"steady-state step:  lazy {fmt_ms(lazy_timer.steady_ms())}   "
              f"eager {fmt_ms(results['eager_ms_per_step'])}   (wall time of this run's steps that "
              f"compiled nothing, back to back as the loop runs them, each epoch ending with a device "
              f"wait; torch threads {torch.get_num_threads()})")
        print(f"vs eager:           max |loss diff| {early_diff:.2e} in the first {EARLY_STEPS} steps, "
              f"{loss_diff:.2e} in all {len(diffs)}; max |weight diff| at the end {weight_diff:.2e}   "
              f"({'match' if ok else 'MISMATCH'})")
    else:
        print(f"test accuracy:      lazy {lazy_acc:.2%}")
        print(f"steady-state step:  lazy {fmt_ms(lazy_timer.steady_ms())}")
    print_runtime(summary)
    if args.dump_mlir:
        print(f"MLIR of each compiled graph: {os.path.abspath(args.dump_mlir)}")
    write_json(args.json, results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
