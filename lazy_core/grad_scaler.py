"""``lazy_core.GradScaler``: loss scaling for float16 training that never syncs to the host.

``torch.amp.GradScaler`` decides on the host: ``step`` reads ``found_inf``
with ``.item()`` to skip ``optimizer.step()``. On a lazy device that read
executes the step's graph in the middle of the step, every step. Here the
decision stays in the graph:

* ``unscale_`` computes ``found_inf`` as a 0-dim lazy bool tensor and
  multiplies the gradients by ``1/scale`` in place (lazy ops);
* ``step`` snapshots each parameter and optimizer-state tensor (a lazy value
  is functional, so the snapshot is a clone node, not a copy), runs
  ``optimizer.step()`` unconditionally, then writes back
  ``torch.where(found_inf, old, new)``: a skipped step leaves every value as
  it was;
* ``update`` is ``torch._amp_update_scale_``'s rule written with ``where``:
  back off on inf, grow after ``growth_interval`` clean steps.

Optimizer state that is not a lazy tensor (``Adam``'s CPU ``step`` counter),
and state the step created (an optimizer's first step: skipped, it must stay
absent, not become zeros), cannot be selected in the graph: then ``step``
reads ``found_inf`` once (one host sync) and restores the state as it was;
SGD without dampening, whose zero momentum buffer steps as an absent one, does
not sync at all. ``get_scale`` and ``state_dict`` return Python numbers and read
the device, as PyTorch's do.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from .tensor import LazyTensor, lazy_device

__all__ = ["GradScaler"]

_READY, _UNSCALED, _STEPPED = 0, 1, 2


def _zero_is_absent(optimizer: torch.optim.Optimizer, key: str) -> bool:
    """Whether a zero state entry steps as an absent one: SGD's momentum buffer without
    dampening (its first step sets it to the gradient, as ``0 * momentum + grad`` does).
    Elsewhere it does not (dampening scales that first gradient; ASGD's ``eta`` of 0 stops
    its updates), so a skipped first step must leave the state absent."""
    return (type(optimizer) is torch.optim.SGD and key == "momentum_buffer"
            and all(g.get("dampening", 0) == 0 for g in optimizer.param_groups))


class GradScaler:
    """Sync-free ``torch.amp.GradScaler`` for device ``lazy`` (same constructor and methods)."""

    def __init__(self, device: str = "lazy", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True) -> None:
        if torch.device(device).type != "lazy":
            raise ValueError(f"lazy_core.GradScaler is for device 'lazy', got {device!r}; "
                             "use torch.amp.GradScaler for other devices")
        if growth_factor <= 1.0:
            raise ValueError("The growth factor must be > 1.0.")
        if backoff_factor >= 1.0:
            raise ValueError("The backoff factor must be < 1.0.")
        self._enabled = enabled
        self._init_scale, self._growth_factor, self._backoff_factor = init_scale, growth_factor, backoff_factor
        self._growth_interval = growth_interval
        self._scale: torch.Tensor | None = None
        self._growth_tracker: torch.Tensor | None = None
        self._per_optimizer: dict[int, dict[str, Any]] = defaultdict(self._fresh)

    @staticmethod
    def _fresh() -> dict[str, Any]:
        return {"stage": _READY, "found_inf": None}

    def _lazy_init(self) -> None:
        if self._scale is None:
            self._scale = torch.full((), self._init_scale, dtype=torch.float32, device=lazy_device())
            self._growth_tracker = torch.full((), 0, dtype=torch.int32, device=lazy_device())

    def is_enabled(self) -> bool:
        return self._enabled

    def scale(self, outputs: Any) -> Any:
        """Multiply ``outputs`` (a tensor or nested lists/tuples of tensors) by the scale."""
        if not self._enabled:
            return outputs
        self._lazy_init()
        if isinstance(outputs, torch.Tensor):
            return outputs * self._scale  # PyTorch's promotion: a 0-dim fp16 loss gives a float32 product
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale in place; record found-inf in the graph."""
        if not self._enabled:
            return
        st = self._per_optimizer[id(optimizer)]
        if st["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if st["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        self._lazy_init()
        inv = self._scale.double().reciprocal().float()
        flags = []
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.dtype == torch.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                # Not ~isfinite(g): the compiled backends lower isfinite(nan) to True (see docs/amp.md).
                flags.append((torch.isinf(p.grad) | torch.isnan(p.grad)).any())
                if p.grad.dtype == torch.bfloat16:
                    # As ATen's unscale kernel: float(g) times the float32 inverse, rounded once (the
                    # inverse rounded to bf16 first put a third of the gradients one ulp off).
                    p.grad.copy_(p.grad.float() * inv)
                else:
                    p.grad.mul_(inv.to(p.grad.dtype))
        st["found_inf"] = (torch.stack(flags).any() if flags
                           else torch.zeros((), dtype=torch.bool, device=lazy_device()))
        st["stage"] = _UNSCALED

    def step(self, optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        """``optimizer.step()``, with every value kept as it was where found-inf is set."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        st = self._per_optimizer[id(optimizer)]
        if st["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if st["stage"] == _READY:
            self.unscale_(optimizer)
        found = st["found_inf"]
        params = [p for g in optimizer.param_groups for p in g["params"]]
        old_params = [p.detach().clone() for p in params]
        old_state = {id(p): {k: (v.detach().clone() if isinstance(v, torch.Tensor) else v)
                             for k, v in optimizer.state.get(p, {}).items()} for p in params}
        ret = optimizer.step(*args, **kwargs)
        unselectable = False
        with torch.no_grad():
            for p, old in zip(params, old_params):
                p.copy_(torch.where(found, old, p))
                for k, new in optimizer.state.get(p, {}).items():
                    prev = old_state[id(p)].get(k)
                    if isinstance(new, LazyTensor) and prev is None and _zero_is_absent(optimizer, k):
                        optimizer.state[p][k] = torch.where(found, torch.zeros_like(new), new)
                    elif isinstance(new, LazyTensor) and isinstance(prev, torch.Tensor):
                        optimizer.state[p][k] = torch.where(found, prev, new)
                    elif isinstance(new, torch.Tensor) or new is not prev:
                        unselectable = True
        # State this step created (a first step), or kept on the host (Adam's CPU ``step``), has
        # no value to select in the graph where the step is skipped: an absent entry is not a
        # zero (SGD with dampening, ASGD's ``eta``), and a half-restored state made the next
        # step raise KeyError (Adam, RMSprop, NAdam). Those steps read found-inf once and
        # restore the state exactly as it was.
        if unselectable and bool(found.cpu()):
            for p in params:
                if p in optimizer.state:
                    before = old_state[id(p)]
                    if before:
                        optimizer.state[p] = dict(before)
                    else:
                        del optimizer.state[p]
        st["stage"] = _STEPPED
        return ret

    def update(self, new_scale: float | torch.Tensor | None = None) -> None:
        """Back off or grow the scale, in the graph; reset the per-optimizer stages."""
        if not self._enabled:
            return
        self._lazy_init()
        if new_scale is not None:
            value = new_scale if isinstance(new_scale, torch.Tensor) else torch.tensor(float(new_scale))
            self._scale = value.to(device=lazy_device(), dtype=torch.float32)
        else:
            flags = [st["found_inf"] for st in self._per_optimizer.values() if st["found_inf"] is not None]
            if not flags:
                raise AssertionError("No inf checks were recorded prior to update.")
            found = torch.stack(flags).any()
            grown = self._growth_tracker + 1
            grow_now = grown >= self._growth_interval
            scale = self._scale
            self._scale = torch.where(found, scale * self._backoff_factor,
                                      torch.where(grow_now, scale * self._growth_factor, scale))
            self._growth_tracker = torch.where(found | grow_now, torch.zeros_like(grown), grown)
        self._per_optimizer = defaultdict(self._fresh)

    def get_scale(self) -> float:
        """The current scale as a Python float (reads the device, as PyTorch's does)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.cpu())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def state_dict(self) -> dict[str, Any]:
        if not self._enabled:
            return {}
        tracker = 0 if self._growth_tracker is None else int(self._growth_tracker.cpu())
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": tracker}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._scale = torch.full((), float(state_dict["scale"]), dtype=torch.float32, device=lazy_device())
        self._growth_tracker = torch.full((), int(state_dict["_growth_tracker"]), dtype=torch.int32,
                                          device=lazy_device())
