"""Size expressions in the capture cache: a result rebuilt from the inputs' sizes
(``SizeExpr``) is written as a tree of a few node kinds and read back to the same
values; anything else is not portable, and nothing is parsed as text."""

from __future__ import annotations

import json
from typing import Any

import pytest
import sympy
from ember.frontend._torch import size_functions
from ember.frontend.bytecode.recipes import SizeExpr, substituted
from ember.frontend.bytecode.sources import LocalSource
from ember.frontend.capture_cache_codec import (
    Unportable,
    decode_recipe,
    decode_size_expr,
    encode_recipe,
    encode_size_expr,
)


def _symbols() -> tuple[Any, Any]:
    return sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True)


def test_a_size_expression_round_trips_through_json() -> None:
    s0, s1 = _symbols()
    fns = size_functions()
    expr = fns["FloorDiv"](2 * s0 + 1, 3) + fns["PythonMod"](s1, 4) * s0 + s1**2 - 7
    data = json.loads(json.dumps(encode_size_expr(expr)))
    back = decode_size_expr(data)
    for values in ({"s0": 7, "s1": 5}, {"s0": 1, "s1": 12}):
        assert int(substituted(back, values)) == int(substituted(expr, values))


def test_a_size_expr_recipe_round_trips() -> None:
    s0, s1 = _symbols()
    recipe = SizeExpr(s0 * s1 + 1, [("s0", LocalSource("x"), 0), ("s1", LocalSource("x"), 1)])
    back = decode_recipe(json.loads(json.dumps(encode_recipe(recipe))))
    assert isinstance(back, SizeExpr)
    assert [(n, d) for n, _, d in back.sizes] == [("s0", 0), ("s1", 1)]
    assert int(substituted(back.expr, {"s0": 3, "s1": 4})) == 13


def test_other_nodes_are_not_portable_and_unknown_ones_not_read() -> None:
    s0, _ = _symbols()
    with pytest.raises(Unportable, match="size expression"):
        encode_size_expr(sympy.sqrt(s0))
    with pytest.raises(ValueError, match="unknown size expression node"):
        decode_size_expr(["fn", "__import__", [["int", 1]]])
