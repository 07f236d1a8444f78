"""Buffer donation: a graph result written into the buffer of the argument it replaces.

A training step turns every parameter and every optimizer-state tensor into
a new value of the same shape and dtype; functionally each is a fresh result
buffer, and the old one is freed when the tensor's device data moves on. When
the caller can promise that nothing else will ever read the old buffer (the
lazy executor can, at a barrier where every live tensor is part of the
graph), the new value may be written into the old buffer instead: no result
allocation, half the peak memory for weights and optimizer state.

IREE 3.13 supports this from its torch input: a function argument typed as
a mutable ``!torch.tensor`` (instead of a value ``!torch.vtensor``), read
with ``torch.copy.to_vtensor`` and written with
``torch.overwrite.tensor.contents`` (the form iree-turbine emits for in-place
updates), becomes a ``hal.tensor.alias`` of the caller's buffer view in
IREE's torch function conversion: the result is stored into that buffer, and
IREE orders the reads of the old value before the write.

``donate_arguments`` rewrites the torch-dialect text handed to iree-compile
that way. Donated results are no longer returned; the backend hands the
argument's buffer view out as the result instead (see ``IreeBackend``).
The rewrite runs after torch-mlir's own pipelines, which only accept value
tensors.
"""

from __future__ import annotations

from collections.abc import Mapping

#: argument index -> result index whose new value overwrites that argument's buffer.
Donations = Mapping[int, int]


def normalize(donated: Donations | None, n_args: int, n_results: int) -> dict[int, int]:
    """``donated`` as a plain dict, checked: indices in range, each result given to one argument."""
    out = dict(sorted((int(a), int(r)) for a, r in (donated or {}).items()))
    if any(not 0 <= a < n_args for a in out) or any(not 0 <= r < n_results for r in out.values()):
        raise ValueError(f"donation {out} out of range for {n_args} arguments and {n_results} results")
    if len(set(out.values())) != len(out):
        raise ValueError(f"donation {out} gives one result to two arguments")
    return out


def key_suffix(donated: Mapping[int, int]) -> str:
    """The donation pattern as text for cache keys (empty when nothing is donated)."""
    return ",".join(f"{a}>{r}" for a, r in sorted(donated.items()))


def donate_arguments(mlir: str, func_name: str, donated: Mapping[int, int]) -> tuple[str, dict[int, int]]:
    """``mlir`` with each donated argument made mutable and overwritten by its result.

    Returns the new text and the donations actually applied: a pair is
    skipped when the result is the argument itself (nothing to write) or has
    another shape or dtype (IREE cannot alias buffers of different sizes).
    """
    if not donated:
        return mlir, {}
    from torch_mlir import ir
    from torch_mlir.dialects import torch as torch_d

    with ir.Context() as ctx, ir.Location.unknown():
        torch_d.register_dialect(ctx)
        module = ir.Module.parse(mlir)
        func = _find_func(module, func_name)
        block = func.regions[0].blocks[0]
        ret = block.operations[len(block.operations) - 1]
        results = list(ret.operands)
        applied: dict[int, int] = {}
        for a, r in sorted(donated.items()):
            arg = block.arguments[a]
            value = results[r]
            if value == arg or str(value.type) != str(arg.type) or not str(arg.type).startswith("!torch.vtensor<"):
                continue
            applied[a] = r
            vtensor = arg.type
            with ir.InsertionPoint.at_block_begin(block):
                read = ir.Operation.create("torch.copy.to_vtensor", results=[vtensor], operands=[arg])
            arg.replace_all_uses_except(read.result, read)
            arg.set_type(ir.Type.parse(str(vtensor).replace("!torch.vtensor<", "!torch.tensor<", 1)))
            # The return now reads the copy: overwrite with what it returned for ``r``.
            value = ret.operands[r]
            with ir.InsertionPoint(ret):
                ir.Operation.create("torch.overwrite.tensor.contents", operands=[value, arg])
        if not applied:
            return mlir, {}
        kept = [v for i, v in enumerate(ret.operands) if i not in set(applied.values())]
        with ir.InsertionPoint(ret), ret.location:
            ir.Operation.create("func.return", operands=kept)
        ret.erase()
        func.attributes["function_type"] = ir.TypeAttr.get(
            ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in kept])
        )
        return module.operation.get_asm(enable_debug_info=True), applied


def _find_func(module, name: str):  # noqa: ANN001, ANN202 - torch_mlir.ir types
    for op in module.body.operations:
        if op.operation.name == "func.func" and op.attributes["sym_name"].value == name:
            return op.operation
    raise ValueError(f"no func.func @{name} in the module")


def results_in_order(
    outs: list, args: list, donated: Mapping[int, int], n_results: int
) -> list:
    """The function's results in the graph's order: donated ones are their argument's buffer."""
    by_result = {r: a for a, r in donated.items()}
    it = iter(outs)
    return [args[by_result[r]] if r in by_result else next(it) for r in range(n_results)]
