"""Trace a HuggingFace transformer's training step (forward + backward + AdamW) on ``lazy``.

    python examples/bert.py                          # tiny BERT, masked LM, reference backend
    python examples/bert.py --backend iree-cpu       # the IREE CPU backend
    python examples/bert.py --model gpt2 --steps 6   # tiny GPT-2, causal LM
    python examples/bert.py --print-mlir full        # the whole torch-dialect step
    python examples/bert.py --backend iree-cpu --amp bf16   # mixed precision (docs/amp.md)
    python examples/bert.py --dump-mlir /tmp/bert    # every compiled graph, to files

The model is built from a small config (random weights, nothing from the
hub, no network), once on the CPU; a deep copy moves to the lazy device, so
both start from the same weights (tied embeddings stay tied). Dropout is on,
at HF's default 0.1 (``--dropout``): lazy dropout draws its masks from
PyTorch's CPU generator, so seeding each step the same way gives both runs
the same masks and the runs stay comparable. Each step is one ``mark_step()``: the whole
step becomes one torch-dialect function that the backend compiles once; the
first one or two steps differ (AdamW creates its state) and compile, the
rest hit the cache. Both runs see the same batches; losses and final weights
are compared with eager PyTorch on the CPU.

On the ``reference`` backend (``--backend reference``) LLVM compiles the step's naive loops at
-O2, which takes a minute or more per graph for this model;
``LAZY_REFERENCE_OPT_LEVEL=0`` compiles several times faster; the default
``iree-cpu`` is the fast path.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import copy
import os
import re
import sys
import time
from typing import Any

import torch
from _common import (
    StepTimer,
    add_common_args,
    fmt_ms,
    init_backend,
    lazy_summary,
    max_param_diff,
    print_runtime,
    write_json,
)
from torch import nn

import lazy_core


def build_model(name: str, vocab: int, hidden: int, layers: int, heads: int, max_len: int,
                dropout: float = 0.1) -> nn.Module:
    """A randomly initialised HF model from a small config (no download)."""
    import transformers

    transformers.logging.set_verbosity_error()
    if name == "bert":
        cfg = transformers.BertConfig(
            vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
            intermediate_size=4 * hidden, max_position_embeddings=max_len,
            hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, attn_implementation="eager",
        )
        return transformers.BertForMaskedLM(cfg)
    if name == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=max_len,
            resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout, attn_implementation="eager",
        )
        return transformers.GPT2LMHeadModel(cfg)
    raise ValueError(f"unknown model {name!r}")


def make_batches(model: str, steps: int, batch: int, seq: int, vocab: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Random token batches of one fixed shape (a new shape would be a new graph)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        ids = torch.randint(5, vocab, (batch, seq), generator=gen)
        if model == "bert":
            # Masked LM: predict 15% of the positions, replaced by a [MASK] id.
            masked = torch.rand(batch, seq, generator=gen) < 0.15
            masked[:, 0] = True  # at least one target per row
            labels = torch.where(masked, ids, torch.full_like(ids, -100))
            ids = torch.where(masked, torch.full_like(ids, 4), ids)
        else:
            labels = ids.clone()  # causal LM: the model shifts labels itself
        out.append({"input_ids": ids, "labels": labels})
    return out


def autocast_for(device: str, amp: str | None) -> Any:
    """Mixed precision for ``device``: lazy_core.autocast on lazy, torch.autocast on the CPU."""
    if amp is None:
        return contextlib.nullcontext()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[amp]
    return lazy_core.autocast(dtype=dtype) if device == "lazy" else torch.autocast(device, dtype=dtype)


def train(model: nn.Module, device: str, batches: list[dict[str, torch.Tensor]], lr: float,
          on_step: Any = None, seed: int = 0, amp: str | None = None) -> tuple[list[float], StepTimer]:
    lazy = device == "lazy"
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    timer = StepTimer(lazy)
    losses = []
    model.train()
    for i, batch in enumerate(batches):
        torch.manual_seed(seed + i)  # the same dropout masks in both runs
        with timer:
            with autocast_for(device, amp):
                out = model(**{k: v.to(device) for k, v in batch.items()})
            out.loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if lazy:
                lazy_core.mark_step()
        losses.append(out.loss.detach())
        if on_step is not None:
            on_step(i)
    return [float(v.item()) for v in losses], timer


def step_mlir() -> str | None:
    """The torch-dialect MLIR of the graph that ran last (lowered here if the
    backend, like ``eager``, compiles no MLIR itself)."""
    comp = lazy_core.last_computation()
    text = getattr(comp, "mlir", None)
    if text is None:
        graph = lazy_core.executor().last_graph()
        if graph is None:
            return None
        from lazy_mlir import lowering

        text = lowering.lower_graph(graph).mlir
    return text


def describe_mlir(text: str, full: bool) -> str:
    if full:
        return text
    ops = collections.Counter(re.findall(r"= (torch\.(?:aten|prim)\.[\w.]+)", text))
    sig = next((line.strip() for line in text.splitlines() if "func.func" in line), "")
    n_args = len(re.findall(r"%arg\d+:", sig))
    n_results = sig.split("->", 1)[1].count("vtensor") if "->" in sig else 0
    head = sig.split("(", 1)[0]
    lines = [f"{head}(...{n_args} arguments) -> ({n_results} results)",
             f"  {sum(ops.values())} torch ops, {len(text.splitlines())} lines; most used:"]
    lines += [f"    {n:5d}  {op}" for op, n in ops.most_common(12)]
    lines.append("  (--print-mlir full prints it all; --dump-mlir DIR writes it to files)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    parser.add_argument("--model", choices=["bert", "gpt2"], default="bert")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--dropout", type=float, default=0.1, help="dropout probability (HF's default 0.1)")
    parser.add_argument("--print-mlir", choices=["summary", "full", "none"], default="summary")
    parser.add_argument("--compare-eager", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--tolerance", type=float, default=None,
                        help="largest loss difference vs eager accepted (exit status 1 above); "
                             "default 1e-3, 3e-2 with --amp")
    parser.add_argument("--amp", choices=["bf16", "fp16"], default=None,
                        help="autocast the forward (lazy_core.autocast; eager: torch.autocast('cpu'))")
    args = parser.parse_args(argv)
    if args.tolerance is None:
        args.tolerance = 3e-2 if args.amp else 1e-3

    backend = init_backend(args)
    torch.manual_seed(args.seed)
    cpu_model = build_model(args.model, args.vocab, args.hidden, args.layers, args.heads, args.seq_len,
                            args.dropout)
    lazy_model = copy.deepcopy(cpu_model).to("lazy")
    n_params = sum(p.numel() for p in cpu_model.parameters())
    print(f"{args.model}: {n_params / 1e6:.2f}M parameters, hidden {args.hidden}, {args.layers} layers, "
          f"{args.heads} heads; batch {args.batch_size} x {args.seq_len} tokens; backend {backend.describe()}")
    batches = make_batches(args.model, args.steps, args.batch_size, args.seq_len, args.vocab, args.seed)

    per_step: list[dict[str, Any]] = []
    last = {"compile": 0, "cache_hit": 0, "t": time.perf_counter()}

    def on_step(i: int) -> None:
        now = time.perf_counter()
        compiles, hits = lazy_core.metrics.counter("compile"), lazy_core.metrics.counter("cache_hit")
        per_step.append({"step": i, "ms": (now - last["t"]) * 1e3,
                         "compiles": compiles - last["compile"], "cache_hits": hits - last["cache_hit"]})
        print(f"  lazy step {i}: {per_step[-1]['ms']:8.1f} ms  compiles +{per_step[-1]['compiles']}  "
              f"cache hits +{per_step[-1]['cache_hits']}", flush=True)
        last.update(compile=compiles, cache_hit=hits, t=time.perf_counter())

    lazy_losses, lazy_timer = train(lazy_model, "lazy", batches, args.lr, on_step, args.seed, args.amp)
    summary = lazy_summary()
    mlir = step_mlir()
    if mlir and args.print_mlir != "none":
        print("\nMLIR of the training step (torch dialect):")
        print(describe_mlir(mlir, args.print_mlir == "full"))
    if mlir and args.dump_mlir:
        os.makedirs(args.dump_mlir, exist_ok=True)
        with open(os.path.join(args.dump_mlir, f"{args.model}_train_step.torch.mlir"), "w") as f:
            f.write(mlir)

    results: dict[str, Any] = {
        "model": args.model, "backend": args.backend, "steps": args.steps, "lazy_losses": lazy_losses,
        "lazy_ms_per_step": lazy_timer.steady_ms(), "per_step": per_step, **summary,
    }
    ok = True
    print()
    if args.compare_eager:
        eager_losses, eager_timer = train(cpu_model, "cpu", batches, args.lr, seed=args.seed, amp=args.amp)
        loss_diff = max(abs(a - b) for a, b in zip(lazy_losses, eager_losses))
        weight_diff = max_param_diff(lazy_model, cpu_model)
        ok = loss_diff <= args.tolerance
        results.update(eager_losses=eager_losses, eager_ms_per_step=eager_timer.steady_ms(),
                       max_loss_diff=loss_diff, max_weight_diff=weight_diff, match=ok)
        for i, (a, b) in enumerate(zip(lazy_losses, eager_losses)):
            print(f"step {i}: loss lazy {a:.6f}   eager {b:.6f}")
        print(f"vs eager:           max |loss diff| {loss_diff:.2e}   max |weight diff| {weight_diff:.2e}   "
              f"({'match' if ok else 'MISMATCH'}, loss tolerance {args.tolerance:g})")
        print(f"steady-state step:  lazy {fmt_ms(lazy_timer.steady_ms())}   "
              f"eager {fmt_ms(eager_timer.steady_ms())}")
    else:
        print(f"losses: {', '.join(f'{v:.6f}' for v in lazy_losses)}")
        print(f"steady-state step:  lazy {fmt_ms(lazy_timer.steady_ms())}")
    first = per_step[0]["ms"] if per_step else 0.0
    print_runtime(summary, f"; first step {first / 1e3:.1f} s")
    write_json(args.json, results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
