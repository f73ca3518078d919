"""Triton rules of the loop-IR ops ``copysign``, ``nextafter``, ``hypot`` and the special
functions (``erfinv``, ``lgamma``, ``digamma``, ``trigamma``), merged into
:data:`.ops.RULES` / :data:`.ops.HELPERS`.

- ``copysign`` and ``nextafter`` work on the bits (exact, no libdevice call; the float
  ops around a denormal are not flushed).
- ``hypot``, ``erfinv`` and ``lgamma`` call libdevice's ``hypot``, ``erfinv`` and
  ``lgamma`` (``__nv_hypotf``, ``__nv_erfinvf``, ``__nv_lgammaf``, and the double
  versions; in ``triton.language.extra.libdevice`` of Triton 3.x), what eager's CUDA
  kernels call for hypot and lgamma. Under Triton's interpreter the same names are the
  runtime's stand-ins (``ember.runtime.compiled.triton_math``: numpy's ``hypot``,
  eager's CPU ``erfinv``/``lgamma``), so the interpreter runs the code a GPU runs.
  Triton links libdevice with flush-to-zero on: float32 ``lgamma`` of a denormal is
  computed as ``-log|x|`` beside the call (``_ember_lgamma_f32``), as eager's CUDA kernel
  gives it.
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
    "hypot": lambda a, _t, _r: f"libdevice.hypot({a[0]}, {a[1]})",
    "erfinv": lambda a, _t, _r: f"libdevice.erfinv({a[0]})",
    "lgamma": lambda a, t, _r: (f"libdevice.lgamma({a[0]})" if t == torch.float64
                                else f"_ember_lgamma_f32({a[0]})"),
    "digamma": lambda a, _t, _r: f"_ember_digamma({a[0]})",
    "trigamma": lambda a, _t, _r: f"_ember_trigamma({a[0]})",
}

HELPERS: dict[str, str] = {
    "_ember_lgamma_f32": '''
@triton.jit
def _ember_lgamma_f32(x):
    # Triton links libdevice with flush-to-zero on, so __nv_lgammaf reads a denormal x as
    # 0 and returns inf (eager: about 103 at 1e-45). Below 2^-126, lgamma(x) = -log|x| to
    # float32 rounding; the log is taken of |x| * 2^64 (a normal number), less 64 ln 2.
    ax = tl.abs(x)
    tiny = (ax < 1.1754943508222875e-38) & (ax > 0)
    return tl.where(tiny, 44.3614195558365 - tl.log(ax * 18446744073709551616.0),
                    libdevice.lgamma(x))
''',
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
