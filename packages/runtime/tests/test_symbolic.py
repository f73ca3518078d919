"""Size expressions (ember.runtime.ir.symbolic): parsing, canonical printing, evaluation,
relations, and refusing text outside the grammar."""

from __future__ import annotations

import itertools

import pytest
import sympy
from ember.runtime.ir import IRFormatError, SymbolRange, SymExpr, normalize_argument
from ember.runtime.ir import symbolic as S

# text -> canonical text (or int)
CANONICAL = [
    ("s0*4", "4*s0"),
    ("4*s0", "4*s0"),
    ("s0 // 2", "s0//2"),
    ("(s0 + 1) // 2", "(s0+1)//2"),
    ("s0 % 16", "s0%16"),
    ("-s0 // 2", "-s0//2"),
    ("-(s0 // 2)", "-(s0//2)"),
    ("s1 - s0 // 2", "s1-s0//2"),
    ("2 * (s0 // 2)", "2*(s0//2)"),
    ("Max(s1, s0, 3)", "Max(3, s0, s1)"),
    ("Min(s0, 4) + 1", "Min(4, s0)+1"),
    ("s1 * s0 * s0", "s0*s0*s1"),
    ("-2*s0 + 3", "3-2*s0"),
    ("(s0 + 1) * (s1 + 2)", "s0*s1+2*s0+s1+2"),
    ("s0 // (2*s1)", "s0//(2*s1)"),
    ("-(s0*s1)", "-s0*s1"),
    ("0*s0 + 5", 5),
    ("s0 // 1", "s0"),
    ("(2*s0) // 2", "s0"),
    ("(s0 * 2) % 2", 0),
    ("u0 * s0", "s0*u0"),
    ("7", 7),
    ("-3", -3),
]


@pytest.mark.parametrize(("text", "expected"), CANONICAL)
def test_canonical_text(text: str, expected: int | str) -> None:
    assert S.format(S.parse(text)) == expected
    assert S.canonical(text) == expected


@pytest.mark.parametrize(("text", "expected"), CANONICAL)
def test_format_parse_is_a_fixed_point(text: str, expected: int | str) -> None:
    assert S.format(S.parse(expected)) == expected


def test_equal_expressions_print_equal() -> None:
    assert S.format(S.parse("s0*2 + s1")) == S.format(S.parse("s1 + 2*s0")) == "2*s0+s1"
    assert S.format(S.parse("s0*(s1+1)")) == S.format(S.parse("s0 + s0*s1")) == "s0*s1+s0"


def test_format_of_sympy_built_expressions() -> None:
    s0 = S.symbol("s0")
    assert S.symbol("s0") is s0 and s0.is_integer
    assert S.format(sympy.floor(s0 / 4) * 4 + sympy.Mod(s0, 4)) == "s0%4+4*(s0//4)"
    assert S.format(sympy.ceiling(s0 / 2)) == "-(-s0//2)"
    assert S.format(sympy.Integer(12)) == 12
    with pytest.raises(IRFormatError, match=r"s0/2 .* not an integer expression"):
        S.format(s0 / 2)
    with pytest.raises(IRFormatError, match=r"sin\(s0\) \(sin\) has no form"):
        S.format(sympy.sin(s0))


def test_floor_division_and_modulo_follow_python() -> None:
    texts = ["s0//3", "(s0+1)//2", "s0%16", "-s0//2", "s0//s1", "Max(s0, s1)%3",
             "Min(s0, s1)*2-s0//s1", "-(-s0//2)"]
    for text, a, b in itertools.product(texts, range(20), range(1, 6)):
        env = {"s0": a, "s1": b}
        expected = eval(text, {"Max": max, "Min": min}, dict(env))  # the grammar is Python's
        assert S.evaluate(text, env) == expected
        assert S.evaluate(S.format(S.parse(text)), env) == expected, text
        substituted = S.parse(text).subs({S.symbol("s0"): a, S.symbol("s1"): b})
        assert int(substituted) == expected, text


def test_evaluate_unbound_symbol_names_it() -> None:
    with pytest.raises(S.UnboundSymbolError, match=r"symbol 's1' of 's0\+s1' has no value"):
        S.evaluate("s0+s1", {"s0": 1})
    assert S.evaluate(5, {}) == 5


def test_relations() -> None:
    cases = [
        ("s1 == 2*s0", "s1 == 2*s0"),
        ("2*s0 == s1", "s1 == 2*s0"),
        ("4 < s0", "s0 > 4"),
        ("s0 % 16 == 0 and s0 <= 1024", "s0 <= 1024 and s0%16 == 0"),
        ("not (s0 > 3 or s1 < 2)", "not (s0 > 3 or s1 < 2)"),
        ("2 < s0 < 8", "s0 < 8 and s0 > 2"),
        ("s0 != s1", "s0 != s1"),
    ]
    for text, expected in cases:
        assert S.format_relation(S.parse_relation(text)) == expected
        assert S.format_relation(S.parse_relation(expected)) == expected
    assert S.holds("s0 > 4 and s1 == 2*s0", {"s0": 5, "s1": 10})
    assert not S.holds("s0 % 16 == 0", {"s0": 17})
    assert S.relation_symbols("s0 < s1 or u0 == 3") == {"s0", "s1", "u0"}
    with pytest.raises(IRFormatError, match="expected a comparison"):
        S.parse_relation("s0 + 1")
    with pytest.raises(IRFormatError, match="is not a relation"):
        S.format_relation(sympy.true)


def test_free_symbols_and_is_symbol() -> None:
    assert S.free_symbols("Max(s0, u1)*s0 + 2") == {"s0", "u1"}
    assert S.free_symbols(4) == frozenset()
    assert S.is_symbol("s0") and not S.is_symbol("s0+1") and not S.is_symbol(3)


def test_at_hint() -> None:
    symbols = {"s0": SymbolRange(2, None, 8), "u0": SymbolRange(0, 100)}
    assert S.at_hint("2*s0+1", symbols) == 17
    assert S.at_hint("u0", symbols) == 100  # no hint: the fallback, clipped to the range
    assert S.at_hint("u0", {"u0": SymbolRange(0, None)}) == S.UNBACKED_FALLBACK_HINT
    assert S.at_hint(3, {}) == 3


BAD = [
    ('__import__("os").system("true")', "the only calls allowed are Max"),
    ("s0.real", "Attribute is not allowed"),
    ("s0.__class__", "Attribute is not allowed"),
    ("print(1)", "the only calls allowed are Max"),
    ("2**10**10", "operator Pow is not allowed"),
    ("9**9**9**9", "operator Pow is not allowed"),
    ("s0 if s0 else 1", "IfExp is not allowed"),
    ("lambda: 1", "Lambda is not allowed"),
    ("[s0 for s0 in (1,)]", "ListComp is not allowed"),
    ("__builtins__", "'__builtins__' is not a symbol name"),
    ("Max", "'Max' is not a symbol name"),
    ("s0/2", "operator Div is not allowed"),
    ("s0 << 40", "operator LShift is not allowed"),
    ("True", "True is not an integer literal"),
    ("1.5", "1.5 is not an integer literal"),
    ("'s0'", "'s0' is not an integer literal"),
    ("s0 // 0", "division by zero"),
    ("s0 % 0", "division by zero"),
    ("Max()", "takes one or more positional arguments"),
    ("Max(s0, key=s1)", "takes one or more positional arguments"),
    ("Max(*s0)", "takes no \\*arguments"),
    ("s0[0]", "Subscript is not allowed"),
    ("+s0", "only unary '-' is allowed"),
    ("s0 > 2", "Compare is not allowed"),
    ("s0 +", "does not parse"),
    ("(" * 300 + "s0" + ")" * 300, "does not parse|nested too deeply"),
    ("1" * 5000, "does not parse"),
    ("+".join(["s0"] * 6000), "longer than 10000"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_text_outside_the_grammar_is_refused_and_never_runs(text: str, message: str) -> None:
    with pytest.raises(IRFormatError, match=message) as info:
        S.parse(text)
    assert text[:20] in str(info.value)
    with pytest.raises(IRFormatError):
        S.evaluate(text, {"s0": 2, "s1": 3})


def test_deeply_nested_sum_is_refused_not_a_crash() -> None:
    text = "-" * 3000 + "s0"
    with pytest.raises(IRFormatError, match="nested too deeply|does not parse"):
        S.parse(text)


def test_sym_expr_argument() -> None:
    assert normalize_argument([SymExpr("s0"), 4]) == (SymExpr("s0"), 4)
    assert str(SymExpr("4*s0")) == "sym(4*s0)"
