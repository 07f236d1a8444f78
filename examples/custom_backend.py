"""A complete vendor backend in one page: linalg-on-tensors compiled by IREE for the CPU.

A vendor implements two methods. ``lower`` (turning the traced graph into
torch-dialect MLIR) comes from ``MlirBackend``; setting ``lowering_target``
asks it for torch-mlir's linalg-on-tensors form instead, which is what this
"vendor compiler" consumes. ``compile`` hands that MLIR to IREE with the
vendor's own flags; ``execute_computation`` runs the result. Device data are
host tensors (MlirBackend's default transfers); a real accelerator would
override ``make_backend_data``/``to_host`` too. Then it registers itself and
trains a few MNIST steps, checking every loss against eager PyTorch.

    python examples/custom_backend.py [--steps 5]
"""

from __future__ import annotations

import argparse
import copy
import sys
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from _common import max_param_diff

import lazy_core
from lazy_core import BackendData, BackendDevice
from lazy_mlir.backends.mlir_backend import MlirBackend


class LinalgIreeBackend(MlirBackend):
    """torch -> linalg-on-tensors (torch-mlir) -> IREE llvm-cpu -> iree.runtime."""

    name = "vendor-linalg-iree"
    lowering_target = "linalg-on-tensors"  # what compile() receives after lower_to_target
    flags = ["--iree-llvmcpu-target-cpu=host", "--iree-input-demote-f64-to-f32=false"]

    def lowering_options(self) -> dict[str, Any]:
        # torch-mlir's linalg for max pooling's backward exceeds iree-compile's 32 KB stack
        # limit per dispatch when the indices come from lazy-mlir's NaN-exact scan (the
        # default); this vendor takes torch-mlir's pooling op (a NaN in a window then gets no
        # index: see lowering/pooling.py).
        return {"exact_max_pool": False}

    def cache_key(self) -> str:  # compiler flags change the code: part of the cache key
        return f"{self.name}:{' '.join(self.flags)}"

    def compile(self, computations):
        import iree.compiler as ireec
        import iree.runtime as ireert

        executables = []
        for comp in computations:
            linalg = self.lower_to_target(comp)  # raises CompileError naming the op and user line
            vmfb = ireec.compile_str(linalg.mlir, target_backends=["llvm-cpu"], input_type="auto",
                                     extra_args=self.flags)
            ctx = ireert.SystemContext(config=ireert.Config("local-task"))
            ctx.add_vm_module(ireert.VmModule.copy_buffer(ctx.instance, vmfb))
            executables.append((ctx, ctx.modules.module[comp.func_name], len(comp.results)))
        return executables

    def execute_computation(self, executable, arguments, device: BackendDevice) -> list[BackendData]:
        _ctx, function, n_results = executable
        results = function(*[a.handle.numpy() for a in arguments])
        results = results if n_results != 1 else [results]
        out = [torch.from_numpy(np.array(r.to_host(), copy=True)) for r in results]
        return [BackendData(t, t.shape, t.dtype, device) for t in out]


lazy_core.register_backend(LinalgIreeBackend.name, LinalgIreeBackend)


def main(argv: list[str] | None = None) -> int:
    from mnist import Net, load_sklearn_digits

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args(argv)

    lazy_core.init(LinalgIreeBackend.name)  # the name it registered under
    data = load_sklearn_digits()
    torch.manual_seed(0)
    cpu_model = Net()
    lazy_model = copy.deepcopy(cpu_model).to("lazy")
    losses: dict[str, list[float]] = {"lazy": [], "cpu": []}
    for device, model in (("lazy", lazy_model), ("cpu", cpu_model)):
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for step in range(args.steps):
            idx = slice(step * 32, step * 32 + 32)
            loss = F.cross_entropy(model(data.x_train[idx].to(device)), data.y_train[idx].to(device))
            loss.backward()
            opt.step()
            opt.zero_grad()
            if device == "lazy":
                lazy_core.mark_step()  # compile (first time) and execute on the vendor backend
            losses[device].append(loss.item())
    for step, (a, b) in enumerate(zip(losses["lazy"], losses["cpu"])):
        print(f"step {step}: loss {a:.6f} on {LinalgIreeBackend.name}, {b:.6f} eager")
    worst = max(max_param_diff(lazy_model, cpu_model),
                max(abs(a - b) for a, b in zip(losses["lazy"], losses["cpu"])))
    m = lazy_core.metrics
    print(f"max |loss or weight diff| vs eager: {worst:.2e}; compiles {m.counter('compile')}, "
          f"cache hits {m.counter('cache_hit')}, "
          f"fallbacks {sum(v for k, v in m.counters().items() if k.startswith('fallback::'))}")
    return 0 if worst <= args.tolerance and m.counter("fallback::compile_error") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
