"""The ranges of data-dependent (unbacked) symbols survive the aot stage: the range
``torch._check`` gave an ``.item()`` at capture (or the one a count implies) is what the
re-traced forward and the backward declare, and what a saved file holds, so later
stages can prove with it (``u0 >= 2``) and a call outside it is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from ember.aot.pipeline import aot_compile
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import (UNBOUNDED_LOWER, InputSpec, Program, SymbolRange, load, save,
                              verify)
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.tracing import GraphRecorder


def capture(checked: bool = True, nonnegative: bool = False) -> Program:
    """``x[:n.item()].sin() * 2`` of a symbolic ``x``; ``checked``: with
    ``torch._check`` ranges for the item and a ``nonzero`` count as a second output;
    ``nonnegative``: with ``torch._check(k >= 0)`` only (else the item may be negative,
    and slices from the end)."""
    rec = GraphRecorder(dynamic=True)
    x = rec.add_input(torch.randn(8, 3, requires_grad=True), InputSpec("x"),
                      dynamic_dims={0: (2, None)})
    n = rec.add_input(torch.tensor(4), InputSpec("n"))
    with rec:
        k: Any = n.item()
        if nonnegative:
            torch._check(k >= 0)  # type: ignore[no-untyped-call]
        if checked:
            torch._check(k >= 2)  # type: ignore[no-untyped-call]
            torch._check(k <= 6)  # type: ignore[no-untyped-call]
        out = x[:k].sin() * 2
        counts = [torch.nonzero(x[:4] > 0)] if checked else []
    return rec.finish([out, *counts])


def test_unbacked_ranges_reach_the_forward_the_backward_and_the_file(tmp_path: Path) -> None:
    program = capture()
    assert program.forward.symbols["u0"] == SymbolRange(2, 6)
    functional = aot_compile(program)
    verify(functional)
    forward, backward = functional.graphs["forward"], functional.graphs["backward"]
    # before, the re-trace made u0 afresh in [0, inf]: the slice's Min(s0, u0) rows
    # became a new symbol u1 with a guard s0 >= u1
    assert forward.symbols["u0"] == SymbolRange(2, 6), forward.symbols
    assert backward.symbols["u0"] == SymbolRange(2, 6), backward.symbols
    assert forward.symbols["u1"] == SymbolRange(0, 12)  # the count: at most 4*3
    assert [g.expr for g in forward.guards] == ["s0 >= 4"]  # x[:4]; none over a u
    sliced = next(n for n in forward.nodes if n.target == "aten::slice.Tensor")
    assert sliced.meta.sizes[0] == "Min(s0, u0)"  # type: ignore[union-attr]
    save(functional, tmp_path / "f.ember")
    assert load(tmp_path / "f.ember").graphs["forward"].symbols["u0"] == SymbolRange(2, 6)


def test_a_call_outside_the_checked_range_is_refused_by_name() -> None:
    run = ProgramCallable(aot_compile(capture()))
    x = torch.randn(5, 3, requires_grad=True)
    out, _ = run([x, torch.tensor(3)])
    out.sum().backward()
    torch.testing.assert_close(out, x[:3].sin() * 2)
    assert x.grad is not None
    torch.testing.assert_close(x.grad[:3], 2 * x[:3].detach().cos())
    with pytest.raises(ShapeError, match=r"outside the range \[2, 6\] of symbol u0"):
        run([x, torch.tensor(7)])


def test_a_slice_by_a_nonnegative_item_is_an_expression_of_it() -> None:
    # with u0 >= 0 known the slice x[:u0] of a symbolic x has Min(s0, u0) rows, in the
    # capture and in the re-trace: no fresh u1, no guard on one. (Before the ranges of
    # items were kept as torch has them, the capture made u1 with a guard s0 >= u1 that
    # the re-trace, which took u0 >= 0, no longer defined: it did not verify.)
    program = capture(checked=False, nonnegative=True)
    assert "u1" not in program.forward.symbols and program.forward.guards == []
    functional = aot_compile(program)
    verify(functional)
    forward = functional.graphs["forward"]
    assert "u1" not in forward.symbols and forward.guards == [], forward.guards
    _trains_as_eager(functional, ((5, 3), (6, 0), (4, 9)))  # 9: the slice stops at 4 rows


def _trains_as_eager(functional: Program, cases: tuple[tuple[int, int], ...]) -> None:
    """``x[:value].sin() * 2`` of ``rows`` rows, forward and gradient, as eager's."""
    run = ProgramCallable(functional)
    for rows, value in cases:
        x_real = torch.randn(rows, 3, requires_grad=True)
        (got,) = run([x_real, torch.tensor(value)])
        got.sum().backward()
        ref = x_real.detach().clone().requires_grad_(True)
        (ref[:value].sin() * 2).sum().backward()  # type: ignore[no-untyped-call]
        torch.testing.assert_close(got, ref[:value].detach().sin() * 2)
        torch.testing.assert_close(x_real.grad, ref.grad)


def test_an_item_that_may_be_negative_reaches_the_backward_as_a_value() -> None:
    # x[:k] with k < 0 slices from the end: u0's range is [-inf, inf], no size can carry
    # it, so the forward saves it as a cpu int64 scalar the backward reads back
    program = capture(checked=False)
    assert program.forward.symbols["u0"] == SymbolRange(UNBOUNDED_LOWER, None)
    functional = aot_compile(program)
    verify(functional)
    backward = functional.graphs["backward"]
    assert "saved_value_for_backward_u0" in [p.name for p in backward.placeholders]
    reads = next(n for n in backward.nodes if n.name == "u0_from_forward")
    assert reads.target == "aten::_local_scalar_dense.default"
    _trains_as_eager(functional, ((5, 3), (6, -2), (4, -9), (4, 0)))
