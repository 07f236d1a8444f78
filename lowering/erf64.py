"""A float64 ``erf`` from ``exp`` and rational functions, for targets with no float64 ``math.erf``.

MLIR's polynomial expansion of ``math.erf`` (which IREE 3.13 uses) is float32 only, so every
graph holding a float64 ``erf`` (a float64 model's ``gelu``) failed to compile on iree-cpu and
ran eagerly. For a backend that asks for it (``LoweringContext(float64_erf=True)``), each
float64 ``erf`` becomes the steps of Sun's fdlibm ``erf`` (``s_erf.c``, 1993, also glibc's
and musl's; credited in NOTICE) in torch ops: four ranges of ``|x|``, each a ratio of
polynomials with fdlibm's published coefficients and evaluation order, the two upper ones
scaled by ``exp(-x*x)`` computed in two factors so that it keeps full precision. Measured
against eager (whose kernels are SLEEF's and the C library's ``erf``, within an ulp of the
truth too) on 300,000 float64 values: 97% equal, every other one an ulp apart.

One step needs a bit trick in C: ``z``, ``|x|`` with the low 32 bits of its significand
cleared, so that ``z*z`` is exact. Here ``|x|`` lies in [1.25, 6) where ``z`` is used, so ``z``
is ``|x|`` truncated to a multiple of ``2**(e-20)`` for its binary exponent ``e`` (0, 1 or 2):
the same number, from a multiply by a power of two, a floor and a divide, all exact.
"""

from __future__ import annotations

import torch
from torch.fx import Graph

from .fx_rewrite import calls_on_tensors

__all__ = ["erf64", "expand_float64_erf"]

aten = torch.ops.aten

_ERX = 8.45062911510467529297e-01
_EFX = 1.28379167095512586316e-01
# erf(x) = x + x * R(x*x) on [0, 0.84375)
_PP = (1.28379167095512558561e-01, -3.25042107247001499370e-01, -2.84817495755985104766e-02,
       -5.77027029648944159157e-03, -2.37630166566501626084e-05)
_QQ = (1.0, 3.97917223959155352819e-01, 6.50222499887672944485e-02, 5.08130628187576562776e-03,
       1.32494738004321644526e-04, -3.96022827877536812320e-06)
# erf(x) = erx + P(x-1)/Q(x-1) on [0.84375, 1.25)
_PA = (-2.36211856075265944077e-03, 4.14856118683748331666e-01, -3.72207876035701323847e-01,
       3.18346619901161753674e-01, -1.10894694282396677476e-01, 3.54783043256182359371e-02,
       -2.16637559486879084300e-03)
_QA = (1.0, 1.06420880400844228286e-01, 5.40397917702171048937e-01, 7.18286544141962662868e-02,
       1.26171219808761642112e-01, 1.36370839120290507362e-02, 1.19844998467991074170e-02)
# erfc(x) = exp(-x*x - 0.5625 + R(1/x**2)/S(1/x**2)) / x on [1.25, 1/0.35)
_RA = (-9.86494403484714822705e-03, -6.93858572707181764372e-01, -1.05586262253232909814e+01,
       -6.23753324503260060396e+01, -1.62396669462573470355e+02, -1.84605092906711035994e+02,
       -8.12874355063065934246e+01, -9.81432934416914548592e+00)
_SA = (1.0, 1.96512716674392571292e+01, 1.37657754143519042600e+02, 4.34565877475229228821e+02,
       6.45387271733267880336e+02, 4.29008140027567833386e+02, 1.08635005541779435134e+02,
       6.57024977031928170135e+00, -6.04244152148580987438e-02)
# the same on [1/0.35, 6) (erf is 1 to float64 precision beyond)
_RB = (-9.86494292470009928597e-03, -7.99283237680523006574e-01, -1.77579549177547519889e+01,
       -1.60636384855821916062e+02, -6.37566443368389627722e+02, -1.02509513161107724954e+03,
       -4.83519191608651397019e+02)
_SB = (1.0, 3.03380607434824582924e+01, 3.25792512996573918826e+02, 1.53672958608443695994e+03,
       3.19985821950859553908e+03, 2.55305040643316442583e+03, 4.74528541206955367215e+02,
       -2.24409524465858183362e+01)


def _horner(t: torch.Tensor, coefficients: tuple[float, ...]) -> torch.Tensor:
    """c0 + t*(c1 + t*(c2 + ...)), innermost first, as fdlibm writes it."""
    acc = t * coefficients[-1]
    for c in reversed(coefficients[1:-1]):
        acc = t * (acc + c)
    return acc + coefficients[0]


def _high_bits(a: torch.Tensor) -> torch.Tensor:
    """``a`` in [1, 8) with the low 32 bits of its significand cleared (see the module doc)."""
    z = a
    for e in (2, 1, 0):
        scale = 2.0 ** (20 - e)
        z = torch.where(a < 2.0 ** (e + 1), torch.floor(a * scale) / scale, z)
    return z


def erf64(x: torch.Tensor) -> torch.Tensor:
    """fdlibm's ``erf`` in torch ops (the module doc); every branch is computed, one is kept."""
    a = x.abs()
    z = a * a
    # |x| < 2**-28: x * 2/sqrt(pi); scaled by 16 first near the subnormals (no spurious underflow)
    tiny = torch.where(a < 2.0 ** -1015, (a * 16.0 + a * (16.0 * _EFX)) * 0.0625, a + a * _EFX)
    small = a + a * (_horner(z, _PP) / _horner(z, _QQ))
    s = a - 1.0
    middle = _ERX + _horner(s, _PA) / _horner(s, _QA)
    w = 1.0 / (a * a)
    near = a < 1.0 / 0.35
    ratio = torch.where(near, _horner(w, _RA) / _horner(w, _SA), _horner(w, _RB) / _horner(w, _SB))
    h = _high_bits(a)
    r = torch.exp(-h * h - 0.5625) * torch.exp((h - a) * (h + a) + ratio)
    large = 1.0 - r / a
    y = torch.where(a < 2.0 ** -28, tiny, small)
    y = torch.where(a < 0.84375, y, torch.where(a < 1.25, middle, torch.where(a < 6.0, large, 1.0)))
    y = torch.where(x < 0, -y, y)
    return torch.where(torch.isnan(x) | (x == 0), x, y)  # NaN, and a zero keeps its sign


#: ``erf64`` traced, by input shape and stride.
_traced: dict[tuple, object] = {}


def expand_float64_erf(g: Graph) -> bool:
    """Replace each float64 ``aten.erf`` of ``g`` with ``erf64``'s ops; True if any was."""
    from torch.fx.experimental.proxy_tensor import make_fx

    changed = False
    for node, x, val in calls_on_tensors(g, (aten.erf.default,)):
        if val.dtype != torch.float64:
            continue
        key = (tuple(val.shape), tuple(val.stride()))
        traced = _traced.get(key)
        if traced is None:  # tracing costs tens of ms; a model repeats the same few shapes
            example = torch.empty_strided(*key, dtype=val.dtype, device="meta")
            traced = make_fx(erf64, tracing_mode="fake")(example)
            if len(_traced) < 256:
                _traced[key] = traced
        [placeholder] = [n for n in traced.graph.nodes if n.op == "placeholder"]
        before = set(g.nodes)
        with g.inserting_before(node):
            result = g.graph_copy(traced.graph, {placeholder: x})
        if "stack_trace" in node.meta:  # the new nodes carry the erf's source line
            for n in g.nodes:
                if n not in before:
                    n.meta["stack_trace"] = node.meta["stack_trace"]
        node.replace_all_uses_with(result)
        g.erase_node(node)
        changed = True
    return changed
