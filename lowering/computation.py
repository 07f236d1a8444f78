"""Computation: a lowered graph as the backends receive it."""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass(frozen=True)
class ArgInfo:
    """One function argument: which graph input it is and its type.

    ``dtype`` is what the function boundary carries; ``logical_dtype``, when
    set, is the tensor's own dtype. A bf16 tensor's int16 carrier holds its
    bits, any other carrier its value (bf16 as f32): ``to_carrier`` and
    ``from_carrier`` convert host tensors either way.
    """

    kind: str  # "device_data" or "scalar_pack" (every scalar parameter of one dtype, 1-D)
    shape: tuple[int, ...]
    dtype: torch.dtype
    #: The tensor's own dtype when the function boundary carries another (see above).
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

    A computation read back from an on-disk cache (``from_record``) has no
    live module (``module`` is None) until something needs one: ``mlir`` is
    the stored text, and ``asm``, ``clone_module`` and the pipelines parse it
    on first use, so a warm process that only executes never pays for it.
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
    # The zlib-compressed text of a computation read from a record (no module yet).
    _packed_text: bytes | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def mlir(self) -> str:
        """The module as text, with source locations."""
        if self._text is None:
            if self.module is None and self._packed_text is not None:
                self._text = zlib.decompress(self._packed_text).decode()
            else:
                self._text = self.module.operation.get_asm(enable_debug_info=True)
        return self._text

    def live_module(self) -> Any:
        """``module``, parsed from the stored text first if this computation came from a record."""
        if self.module is None:
            from torch_mlir import ir

            from .context import mlir_context

            self.module = ir.Module.parse(self.mlir, context=mlir_context())
        return self.module

    def asm(self, locations: bool = True, inline_locations: bool = False) -> str:
        """The module as text; ``inline_locations`` prints ``loc(...)`` on each op, not as aliases."""
        return self.live_module().operation.get_asm(
            enable_debug_info=locations, use_local_scope=inline_locations
        )

    def to_string(self) -> str:
        return str(self.live_module())

    def to_bytecode(self) -> bytes:
        import io

        buf = io.BytesIO()
        self.live_module().operation.write_bytecode(buf)
        return buf.getvalue()

    def clone_module(self) -> Any:
        """A fresh copy of the module (pipelines mutate modules in place).

        Bytecode keeps locations and round-trips several times faster than text.
        """
        from torch_mlir import ir

        return ir.Module.parse(self.to_bytecode(), context=self.live_module().context)

    # -- records: what an on-disk cache keeps of a computation ---------------------------
    def to_record(self) -> bytes:
        """Signature, names and the MLIR text (compressed): everything the executor,
        dumps and diagnostics read from a computation, without the live module,
        so a cache can hand it back in another process with no lowering."""
        head = json.dumps({
            "func_name": self.func_name, "graph_hash": self.graph_hash, "form": self.form,
            "args": [[a.kind, list(a.shape), _dtype_name(a.dtype), _dtype_name(a.logical_dtype)] for a in self.args],
            "results": [[list(r.shape), _dtype_name(r.dtype), _dtype_name(r.logical_dtype)] for r in self.results],
            "node_locations": self.node_locations, "full_route": self.full_route,
        }).encode()
        return struct.pack("<I", len(head)) + head + zlib.compress(self.mlir.encode(), 1)

    @classmethod
    def from_record(cls, record: bytes) -> Computation:
        """The computation ``to_record`` wrote; its module is parsed only if asked for."""
        (n,) = struct.unpack_from("<I", record)
        head = json.loads(record[4:4 + n])
        computation = cls(
            module=None,
            func_name=head["func_name"],
            graph_hash=head["graph_hash"],
            args=[ArgInfo(kind, tuple(shape), _dtype(d), _dtype(ld)) for kind, shape, d, ld in head["args"]],
            results=[ResultInfo(tuple(shape), _dtype(d), _dtype(ld)) for shape, d, ld in head["results"]],
            form=head["form"],
            node_locations=head["node_locations"],
            full_route=head["full_route"],
        )
        computation._packed_text = record[4 + n:]
        return computation

    def signature(self) -> str:
        def fmt(shape: tuple[int, ...], dtype: torch.dtype) -> str:
            return f"{list(shape)}:{str(dtype).replace('torch.', '')}"

        ins = ", ".join(f"{a.kind}{fmt(a.shape, a.dtype)}" for a in self.args)
        outs = ", ".join(fmt(r.shape, r.dtype) for r in self.results)
        return f"@{self.func_name}({ins}) -> ({outs})"


#: Dtype pairs whose carrier holds the bits, not the value (numpy, hence most
#: runtimes' host side, has no bfloat16).
_BIT_CARRIERS = {(torch.bfloat16, torch.int16), (torch.int16, torch.bfloat16)}


def to_carrier(t: torch.Tensor, carrier: torch.dtype) -> torch.Tensor:
    """Host tensor ``t`` as a boundary ``carrier`` of that dtype: bf16's bits
    as int16, any other pair by value (bf16 -> f32, exact)."""
    if t.dtype == carrier:
        return t
    if (t.dtype, carrier) in _BIT_CARRIERS:
        return t.contiguous().view(carrier)
    return t.to(carrier)


def from_carrier(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The ``dtype`` tensor that boundary carrier ``t`` holds (``to_carrier`` undone)."""
    return to_carrier(t, dtype)


def _dtype_name(dtype: torch.dtype | None) -> str | None:
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _dtype(name: str | None) -> torch.dtype | None:
    if name is None:
        return None
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in a computation record")
    return dtype
