"""Graphs with loops (``torch.prim.Loop``, from a decomposition's ``while_loop``) on IREE.

torch-mlir lowers a ``prim.Loop`` to an ``scf.while`` whose "before" region carries the loop
condition as an extra ``i1`` (it forwards one value fewer than it carries). IREE 3.13 compiles
that only where its canonicalizer first rotates the loop into ``scf.if`` + do-while; where it
does not (``special.chebyshev_polynomial_t(x, 5)``: a number for ``n``), the Flow-to-Stream
conversion fails: "failed to legalize unresolved target materialization from ('i1') to
('!stream.resource<*>', 'index')" (upstream: iree-org/iree#24722 is the same loop shape's
assert in the Stream affinity analysis). IREE's host code takes branches between blocks
well, so a graph with a loop has its structured control flow lowered to blocks
(``convert-scf-to-cf``) before global optimization; dispatches form inside each block.
"""

from __future__ import annotations

__all__ = ["loop_flags"]

#: The preprocessing pipeline that turns host-level ``scf`` loops into branches.
SCF_TO_CF = "--iree-preprocessing-pass-pipeline=builtin.module(util.func(convert-scf-to-cf))"


def loop_flags(mlir: str, flags: list[str] | tuple[str, ...]) -> list[str]:
    """The extra ``iree-compile`` flags a graph in ``mlir`` needs for its loops (none without
    loops, or where the flags already choose a preprocessing pipeline)."""
    if "torch.prim.Loop" not in mlir and "scf.while" not in mlir:
        return []
    if any(f.startswith("--iree-preprocessing-pass-pipeline") for f in flags):
        return []
    return [SCF_TO_CF]
