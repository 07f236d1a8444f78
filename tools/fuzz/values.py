"""Constants and input tensors for fuzz programs, chosen to collide in Python.

A cache that keys on Python equality or hashes confuses values that compare
equal or hash alike: ``hash(-1) == hash(-2)``, ``1 == 1.0 == True``,
``0 == -0.0 == False``, and ``nan != nan``. The pools below are built from
exactly those values, so two programs that differ only in such a constant
are generated often (see ``COLLIDE`` for the twin programs of driver.py).
"""

from __future__ import annotations

import math
import random

import torch

#: Scalars for elementwise ops: each has a colliding partner in the pool.
SCALARS: list[object] = [-1, -2, 1, 1.0, True, 0, -0.0, 0.0, False, 2, 0.5, -1.5, 3, 2.0]
SPECIAL_SCALARS: list[object] = [math.nan, math.inf, -math.inf]
#: Numbers a float32 or float16 tensor cannot hold exactly: a lowering that
#: computes with the double (or rounds it twice) differs from eager's
#: ``tensor([0.1]) == 0.1``; 70000 overflows float16; -2.5 is a rounding tie.
INEXACT_SCALARS: list[object] = [0.1, 1 / 3, -2.5, 1e-6, 70000.0, 0.7]
#: float32 subnormals, kept by eager PyTorch (left out on a backend that declares
#: ``flushes_subnormals``).
SUBNORMAL_SCALARS: list[object] = [1e-40, -3e-42]
#: One value of each collision class, for runs with the ``collide`` category off.
SCALARS_NO_COLLISIONS: list[object] = [-1, 1, 0, 0.5, -1.5, 3, 2.0]

#: Each constant's partners that compare equal or hash equal in Python but
#: mean something else to PyTorch (a twin program swaps one for the other).
COLLIDE: dict[tuple[type, object], list[object]] = {
    (int, -1): [-2],
    (int, -2): [-1],
    (int, 1): [1.0, True],
    (float, 1.0): [1, True],
    (bool, True): [1, 1.0],
    (int, 0): [-0.0, False, 0.0],
    (float, 0.0): [-0.0, 0, False],
    (bool, False): [0, -0.0],
    (int, 2): [2.0],
    (float, 2.0): [2],
}


def partners(value: object) -> list[object]:
    """The constants that collide with ``value`` (empty if none)."""
    if isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0:
        return [0.0, 0, False]
    if isinstance(value, float) and math.isnan(value):
        return [math.nan]  # nan twin: a cache must treat nan as equal to itself
    return COLLIDE.get((type(value), value), [])


def render(value: object) -> str:
    """Python source for a constant, exact for -0.0, nan and inf."""
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, tuple | list):
        inner = ", ".join(render(v) for v in value)
        if isinstance(value, tuple):
            return f"({inner},)" if len(value) == 1 else f"({inner})"
        return f"[{inner}]"
    return repr(value)


SHAPES: list[tuple[int, ...]] = [(3,), (4,), (2, 3), (3, 4), (3, 3), (2, 3, 4), (2, 1, 3), ()]
DTYPES = [torch.float32, torch.float32, torch.int64, torch.bool, torch.float64, torch.int32]

_FLOATS = [-0.0, 0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 3.0, 1.5, -0.25]
_FLOAT_SPECIALS = [math.nan, math.inf, -math.inf]


def _float_value(rng: random.Random, specials: bool) -> float:
    r = rng.random()
    if specials and r < 0.08:
        return rng.choice(_FLOAT_SPECIALS)
    if r < 0.45:
        return rng.choice(_FLOATS)
    return round(rng.uniform(-4, 4), 2)


def input_source(rng: random.Random, shape: tuple[int, ...], dtype: torch.dtype, specials: bool) -> str:
    """Source of a literal input tensor on ``DEV`` (small values: ties and zeros are common)."""
    n = math.prod(shape)
    if dtype.is_floating_point:
        flat: list[object] = [_float_value(rng, specials) for _ in range(n)]
    elif dtype == torch.bool:
        flat = [rng.random() < 0.5 for _ in range(n)]
    else:
        flat = [rng.randint(-3, 3) for _ in range(n)]

    def nest(items: list[object], dims: tuple[int, ...]) -> object:
        if not dims:
            return items[0]
        step = len(items) // dims[0] if dims[0] else 0
        return [nest(items[i * step:(i + 1) * step], dims[1:]) for i in range(dims[0])]

    data = nest(flat, shape) if shape else flat[0]
    return f"torch.tensor({render(data)}, dtype={dtype}, device=DEV)"
