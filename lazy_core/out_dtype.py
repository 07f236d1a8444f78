"""Eager's verdict on writing a result into a tensor of another dtype.

An ``out=`` or in-place op whose result dtype differs from the tensor it writes follows one
of two rules in eager PyTorch. TensorIterator ops cast (``torch.add(i, i, out=f64)``), under
``c10::canCast`` (``op_schema.check_cast``). Most other kernels want the result's dtype
exactly and raise: ``mm``, ``gather``, ``index_select``, ``where``, ``neg``, ``round``,
``tril``, ``amax``, ``log_softmax``, ``index_put_`` with values of another dtype, ... (an
OpInfo sweep found 60 such ops). Their meta kernels mostly skip the check, so the tracer
would cast where eager raises.

Which rule an op follows is the CPU kernel's to say, and it does not depend on values: the
op runs once per dtype signature on small stand-ins (ones; zeros for indices), then once
more with the written tensors in the result's dtypes. Only when the first call raises and
the second does not is the dtype the cause, and the first error is eager's. An error from
the stand-in values themselves (both calls raise) decides nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from .op_schema import INDEX_ARGS as _INDEX_ARGS

#: (op, dtype signature) -> the error to raise (its class and arguments), or None (eager
#: writes the result). Not the exception itself: its traceback holds the frames that held
#: the lazy tensors, which would stay alive with it.
_verdicts: dict[tuple, tuple[type, tuple] | None] = {}
_VERDICTS_LIMIT = 4096
#: Stand-ins of more elements than this are not made; the cast stays as it was.
_MAX_ELEMENTS = 1 << 20


def check_out_dtypes(op: Any, args: tuple, kwargs: dict, written: list[Any],
                     result_dtypes: list[torch.dtype]) -> None:
    """Raise eager's error when ``op`` may not write results of ``result_dtypes`` into
    the tensors ``written`` (the same objects as in ``args``/``kwargs``)."""
    if all(t.dtype == d for t, d in zip(written, result_dtypes)):
        return
    key = (op, _signature(args), _signature(kwargs), tuple(result_dtypes))
    if key not in _verdicts:
        if len(_verdicts) >= _VERDICTS_LIMIT:
            _verdicts.clear()
        _verdicts[key] = _ask_cpu(op, args, kwargs, written, result_dtypes)
    verdict = _verdicts[key]
    if verdict is not None:
        kind, error_args = verdict
        try:
            fresh = kind(*error_args)
        except Exception:  # noqa: BLE001 - an exception type that takes other arguments
            fresh = RuntimeError(*error_args)
        raise fresh


def _signature(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return ("T", x.dtype, x.dim())
    if isinstance(x, dict):
        return tuple((k, _signature(v)) for k, v in x.items())
    if isinstance(x, list | tuple):
        return tuple(_signature(v) for v in x)
    return type(x)


def _elements(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, list | tuple):
        return sum(_elements(v) for v in x)
    return 0


def _ask_cpu(op: Any, args: tuple, kwargs: dict, written: list[Any],
             result_dtypes: list[torch.dtype]) -> tuple[type, tuple] | None:
    if _elements(list(args) + list(kwargs.values())) > _MAX_ELEMENTS:
        return None
    retyped = {id(t): d for t, d in zip(written, result_dtypes)}

    def stand_in(x: Any, name: str | None, as_result: bool) -> Any:
        if isinstance(x, torch.Tensor):
            dtype = retyped.get(id(x), x.dtype) if as_result else x.dtype
            zero = name in _INDEX_ARGS and dtype != torch.bool  # a mask selects all
            return torch.empty_strided(tuple(x.shape), x.stride(), dtype=dtype).fill_(0 if zero else 1)
        if isinstance(x, list | tuple):
            return type(x)(stand_in(v, name, as_result) for v in x)
        return x

    names = [a.name for a in op._schema.arguments]

    def call(as_result: bool) -> tuple[type, tuple] | None:
        cargs = [stand_in(a, names[i] if i < len(names) else None, as_result) for i, a in enumerate(args)]
        ckwargs = {k: stand_in(v, k, as_result) for k, v in kwargs.items()}
        try:
            op(*cargs, **ckwargs)
        except Exception as e:  # noqa: BLE001 - whichever the kernel raises is eager's
            return type(e), e.args
        return None

    error = call(as_result=False)
    if error is None:
        return None
    return error if call(as_result=True) is None else None
