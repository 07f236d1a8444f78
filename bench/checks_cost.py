"""What the device-side index/divisor checks cost per training step (lazy_core.checks).

An embedding + transformer-ish block + cross_entropy step (the index-heavy part
of a BERT step: token/position embeddings, embedding backward, the loss's
targets), timed with ``LAZY_CHECKS`` on and off in alternating child processes.
Reports the median step time (trace + mark_step + the loss read) and the graph's
node count.

    python bench/checks_cost.py --backend iree-cpu --steps 30
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_CHILD = r'''
import json, sys, time, torch, lazy_core
backend, steps = sys.argv[1], int(sys.argv[2])
lazy_core.init(backend)
torch.manual_seed(0)
V, H, S, B = 1000, 64, 32, 8
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(V, H), torch.nn.Embedding(S, H)
        self.block = torch.nn.TransformerEncoderLayer(H, 4, 4 * H, dropout=0.0, batch_first=True)
        self.head = torch.nn.Linear(H, V)
    def forward(self, ids):
        x = self.tok(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return self.head(self.block(x))
m = M().to("lazy")
opt = torch.optim.SGD(m.parameters(), lr=0.01)
times = []
for i in range(steps):
    ids = torch.randint(0, V, (B, S)).to("lazy")
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(m(ids).flatten(0, 1), ids.flatten())
    loss.backward(); opt.step(); opt.zero_grad()
    lazy_core.mark_step()
    loss.item()
    times.append(time.perf_counter() - t0)
g = lazy_core.executor().last_graph()
print(json.dumps({"median_ms": 1e3 * sorted(times[5:])[len(times[5:]) // 2], "nodes": len(g.nodes) if g else 0,
                  "checks": lazy_core.metrics.counter("checks_recorded")}))
'''


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="iree-cpu")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    results: dict[str, list[dict]] = {"1": [], "0": []}
    for _ in range(args.rounds):
        for flag in ("1", "0"):
            env = dict(os.environ, LAZY_CHECKS=flag, PYTHONPATH=root)
            out = subprocess.run([sys.executable, "-c", _CHILD, args.backend, str(args.steps)], env=env,
                                 capture_output=True, text=True, check=True, cwd=root).stdout
            results[flag].append(json.loads(out.strip().splitlines()[-1]))
    for flag, label in (("1", "checks on "), ("0", "checks off")):
        rs = results[flag]
        print(f"{label}: step {statistics.median(r['median_ms'] for r in rs):8.2f} ms  "
              f"graph nodes {rs[0]['nodes']}  checks/step {rs[0]['checks'] // max(args.steps, 1)}")
    on = statistics.median(r["median_ms"] for r in results["1"])
    off = statistics.median(r["median_ms"] for r in results["0"])
    print(f"cost: {on - off:+.2f} ms/step ({100 * (on - off) / off:+.1f}%)")


if __name__ == "__main__":
    main()
