"""A tiny training loop for lazy-mlir-trace tests: 3 identical steps, one graph."""
import sys

import torch

import lazy_core

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
torch.manual_seed(0)
model = torch.nn.Linear(4, 2).to("lazy")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(steps):
    x = torch.randn(8, 4).to("lazy")
    out = model(x)
    loss = (out * out).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    lazy_core.mark_step()
print("loss", round(loss.item(), 4))
