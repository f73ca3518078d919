"""Python code that reads symbolic sizes (arithmetic, ops taking sizes, specialising
uses), symbolic values live at a graph break, data-dependent sizes (unbacked symbols),
and ``capture(..., dynamic_shapes=...)`` programs saved to ``.ember``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from ember.runtime.ir import load, print_program, save

MODES = ["strict", "trace"]


def compiled(fn: Any, capture: str = "strict", **kw: Any) -> Any:
    return ef.compile(fn, backend="eager", options={"capture": capture}, **kw)


def size_arithmetic(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[1] // 2
    y = x[:, :half] * x.size(0)
    z = y.reshape(x.size(0) * half)
    return z + torch.arange(z.numel()) + torch.zeros(x.size(0) * half)


@pytest.mark.parametrize("capture", MODES)
def test_size_arithmetic_runs_on_symbols(capture: str) -> None:
    f = compiled(size_arithmetic, capture, dynamic=True)
    for rows, cols in ((2, 4), (3, 6), (5, 10), (4, 7)):
        x = torch.randn(rows, cols)
        torch.testing.assert_close(f(x), size_arithmetic(x))
    assert f.stats.compiles == 1, f.stats


def test_size_arithmetic_is_recorded_as_size_expressions() -> None:
    f = compiled(size_arithmetic, dynamic=True)
    f(torch.randn(3, 6))
    (graph,) = f.graphs
    text = print_program(graph)
    assert "s1//2" in text, text


def expand_to(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x.view(-1, 1).expand(x.size(0), y.size(1)) + y


@pytest.mark.parametrize("capture", MODES)
def test_sizes_passed_to_view_and_expand(capture: str) -> None:
    f = compiled(expand_to, capture, dynamic=True)
    for n, m in ((3, 4), (5, 2), (6, 6)):
        x, y = torch.randn(n), torch.randn(n, m)
        torch.testing.assert_close(f(x, y), expand_to(x, y))
    assert f.stats.compiles == 1


def loop_over_rows(x: torch.Tensor) -> torch.Tensor:
    out = x[0]
    for i in range(x.size(0)):  # range() needs an int: specialises x.size(0)
        out = out + x[i]
    return out


def test_range_of_a_size_specialises_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(loop_over_rows, dynamic=True)
    x = torch.randn(3, 4)
    with patch(logs=frozenset({"dynamic"})):
        torch.testing.assert_close(f(x), loop_over_rows(x))
    err = capsys.readouterr().err
    assert "x.size(0) stays static (3, asked by dynamic=True)" in err, err
    assert "x.size(1) is symbolic" in err, err
    f(torch.randn(3, 9))
    assert f.stats.compiles == 1
    y = torch.randn(4, 4)
    torch.testing.assert_close(f(y), loop_over_rows(y))
    assert f.stats.compiles == 2


SCALE = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]


def index_by_size(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE[x.size(0)] + int(x.size(1))  # a list index and int() specialise


@pytest.mark.parametrize("capture", MODES)
def test_size_as_list_index_or_int_specialises(capture: str) -> None:
    f = compiled(index_by_size, capture, dynamic=True)
    for shape in ((3, 4), (3, 4), (4, 4), (4, 5)):
        x = torch.ones(shape)
        torch.testing.assert_close(f(x), index_by_size(x))
    assert f.stats.compiles == 3, f.stats  # one per (rows, cols) pair


def branch_on_size(x: torch.Tensor) -> torch.Tensor:
    if x.size(0) > 4:
        return x * 2
    return x * 3


def test_comparison_in_if_is_a_guard(capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(branch_on_size, dynamic=True)
    with patch(logs=frozenset({"guards"})):
        torch.testing.assert_close(f(torch.ones(6)), torch.full((6,), 2.0))
    err = capsys.readouterr().err
    assert "x.size(0) > 4  # from " in err or "x.size(0) >= 5  # from " in err, err
    assert "in branch_on_size: if x.size(0) > 4:" in err
    f(torch.ones(9))
    assert f.stats.compiles == 1
    torch.testing.assert_close(f(torch.ones(3)), torch.full((3,), 3.0))
    assert f.stats.compiles == 2


def size_across_break(x: torch.Tensor) -> torch.Tensor:
    n = x.size(0)
    print("break")  # n is live here: rebuilt from x's size at each call
    return x * n


def test_symbolic_size_live_at_a_break_is_rebuilt_from_the_input(
        capsys: pytest.CaptureFixture[str]) -> None:
    f = compiled(size_across_break, dynamic=True)
    for n in (3, 3, 5):
        x = torch.ones(n)
        with patch(logs=frozenset({"dynamic"})):
            torch.testing.assert_close(f(x), x * n)
    assert f.stats.graph_breaks >= 1
    assert "a symbolic value is live at a graph break" not in capsys.readouterr().err


def float_and_bool_across_break(x: torch.Tensor) -> torch.Tensor:
    half, big = x.size(0) / 2, x.size(0) > 4
    print("break")  # a SymFloat and a SymBool live here
    return x * half + (1 if big else -1)


def test_a_symbolic_float_and_bool_live_at_a_break_are_rebuilt(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before, the float was specialised: its guard (``s0/2 == 1.5``) is not an integer
    relation and the IR printer raised ``IRFormatError``."""
    f = compiled(float_and_bool_across_break, dynamic=True)
    for n in (3, 3, 5, 8):
        x = torch.ones(n)
        torch.testing.assert_close(f(x), float_and_bool_across_break(x))
    assert "a symbolic value is live at a graph break" not in capsys.readouterr().err


class _Box:
    def __init__(self, n: int, total: torch.Tensor) -> None:
        self.n, self.total = n, total


def returns_sizes(x: torch.Tensor) -> tuple[torch.Tensor, int, _Box]:
    n = x.size(1) * 2 + 1
    return x * 2, n, _Box(x.size(0) + x.size(1), x.sum())


def test_sizes_in_the_result_are_computed_from_the_inputs_not_specialised() -> None:
    """An int computed from symbolic sizes and returned (an HF cache's length in a
    returned object) is rebuilt per call from the inputs' sizes (``SizeExpr``): one
    compile for every shape, not one per sequence length (HF Mistral with
    ``dynamic=True`` compiled once per length before)."""
    f = compiled(returns_sizes, dynamic=True)
    for cols in (3, 5, 8):
        x = torch.randn(2, cols)
        out, n, box = f(x)
        torch.testing.assert_close(out, x * 2)
        assert type(n) is int and n == 2 * cols + 1
        assert box.n == 2 + cols
        torch.testing.assert_close(box.total, x.sum())
    assert f.stats.compiles == 1


def scaled_across_break(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("break")
    return y + 1


def test_automatic_dynamic_at_a_resume_point() -> None:
    f = compiled(scaled_across_break)
    for batch in range(1, 12):
        x = torch.randn(batch, 3)
        torch.testing.assert_close(f(x), scaled_across_break(x))
    # each segment: static batch 1, then one symbolic compile (x, then the local y)
    assert (f.stats.compiles, f.stats.eager_fallback_calls) == (4, 0), f.stats


def nonzero_rows(x: torch.Tensor) -> torch.Tensor:
    idx = torch.nonzero(x > 0)
    return idx.sum(0) + idx.size(0)


def test_nonzero_gets_an_unbacked_size() -> None:
    f = compiled(nonzero_rows, dynamic=True)
    for x in (torch.tensor([1.0, -1.0, 2.0]), torch.tensor([-1.0, -2.0, 3.0, 4.0])):
        torch.testing.assert_close(f(x), nonzero_rows(x))
    assert f.stats.graph_breaks == 0 and f.stats.compiles == 1, f.stats
    text = print_program(f.graphs[0])
    assert "u0" in text, text


@pytest.mark.parametrize("capture", MODES)
def test_nonzero_in_a_default_capture_is_captured_again_symbolically(capture: str) -> None:
    f = compiled(nonzero_rows, capture)  # dynamic=None: static sizes, unbacked nonzero
    for x in (torch.tensor([1.0, -1.0, 2.0]), torch.tensor([-1.0, 2.0, 3.0])):
        torch.testing.assert_close(f(x), nonzero_rows(x))
    assert (f.stats.compiles, f.stats.graph_breaks, f.stats.cache_hits) == (1, 0, 1)


def test_nonzero_in_a_static_capture_breaks_with_a_reason() -> None:
    f = compiled(nonzero_rows, dynamic=False)
    x = torch.tensor([1.0, -1.0, 2.0])
    torch.testing.assert_close(f(x), nonzero_rows(x))
    assert f.stats.graph_breaks == 1
    assert "nonzero" in f.breaks[0].reason, f.breaks[0].reason


def add_rows(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x + y).sum(1)


def test_capture_exports_a_symbolic_program(tmp_path: Path) -> None:
    x, y = torch.randn(8, 3), torch.randn(8, 3)
    program = ef.capture(add_rows, x, y, dynamic_shapes={"x": {0: (1, 64)},
                                                          "y": {0: (1, 64)}})
    graph = program.forward
    x_meta, y_meta = (n.meta for n in graph.placeholders)
    symbol = x_meta.sizes[0]  # type: ignore[union-attr]
    assert isinstance(symbol, str) and y_meta.sizes[0] == symbol  # type: ignore[union-attr]
    r = graph.symbols[symbol]
    assert (r.lower, r.upper, r.hint) == (2, 64, 8)
    text = print_program(program)
    assert f"f32[{symbol}, 3]" in text, text
    path = tmp_path / "add_rows.ember"
    save(program, path)
    again = load(path)
    assert print_program(again) == text
    assert again.forward.symbols == graph.symbols


def test_capture_dynamic_shapes_is_checked() -> None:
    x = torch.randn(8, 3)
    for not_a_mapping in ([1], {"x": [0]}):  # (an AttributeError from inside)
        with pytest.raises(ValueError, match="expected a mapping of input names to"):
            ef.capture(add_rows, x, x, dynamic_shapes=not_a_mapping)
    with pytest.raises(ValueError, match="no tensor input named 'z'; tensor inputs: x, y"):
        ef.capture(add_rows, x, x, dynamic_shapes={"z": {0: None}})
    with pytest.raises(ValueError, match="dim 2 is not a dimension of a tensor of rank 2"):
        ef.capture(add_rows, x, x, dynamic_shapes={"x": {2: None}})
    with pytest.raises(ValueError, match="share the name 'batch' but have sizes"):
        ef.capture(add_rows, x, torch.randn(4, 3),
                   dynamic_shapes={"x": {0: ("batch", 2, 64)}, "y": {0: ("batch", 2, 64)}})
    with pytest.raises(ef.DynamicDimError, match=r"x\.size\(0\) was marked dynamic "
                                                 r"\(dynamic_shapes\)"):
        ef.capture(lambda x: x + 1 if x.size(0) == 8 else x, x,
                   dynamic_shapes={"x": {0: None}})


@pytest.mark.parametrize("capture", MODES)
def test_inductor_compiles_symbolic_sizes_once(capture: str) -> None:
    f = ef.compile(size_arithmetic, backend="inductor", dynamic=True,
                   options={"capture": capture})
    for rows, cols in ((2, 4), (3, 6), (5, 10)):
        x = torch.randn(rows, cols)
        torch.testing.assert_close(f(x), size_arithmetic(x))
    assert f.stats.compiles == 1, f.stats


def test_inductor_batch_sweep_compiles_twice() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU())
    f = ef.compile(model)  # inductor, strict, dynamic=None
    with torch.no_grad():
        for batch in (1, 2, 3, 9, 17):
            x = torch.randn(batch, 6)
            torch.testing.assert_close(f(x), model(x))
    assert f.stats.compiles == 2 and f.stats.eager_fallback_calls == 0, f.stats
