"""C++: the innermost loop of a concatenation split at its pieces' edges
(``codegen/cpp/loop_split.py``): each interval's comparisons with the loop variable are
constants, so the compiler keeps one piece's loads and vectorizes a copy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from ember.inductor.codegen.cpp.loop_split import interval_splits
from ember.inductor.loop_ir import Buffer, Compute, IndexValue, Kernel, Literal, Store, Var

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_fn  # noqa: E402


def _pieces(x1: Var, *body: object) -> Kernel:
    x0 = Var("x0", 4)
    return Kernel("k", (x0, x1), (), tuple(body),  # type: ignore[arg-type]
                  (Buffer("out", torch.float32, (4, x1.size), (x1.size, 1)),))


def test_intervals_between_the_edges_with_each_comparison_known() -> None:
    x1 = Var("x1", 12)
    k = _pieces(
        x1,
        IndexValue("p", x1, torch.int64),
        Literal("four", 4, torch.int64), Literal("nine", 9, torch.int64),
        Compute("lo", "lt", ("p", "four"), torch.bool),
        Compute("hi", "ge", ("p", "nine"), torch.bool),
        Compute("le", "le", ("nine", "p"), torch.bool),  # 9 <= p: p >= 9
        Compute("mid", "logical_not", ("lo",), torch.bool),
        Compute("both", "logical_and", ("mid", "hi"), torch.bool),
        Compute("v", "where", ("lo", "p", "p"), torch.int64),
        Store("out", x1, "v"),
    )
    splits = interval_splits(k)
    assert splits is not None
    assert [(a, b) for a, b, _ in splits] == [(0, 4), (4, 9), (9, 12)]
    assert [known["lo"] for _, _, known in splits] == [True, False, False]
    assert [known["hi"] for _, _, known in splits] == [False, False, True]
    assert [known["le"] for _, _, known in splits] == [False, False, True]
    assert [known["both"] for _, _, known in splits] == [False, False, True]
    assert all("v" not in known for _, _, known in splits)


def test_no_split_without_an_edge_inside_the_loop() -> None:
    x1 = Var("x1", 12)
    outside = _pieces(x1, IndexValue("p", x1, torch.int64),
                      Literal("c", 12, torch.int64),
                      Compute("lt", "lt", ("p", "c"), torch.bool), Store("out", x1, "lt"))
    assert interval_splits(outside) is None
    x0 = Var("x0", 4)
    other_var = _pieces(x1, IndexValue("p", x0, torch.int64),
                        Literal("c", 2, torch.int64),
                        Compute("lt", "lt", ("p", "c"), torch.bool), Store("out", x1, "lt"))
    assert interval_splits(other_var) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_concatenation_runs_one_loop_a_piece_and_matches_eager(dtype: torch.dtype) -> None:
    a, b, c = (torch.randn(8, n).to(dtype) for n in (5, 16, 3))

    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.cat([a * 2, b + 1, c.sin()], dim=-1)

    compiled, run = compile_fn(f, a, b, c)
    source = next(v for k, v in compiled.files.items() if k.endswith(".cpp")).decode()
    for start, stop in ((0, 5), (5, 21), (21, 24)):
        assert f"for (int64_t x1 = {start}; x1 < {stop}; x1++)" in source, source
    torch.testing.assert_close(run(a, b, c)[0], f(a, b, c))


def test_a_concatenation_of_many_pieces_keeps_its_selects() -> None:
    from ember.inductor.codegen.cpp.loop_split import MAX_INTERVALS

    pieces = [torch.randn(4, 2) for _ in range(MAX_INTERVALS + 1)]
    compiled, run = compile_fn(lambda *xs: torch.cat([x * 2 for x in xs], dim=-1), *pieces)
    source = next(v for k, v in compiled.files.items() if k.endswith(".cpp")).decode()
    assert "its comparisons are constants" not in source
    torch.testing.assert_close(run(*pieces)[0], torch.cat([x * 2 for x in pieces], dim=-1))
