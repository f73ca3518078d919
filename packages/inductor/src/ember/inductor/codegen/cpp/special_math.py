"""The C++ prelude's special functions that the standard library lacks: ``erfinv``,
``digamma`` and ``trigamma`` (the loop-IR ops of family ``special``; ``lgamma`` is
``std::lgamma``, as in eager). Written for Ember from the published mathematics cited at
each function, each checked against eager in ``tests/test_math_lowerings.py``.

- ``ember_erfinv``: the first guess is M. Giles' single-precision approximation
  ("Approximating the erfinv function", GPU Computing Gems Jade Edition, 2011: a
  polynomial in ``w = -log((1 - y)(1 + y))``), or, past its range (``w >= 16``: only a
  double closer to 1 than ``2**-23``), the asymptotic inverse of ``erfc``
  (``t**2 = L - log(sqrt(pi) t)``, ``L = -log(1 - |y|)``, iterated twice). Halley steps
  on ``erf(t) - y`` then polish it (on ``(1 - |y|) - erfc(t)`` above ``|y| = 0.5``, where
  the first form cancels; ``1 - |y|`` is exact there): one step from about 1e-7 for a
  float (computed in double, so correctly rounded but for ties), two for a double
  (within an ulp of the true value). NaN outside ``[-1, 1]``, ``+-inf`` at ``+-1``, the
  sign of zero kept.
- ``ember_digamma``: the recurrence ``psi(x) = psi(x + 1) - 1 / x`` up to ``x >= 10``
  (ten steps, selects only, so loops over it vectorize), then the asymptotic series
  ``log x - 1 / (2x) - sum B_2k / (2k x**2k)`` through ``x**-14``; below 0 the reflection
  ``psi(x) = psi(1 - x) - pi / tan(pi x)``, with ``tan(pi x)`` taken at ``x`` minus its
  nearest integer (exact) so that ``pi x`` stays accurate near the poles. NaN at the
  negative integers and at ``-inf``; ``-inf`` at ``+0`` and ``inf`` at ``-0`` (from
  ``-1 / x``), as eager.
- ``ember_trigamma``: the same scheme, ``psi1(x) = psi1(x + 1) + 1 / x**2`` and
  ``1/x + 1/(2 x**2) + sum B_2k / x**(2k + 1)`` through ``x**-15``; below 0
  ``psi1(x) = pi**2 / sin(pi x)**2 - psi1(1 - x)`` with ``sin(pi x)`` of the unreduced
  ``x`` in the value's type, as eager computes it: at a negative integer that gives
  eager's large finite value (``1.29e15`` at ``-1.`` in float32), not inf.

Each is a template over the value's type: ``float`` runs in float (erfinv excepted)
like eager's CPU kernels.
"""

SPECIAL_MATH = r"""// Special functions (codegen/cpp/special_math.py says where each formula comes from).
static inline double ember_erfinv_guess(double a, double w) {
    if (w < 5.0) {  // Giles (2011), single precision, central part
        const double v = w - 2.5;
        double p = 2.81022636e-08;
        p = 3.43273939e-07 + p * v; p = -3.5233877e-06 + p * v;
        p = -4.39150654e-06 + p * v; p = 0.00021858087 + p * v;
        p = -0.00125372503 + p * v; p = -0.00417768164 + p * v;
        p = 0.246640727 + p * v; p = 1.50140941 + p * v;
        return p * a;
    }
    if (w < 16.0) {  // Giles (2011), single precision, tail
        const double v = std::sqrt(w) - 3.0;
        double p = -0.000200214257;
        p = 0.000100950558 + p * v; p = 0.00134934322 + p * v;
        p = -0.00367342844 + p * v; p = 0.00573950773 + p * v;
        p = -0.0076224613 + p * v; p = 0.00943887047 + p * v;
        p = 1.00167406 + p * v; p = 2.83297682 + p * v;
        return p * a;
    }
    // erfc(t) ~ exp(-t^2) / (sqrt(pi) t): t^2 = L - log(sqrt(pi) t), iterated
    const double l = -std::log1p(-a);
    double t2 = l - 0.5 * std::log(3.141592653589793 * l);
    t2 = l - 0.5 * std::log(3.141592653589793 * t2);
    return std::sqrt(t2);
}
static inline double ember_erfinv_halley(double t, double a) {
    const double r = a <= 0.5 ? std::erf(t) - a : (1.0 - a) - std::erfc(t);
    const double d = r / (1.1283791670955126 * std::exp(-t * t));  // r / erf'(t)
    return t - d / (1.0 + t * d);
}
static inline double ember_erfinv_steps(double y, int steps) {
    const double a = std::abs(y);
    if (!(a < 1.0)) {
        return a == 1.0 ? std::copysign(std::numeric_limits<double>::infinity(), y)
                        : std::numeric_limits<double>::quiet_NaN();
    }
    double t = ember_erfinv_guess(a, -std::log((1.0 - a) * (1.0 + a)));
    for (int i = 0; i < steps; ++i) t = ember_erfinv_halley(t, a);
    return std::copysign(t, y);
}
static inline float ember_erfinv(float y) {
    return static_cast<float>(ember_erfinv_steps(y, 1));
}
static inline double ember_erfinv(double y) { return ember_erfinv_steps(y, 2); }
template <typename T> static inline T ember_digamma(T x) {
    const T pi = T(3.14159265358979323846);
    const bool reflect = x < T(0);
    if (reflect && x == std::floor(x)) return std::numeric_limits<T>::quiet_NaN();
    // psi(x) = psi(1 - x) - pi / tan(pi x); tan has period pi: x less its nearest integer
    const T near = x - std::nearbyint(x);
    const T reflection = reflect ? -pi / std::tan(pi * near) : T(0);
    T z = reflect ? T(1) - x : x;
    T acc = T(0);
    for (int i = 0; i < 10; ++i) {
        const bool step = z < T(10);
        acc -= step ? T(1) / z : T(0);
        z += step ? T(1) : T(0);
    }
    const T w = T(1) / (z * z);
    const T tail = w * (T(1) / 12 - w * (T(1) / 120 - w * (T(1) / 252 - w * (T(1) / 240
        - w * (T(1) / 132 - w * (T(691) / 32760 - w / 12))))));
    return reflection + acc + (std::log(z) - T(0.5) / z - tail);
}
template <typename T> static inline T ember_trigamma(T x) {
    const T pi = T(3.14159265358979323846);
    const bool reflect = x < T(0);
    // psi1(x) = pi^2 / sin(pi x)^2 - psi1(1 - x)
    const T s = reflect ? std::sin(pi * x) : T(1);
    const T reflection = reflect ? pi * pi / (s * s) : T(0);
    T z = reflect ? T(1) - x : x;
    T acc = T(0);
    for (int i = 0; i < 10; ++i) {
        const bool step = z < T(10);
        acc += step ? T(1) / (z * z) : T(0);
        z += step ? T(1) : T(0);
    }
    const T w = T(1) / (z * z);
    const T series = (T(1) + T(0.5) / z + w * (T(1) / 6 - w * (T(1) / 30 - w * (T(1) / 42
        - w * (T(1) / 30 - w * (T(5) / 66 - w * (T(691) / 2730 - w * T(7) / 6))))))) / z;
    const T psi1 = acc + series;
    return reflect ? reflection - psi1 : psi1;
}
"""
