"""``match`` statements are interpreted (``bytecode/match_ops.py``). Before, their
opcodes (GET_LEN, MATCH_SEQUENCE, MATCH_MAPPING, MATCH_KEYS, MATCH_CLASS) were
unsupported and every call of a function holding one ran eagerly."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import ember.frontend as ef
import pytest
import torch


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Plain:
    def __init__(self, v: int) -> None:
        self.v = v


class OneArg:
    __match_args__ = ("a",)
    a = 1


def route(x: torch.Tensor, spec: Any) -> torch.Tensor:
    match spec:
        case (1, *rest):
            return x + len(rest)
        case [a, b] if a > b:
            return x * a - b
        case (a, b):
            return x * a + b
        case Point(1, y=y):
            return x - y
        case Point(px, _) if px > 5:
            return x * px
        case {"k": v, **rest}:
            return x + v + len(rest)
        case {"t": torch.Tensor() as t}:
            return x + t
        case Color.RED | Color.BLUE:
            return x * spec.value
        case int(n) | float(n):
            return x + n
        case str() as s if s.startswith("a"):
            return x * len(s)
        case Plain(v=v):
            return x + v
        case torch.Tensor():
            return x + spec
        case _:
            return x


SUBJECTS = [(1, 2, 3), [5, 2], (2, 5), Point(1, 5), Point(7, 1), Point(2, 2),
            {"k": 4, "z": 1}, {"t": torch.ones(2)}, {"u": 1}, Color.BLUE, 3, 2.5, "abc",
            "zzz", Plain(4), torch.full((2,), 3.0), None, [9, 9, 9]]


@pytest.mark.parametrize("spec", SUBJECTS, ids=range(len(SUBJECTS)))
def test_each_pattern_is_captured_as_eager_runs_it(spec: Any) -> None:
    compiled = ef.compile(route, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(torch.ones(2), spec), route(torch.ones(2), spec))
    assert compiled.stats.graph_breaks == 0 and compiled.stats.eager_fallback_calls == 0


def test_what_a_pattern_read_is_guarded() -> None:
    def f(x: torch.Tensor, s: Any) -> torch.Tensor:
        match s:
            case Point(x=a, y=b):
                return x * a + b
            case Plain(w=w):  # missing at first: guarded to stay missing
                return x + w
            case {"b": b}:
                return x + b
        return x

    compiled = ef.compile(f, backend="eager")
    point, plain, mapping = Point(1, 2), Plain(1), {"a": 1}
    torch.testing.assert_close(compiled(torch.ones(2), point), torch.full((2,), 3.0))
    point.x = 5
    torch.testing.assert_close(compiled(torch.ones(2), point), torch.full((2,), 7.0))
    torch.testing.assert_close(compiled(torch.ones(2), plain), torch.ones(2))
    plain.w = 5  # type: ignore[attr-defined]
    torch.testing.assert_close(compiled(torch.ones(2), plain), torch.full((2,), 6.0))
    torch.testing.assert_close(compiled(torch.ones(2), mapping), torch.ones(2))
    mapping["b"] = 5
    torch.testing.assert_close(compiled(torch.ones(2), mapping), torch.full((2,), 6.0))


def test_a_bad_class_pattern_raises_python_s_type_error() -> None:
    def f(x: torch.Tensor, s: Any) -> torch.Tensor:
        match s:
            case OneArg(p, q):
                return x + p + q
        return x

    with pytest.raises(TypeError, match=r"accepts 1 positional sub-pattern \(2 given\)"):
        f(torch.ones(2), OneArg())
    with pytest.raises(TypeError, match=r"accepts 1 positional sub-pattern \(2 given\)"):
        ef.compile(f, backend="eager")(torch.ones(2), OneArg())
