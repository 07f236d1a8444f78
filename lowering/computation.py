"""Computation: a lowered graph as the backends receive it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class ArgInfo:
    """One function argument: which graph input it is and its type."""

    kind: str  # "device_data" or "scalar_param"
    shape: tuple[int, ...]
    dtype: torch.dtype
    #: The tensor's own dtype when the function boundary uses a wider one.
    logical_dtype: torch.dtype | None = None


@dataclass(frozen=True)
class ResultInfo:
    shape: tuple[int, ...]
    dtype: torch.dtype
    logical_dtype: torch.dtype | None = None


@dataclass
class Computation:
    """A torch-dialect (or further lowered) MLIR module with its signature.

    ``module`` is the live ``torch_mlir.ir.Module``; ``mlir`` the text of the
    torch-dialect form as imported (with locations). Pipelines in
    ``lowering.pipelines`` return new Computations; this one is not mutated.
    """

    module: Any
    func_name: str
    graph_hash: str
    args: list[ArgInfo]
    results: list[ResultInfo]
    form: str = "torch"
    #: func.func op locations are "file":line; this maps a node index to its location string.
    node_locations: list[str] = field(default_factory=list)
    #: True when this torch-backend form came from the full (shape-refining) pipeline.
    full_route: bool = field(default=False, repr=False, compare=False)
    # The text is printed once: backends, caches and dumps all ask for it.
    _text: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def mlir(self) -> str:
        """The module as text, with source locations."""
        if self._text is None:
            self._text = self.module.operation.get_asm(enable_debug_info=True)
        return self._text

    def asm(self, locations: bool = True, inline_locations: bool = False) -> str:
        """The module as text; ``inline_locations`` prints ``loc(...)`` on each op, not as aliases."""
        return self.module.operation.get_asm(
            enable_debug_info=locations, use_local_scope=inline_locations
        )

    def to_string(self) -> str:
        return str(self.module)

    def to_bytecode(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.module.operation.write_bytecode(buf)
        return buf.getvalue()

    def clone_module(self) -> Any:
        """A fresh copy of the module (pipelines mutate modules in place).

        Bytecode keeps locations and round-trips several times faster than text.
        """
        from torch_mlir import ir

        return ir.Module.parse(self.to_bytecode(), context=self.module.context)

    def signature(self) -> str:
        def fmt(shape: tuple[int, ...], dtype: torch.dtype) -> str:
            return f"{list(shape)}:{str(dtype).replace('torch.', '')}"

        ins = ", ".join(f"{a.kind}{fmt(a.shape, a.dtype)}" for a in self.args)
        outs = ", ".join(fmt(r.shape, r.dtype) for r in self.results)
        return f"@{self.func_name}({ins}) -> ({outs})"
