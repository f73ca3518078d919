"""Triton rules of the loop-IR ops ``copysign``, ``nextafter``, ``hypot`` and the special
functions (``erfinv``, ``lgamma``, ``digamma``, ``trigamma``), merged into
:data:`.ops.RULES` / :data:`.ops.HELPERS`.

- ``copysign`` and ``nextafter`` work on the bits (exact, no libdevice call; the float
  ops around a denormal are not flushed).
- ``hypot``, ``erfinv`` and ``lgamma`` call libdevice's ``hypot``, ``erfinv`` and
  ``lgamma`` (``__nv_hypotf``, ``__nv_erfinvf``, ``__nv_lgammaf``, and the double
  versions; in ``triton.language.extra.libdevice`` of Triton 3.x), what eager's CUDA
  kernels call for hypot and lgamma. Triton's interpreter cannot call libdevice, and
  the numpy stand-ins ``ember.runtime.compiled.triton_math`` binds there have no such
  names: a module imported for the interpreter (its ``libdevice`` lacks the name,
  ``_EMBER_LIBDEVICE_*``, a constexpr read when the module is imported) computes the
  same function in float64 from ``tl`` builtins instead (the C++ prelude's algorithms,
  ``codegen/cpp/special_math.py``; Stirling's series for lgamma). On a GPU that branch
  is never compiled.
- libdevice has no ``digamma`` or ``trigamma``: both are the C++ prelude's recurrence,
  asymptotic series and reflection written in ``tl`` (fixed ten recurrence steps as
  selects, since Triton loops are static), on GPU and interpreter alike, in the value's
  dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Rule = Callable[[list[str], torch.dtype, torch.dtype], str]

#: float dtype -> (its same-width integer type, the sign bit as that signed integer)
_BITS = {torch.float32: ("tl.int32", -2**31), torch.float64: ("tl.int64", -2**63)}


def _bits_of(t: torch.dtype) -> tuple[str, int]:
    if t not in _BITS:
        raise NotImplementedError(f"Triton codegen has no bit rule for {t}")
    return _BITS[t]


def _copysign(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    ity, sign = _bits_of(t)
    fty = "tl.float64" if t == torch.float64 else "tl.float32"
    return (f"(({a[0]}.to({ity}, bitcast=True) & {~sign}) | "
            f"({a[1]}.to({ity}, bitcast=True) & {sign})).to({fty}, bitcast=True)")


def _nextafter(a: list[str], t: torch.dtype, r: torch.dtype) -> str:
    ity, sign = _bits_of(t)
    return f"_ember_nextafter({a[0]}, {a[1]}, {ity}, {sign})"


RULES: dict[str, Rule] = {
    "copysign": _copysign,
    "nextafter": _nextafter,
    "hypot": lambda a, _t, _r: f"_ember_hypot({a[0]}, {a[1]})",
    "erfinv": lambda a, _t, _r: f"_ember_erfinv({a[0]})",
    "lgamma": lambda a, _t, _r: f"_ember_lgamma({a[0]})",
    "digamma": lambda a, _t, _r: f"_ember_digamma({a[0]})",
    "trigamma": lambda a, _t, _r: f"_ember_trigamma({a[0]})",
}

HELPERS: dict[str, str] = {
    "_ember_nextafter": '''
@triton.jit
def _ember_nextafter(a, b, ITYPE: tl.constexpr, SIGN: tl.constexpr):
    # C's nextafter on the bits: the magnitude one step up (away from zero) or down; from
    # +-0 the smallest denormal of b's sign; b when a == b; NaN when either is NaN
    ia = a.to(ITYPE, bitcast=True)
    ib = b.to(ITYPE, bitcast=True)
    away = (b > a) == (a > 0)
    bits = tl.where(away, ia + 1, ia - 1)
    bits = tl.where(a == 0, (ib & SIGN) | 1, bits)
    r = tl.where(a == b, b, bits.to(a.dtype, bitcast=True))
    return tl.where((a != a) | (b != b), a + b, r)
''',
    "_ember_hypot": '''
_EMBER_LIBDEVICE_HYPOT = tl.constexpr(hasattr(libdevice, "hypot"))


@triton.jit
def _ember_hypot(a, b):
    if _EMBER_LIBDEVICE_HYPOT:
        r = libdevice.hypot(a, b)
    else:
        # the interpreter (no libdevice): scaled by the larger magnitude, in float64;
        # inf when either is +-inf, even with a NaN (IEEE hypot)
        x = tl.abs(a.to(tl.float64))
        y = tl.abs(b.to(tl.float64))
        m = tl.maximum(x, y)
        q = tl.minimum(x, y) / tl.where(m == 0, 1.0, m)
        h = m * tl.sqrt(1.0 + q * q)
        h = tl.where((x != x) | (y != y), float("nan"), h)
        h = tl.where((x == float("inf")) | (y == float("inf")), float("inf"), h)
        r = h.to(a.dtype)
    return r
''',
    "_ember_erfinv": '''
_EMBER_LIBDEVICE_ERFINV = tl.constexpr(hasattr(libdevice, "erfinv"))


@triton.jit
def _ember_erfinv(x):
    if _EMBER_LIBDEVICE_ERFINV:
        r = libdevice.erfinv(x)
    else:
        # the interpreter (no libdevice): the C++ prelude's ember_erfinv in float64 (Giles'
        # first guess, the erfc asymptote past it, two Halley steps)
        a = tl.abs(x.to(tl.float64))
        w = -tl.log((1.0 - a) * (1.0 + a))
        v = w - 2.5
        p = 2.81022636e-08
        p = 3.43273939e-07 + p * v
        p = -3.5233877e-06 + p * v
        p = -4.39150654e-06 + p * v
        p = 0.00021858087 + p * v
        p = -0.00125372503 + p * v
        p = -0.00417768164 + p * v
        p = 0.246640727 + p * v
        p = 1.50140941 + p * v
        v = tl.sqrt(w) - 3.0
        q = -0.000200214257
        q = 0.000100950558 + q * v
        q = 0.00134934322 + q * v
        q = -0.00367342844 + q * v
        q = 0.00573950773 + q * v
        q = -0.0076224613 + q * v
        q = 0.00943887047 + q * v
        q = 1.00167406 + q * v
        q = 2.83297682 + q * v
        l = -libdevice.log1p(-a)
        t2 = l - 0.5 * tl.log(3.141592653589793 * l)
        t2 = l - 0.5 * tl.log(3.141592653589793 * t2)
        t = tl.where(w < 5.0, p * a, tl.where(w < 16.0, q * a, tl.sqrt(t2)))
        for _ in tl.static_range(2):
            e = tl.where(a <= 0.5, tl.erf(t) - a, (1.0 - a) - libdevice.erfc(t))
            d = e / (1.1283791670955126 * tl.exp(-t * t))
            t = t - d / (1.0 + t * d)
        t = tl.where(a == 1.0, float("inf"), t)
        t = tl.where((a > 1.0) | (a != a), float("nan"), t)
        y = tl.where(x < 0, t * -1.0, t).to(x.dtype)
        r = tl.where(x == 0, x, y)
    return r
''',
    "_ember_lgamma": '''
_EMBER_LIBDEVICE_LGAMMA = tl.constexpr(hasattr(libdevice, "lgamma"))


@triton.jit
def _ember_lgamma(x):
    if _EMBER_LIBDEVICE_LGAMMA:
        r = libdevice.lgamma(x)
    else:
        # the interpreter (no libdevice): in float64, Stirling's series after the
        # recurrence lgamma(z) = lgamma(z + 1) - log(z) up to z >= 10; below 0 the
        # reflection log(pi / |sin(pi x)|) - lgamma(1 - x); inf at the poles and +-inf
        v = x.to(tl.float64)
        neg = v < 0
        z = tl.where(neg, 1.0 - v, v)
        prod = tl.full(v.shape, 1.0, tl.float64)
        for _ in tl.static_range(10):
            step = z < 10.0
            prod = tl.where(step, prod * z, prod)
            z = tl.where(step, z + 1.0, z)
        w = 1.0 / (z * z)
        s = w * (1.0 / 1680 - w * (1.0 / 1188 - w * (691.0 / 360360 - w / 156)))
        s = (1.0 / 12 - w * (1.0 / 360 - w * (1.0 / 1260 - s))) / z
        lg = (z - 0.5) * tl.log(z) - z + 0.9189385332046728 + s - tl.log(prod)
        near = v - tl.floor(v + 0.5)
        reflected = tl.log(3.141592653589793 / tl.abs(tl.sin(3.141592653589793 * near))) - lg
        y = tl.where(neg, reflected, lg)
        y = tl.where((neg & (near == 0)) | (tl.abs(v) == float("inf")), float("inf"), y)
        r = y.to(x.dtype)
    return r
''',
    "_ember_digamma": '''
@triton.jit
def _ember_digamma(x):
    # the C++ prelude's ember_digamma: recurrence to x >= 10, the asymptotic series, the
    # reflection psi(1 - x) - pi / tan(pi x) below 0 (tan at x less its nearest integer).
    # NOTE: the masks come from builtins only: the interpreter's libdevice stand-ins
    # return a 0-d value as a block of one, which `&` with a 0-d mask rejects
    neg = x < 0
    near = x - tl.floor(x + 0.5)
    reflection = tl.where(neg, -3.141592653589793 / libdevice.tan(3.141592653589793 * near),
                          0.0)
    z = tl.where(neg, 1.0 - x, x)
    acc = tl.full(x.shape, 0.0, x.dtype)
    for _ in tl.static_range(10):
        step = z < 10.0
        acc = acc - tl.where(step, 1.0 / z, 0.0)
        z = tl.where(step, z + 1.0, z)
    w = 1.0 / (z * z)
    tail = w * (1.0 / 240 - w * (1.0 / 132 - w * (691.0 / 32760 - w / 12)))
    tail = w * (1.0 / 12 - w * (1.0 / 120 - w * (1.0 / 252 - tail)))
    y = reflection + acc + (tl.log(z) - 0.5 / z - tail)
    return tl.where(neg & (near == 0), float("nan"), y)
''',
    "_ember_trigamma": '''
@triton.jit
def _ember_trigamma(x):
    # the C++ prelude's ember_trigamma: recurrence to x >= 10, the asymptotic series, the
    # reflection pi^2 / sin(pi x)^2 - psi1(1 - x) below 0 (sin of the unreduced pi x)
    neg = x < 0
    s = tl.sin(3.141592653589793 * x)
    reflection = 9.869604401089358 / (s * s)
    z = tl.where(neg, 1.0 - x, x)
    acc = tl.full(x.shape, 0.0, x.dtype)
    for _ in tl.static_range(10):
        step = z < 10.0
        acc = acc + tl.where(step, 1.0 / (z * z), 0.0)
        z = tl.where(step, z + 1.0, z)
    w = 1.0 / (z * z)
    series = w * (1.0 / 42 - w * (1.0 / 30 - w * (5.0 / 66 - w * (691.0 / 2730 - w * 7.0 / 6))))
    series = (1.0 + 0.5 / z + w * (1.0 / 6 - w * (1.0 / 30 - series))) / z
    psi1 = acc + series
    return tl.where(neg, reflection - psi1, psi1)
''',
}
