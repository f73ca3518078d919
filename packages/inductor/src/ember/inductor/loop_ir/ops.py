"""The loop-IR op table: every op a ``Compute`` or a ``Reduce`` may name, in one place.

One row per op: its name, arity, kind (``pointwise`` for a ``Compute``, ``reduction``
for a ``Reduce``), family, result dtype rule, whether it is *costly* and what it computes.
Type rules shared by all rows are in :mod:`.body`'s module doc.

Adding an op: one row here, one rule in each backend (``codegen/cpp/ops.py`` ``RULES``
and ``codegen/triton/ops.py`` ``RULES`` for a pointwise op; ``codegen/cpp/ops.py``
``REDUCTION_INITS`` and ``codegen/triton/reductions.py`` ``COMBINE_HELPERS`` for a
reduction); ``tests/test_loop_ir_ops.py`` fails until every backend implements exactly
the ops of this table.

Result rules: ``args`` — the dtype of the (value) arguments; ``bool``; ``float32``
(``rand``/``randn`` from int64 arguments); ``int64`` (``argmax``/``argmin``: a
position); ``cast`` — the ``Compute``'s own dtype.

*Costly* ops cost many times a load or a store per element (a libm/libmvec call or more):
the inductor stores such values rather than recompute them in every consumer
(``lowering/inlining.py``) and caches them per row across reduction passes (C++
``ROW_CACHE``).
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("pointwise", "reduction")
RESULTS = ("args", "bool", "float32", "int64", "cast")


@dataclass(frozen=True)
class LoopOp:
    """One row of :data:`LOOP_OPS` (see the module doc)."""

    name: str
    arity: int
    kind: str
    family: str
    result: str
    costly: bool
    doc: str


def _rows(kind: str, family: str, arity: int, result: str, costly: bool,
          docs: dict[str, str]) -> list[LoopOp]:
    return [LoopOp(name, arity, kind, family, result, costly, doc)
            for name, doc in docs.items()]


_PW = "pointwise"

LOOP_OPS: dict[str, LoopOp] = {op.name: op for op in [
    *_rows(_PW, "arithmetic", 2, "args", False, {
        "add": "a + b", "sub": "a - b", "mul": "a * b",
        "truediv": "a / b (true division; integers divide as the result dtype)",
        "floordiv": "floor(a / b), Python semantics for integers",
        "truncdiv": "trunc(a / b), C semantics for integers",
        "remainder": "a - floordiv(a, b) * b (the divisor's sign)",
        "fmod": "C fmod (the dividend's sign)",
        "maximum": "max(a, b), NaN propagating", "minimum": "min(a, b), NaN propagating"}),
    *_rows(_PW, "arithmetic", 2, "args", True, {
        "pow": "a ** b", "atan2": "atan2(a, b)"}),
    *_rows(_PW, "arithmetic", 1, "args", False, {
        "neg": "-a (-0. for 0.)", "abs": "|a|", "reciprocal": "1 / a",
        "sign": "-1, 0 or 1 (0 for NaN)"}),
    *_rows(_PW, "transcendental", 1, "args", True, {
        "exp": "e ** a", "exp2": "2 ** a", "expm1": "e ** a - 1", "log": "ln a",
        "log2": "log2 a", "log10": "log10 a", "log1p": "ln(1 + a)", "sin": "sin a",
        "cos": "cos a", "tan": "tan a", "asin": "asin a", "acos": "acos a",
        "atan": "atan a", "sinh": "sinh a", "cosh": "cosh a", "tanh": "tanh a",
        "asinh": "asinh a", "acosh": "acosh a", "atanh": "atanh a", "erf": "erf a",
        "erfc": "1 - erf a", "sigmoid": "1 / (1 + e ** -a)"}),
    *_rows(_PW, "arithmetic", 2, "args", False, {
        "copysign": "|a| with the sign bit of b (NaN's too)",
        "nextafter": "the next representable value after a toward b; b when a == b, NaN "
                     "when either is NaN (C's nextafter)"}),
    *_rows(_PW, "transcendental", 2, "args", True, {
        "hypot": "sqrt(a * a + b * b) without overflow; inf when either is +-inf, even "
                 "with a NaN"}),
    *_rows(_PW, "special", 1, "args", True, {
        "erfinv": "the inverse of erf: NaN outside [-1, 1], +-inf at +-1",
        "lgamma": "ln |gamma(a)|: inf at 0 and the negative integers, inf at +-inf",
        "digamma": "d/da lgamma(a): -inf at +0, inf at -0, NaN at the negative integers "
                   "and -inf",
        "trigamma": "d/da digamma(a) (polygamma(1, a)): inf at 0; near the negative "
                    "integers 1 / sin(pi a) ** 2 with pi a rounded as eager rounds it"}),
    *_rows(_PW, "transcendental", 1, "args", False, {
        "sqrt": "square root (correctly rounded)", "rsqrt": "1 / sqrt a",
        "floor": "round down", "ceil": "round up", "round": "round half to even",
        "trunc": "round toward zero"}),
    *_rows(_PW, "comparison", 2, "bool", False, {
        "eq": "a == b", "ne": "a != b", "lt": "a < b", "le": "a <= b", "gt": "a > b",
        "ge": "a >= b"}),
    *_rows(_PW, "comparison", 1, "bool", False, {
        "isnan": "a is NaN (false for integers)",
        "isinf": "a is +-inf (false for integers)"}),
    *_rows(_PW, "logical", 2, "bool", False, {
        "logical_and": "a and b", "logical_or": "a or b", "logical_xor": "a != b"}),
    *_rows(_PW, "logical", 1, "bool", False, {"logical_not": "not a"}),
    *_rows(_PW, "bitwise", 2, "args", False, {
        "bitwise_and": "a & b", "bitwise_or": "a | b", "bitwise_xor": "a ^ b",
        "lshift": "a << b (0 when b < 0 or b >= the bit width)",
        "rshift": "a >> b, arithmetic (the sign fill when b < 0 or b >= the bit width)"}),
    *_rows(_PW, "bitwise", 1, "args", False, {"bitwise_not": "~a (not a for bool)"}),
    *_rows(_PW, "selection", 3, "args", False, {
        "where": "b where a (bool) else c; may take float16/bfloat16 operands"}),
    *_rows(_PW, "conversion", 1, "cast", False, {
        "cast": "a converted to the Compute's dtype (torch's conversion rules)"}),
    *_rows(_PW, "random", 2, "float32", False, {
        "rand": "Philox 4x32-10 uniform in [0, 1) of (int64 key, int64 offset)",
        "randn": "Philox 4x32-10 standard normal (Box-Muller) of (key, offset)"}),
    *_rows("reduction", "reduction", 1, "args", False, {
        "sum": "sum over the reduction ranges", "prod": "product",
        "max": "maximum, NaN propagating", "min": "minimum, NaN propagating"}),
    *_rows("reduction", "reduction", 1, "int64", False, {
        "argmax": "row-major position of the first maximum (NaN is the maximum)",
        "argmin": "row-major position of the first minimum (NaN is the minimum)"}),
    *_rows("reduction", "reduction", 1, "bool", False, {
        "any": "whether any element is nonzero", "all": "whether every element is nonzero"}),
    *_rows("reduction", "reduction", 1, "args", False, {
        "m2": "sum of squared deviations from the mean of the reduced values (floats; one "
              "pass: Welford's update, partial results combined by Chan's formula)"}),
]}

#: pointwise op name -> number of arguments
POINTWISE_OPS: dict[str, int] = {
    op.name: op.arity for op in LOOP_OPS.values() if op.kind == "pointwise"}

#: reduction op names, in table order
REDUCTION_OPS: tuple[str, ...] = tuple(
    op.name for op in LOOP_OPS.values() if op.kind == "reduction")

#: pointwise ops whose result is bool
BOOL_RESULT_OPS = frozenset(
    op.name for op in LOOP_OPS.values() if op.kind == "pointwise" and op.result == "bool")

#: pointwise ops that cost many times a load or a store per element (module doc)
COSTLY_OPS = frozenset(op.name for op in LOOP_OPS.values() if op.costly)
