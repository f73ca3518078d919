"""The wrapper's input stamp (``codegen/wrapper.py``): a graph with many static-layout
inputs tests them only when the runtime's ``InputStamp`` (one C++ check of their
metadata against a call that passed the tests) does not hold. Every input the tests
reject is still rejected, and an input of another layout still copied, once the stamp
has answered calls; a runtime without the stamp runs the tests every call."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.inductor.codegen.wrapper import STAMP_MIN_INPUTS
from ember.runtime.compiled import load_executor
from ember.runtime.ir import Program

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace

N = STAMP_MIN_INPUTS + 2


def _scaled(*xs: torch.Tensor) -> torch.Tensor:
    total = xs[0] * 1.0
    for i, x in enumerate(xs[1:]):
        total = total + x * float(i + 2)
    return total


def _inputs(n: int = N) -> list[torch.Tensor]:
    return [torch.randn(4, 4) for _ in range(n)]


def _compiled(n: int = N) -> tuple[Program, Callable[..., list[Any]]]:
    return compile_and_load(trace(_scaled, _inputs(n)))


def _wrapper(program: Program) -> str:
    return program.files["forward/wrapper.py"].decode()


def test_many_inputs_are_checked_through_the_stamp() -> None:
    program, run = _compiled()
    wrapper = _wrapper(program)
    assert "if _inputs is None or not _inputs.holds(" in wrapper, wrapper
    xs = _inputs()
    for _ in range(3):
        torch.testing.assert_close(run(*xs)[0], _scaled(*xs))


def test_few_inputs_are_tested_inline() -> None:
    program, run = _compiled(STAMP_MIN_INPUTS - 1)
    assert "_inputs" not in _wrapper(program)
    xs = _inputs(STAMP_MIN_INPUTS - 1)
    torch.testing.assert_close(run(*xs)[0], _scaled(*xs))


WRONG: dict[str, Callable[[torch.Tensor], Any]] = {
    "shape": lambda x: torch.randn(4, 5),
    "dtype": lambda x: x.double(),
    "not a tensor": lambda x: 1.0,
}


@pytest.mark.parametrize("what", sorted(WRONG))
def test_a_wrong_input_is_rejected_after_the_stamp_answered(what: str) -> None:
    _, run = _compiled()
    xs = _inputs()
    for _ in range(3):
        run(*xs)
    wrong: list[Any] = list(xs)
    wrong[3] = WRONG[what](xs[3])
    with pytest.raises(TypeError, match="compiled graph input"):
        run(*wrong)
    torch.testing.assert_close(run(*xs)[0], _scaled(*xs))


def _stamp(execute: Callable[[list[Any]], list[Any]]) -> Any:
    """The input stamp of a loaded executor's wrapper (its ``call``, found through the
    executor's closures)."""
    seen: list[Any] = [execute]
    while seen:
        fn = seen.pop()
        if getattr(fn, "__name__", "") == "call":
            return fn.__globals__["_inputs"]
        seen.extend(c.cell_contents for c in getattr(fn, "__closure__", None) or ()
                    if callable(c.cell_contents))
    raise AssertionError("no wrapper call() among the executor's closures")


def test_an_input_of_another_layout_is_copied_after_the_stamp_answered() -> None:
    program, _ = _compiled()
    execute = load_executor(program, "forward")
    xs = _inputs()
    for _ in range(3):
        execute(list(xs))
    stamp = _stamp(execute)
    assert (stamp.stamps, stamp.hits) == (1, 2)
    strided = list(xs)
    strided[5] = xs[5].t().contiguous().t()  # same values, column-major
    for _ in range(4):  # copied every call, and never stamped (the stamp stays on)
        torch.testing.assert_close(execute(list(strided))[0], _scaled(*xs))
    torch.testing.assert_close(execute(list(xs))[0], _scaled(*xs))
    assert (stamp.stamps, stamp.hits, stamp.off) == (1, 3, False)


def test_a_runtime_without_the_stamp_tests_every_call(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    program, _ = _compiled()
    monkeypatch.setitem(sys.modules, "ember.runtime.input_stamp", None)  # ImportError
    execute = load_executor(program, "forward")
    xs = _inputs()
    for _ in range(2):
        torch.testing.assert_close(execute(list(xs))[0], _scaled(*xs))
    wrong = list(xs)
    wrong[0] = xs[0].double()
    with pytest.raises(TypeError, match="compiled graph input"):
        execute(wrong)


def _symbolic_program() -> Program:
    from ember.runtime.ir import parse_program

    weights = ", ".join(f"%w{i}: f32[4]{{1}} cpu" for i in range(N))
    body = ["  %y0: f32[s0, 4]{4,1} cpu = aten::mul.Tensor(%x, %w0)"]
    body += [f"  %y{i}: f32[s0, 4]{{4,1}} cpu = aten::add.Tensor(%y{i - 1}, %w{i})"
             for i in range(1, N)]
    program = parse_program(
        "program dialect=core-functional\n\n"
        f"graph forward(%x: f32[s0, 4]{{4,1}} cpu, {weights}):\n"
        "  symbols s0 in [2, inf] hint=3\n" + "\n".join(body)
        + f"\n  return (%y{N - 1})  [user_output]\n")
    program.untrusted_origin = None  # built here, not read from a file
    return program


def test_a_symbolic_input_is_tested_inline_beside_the_stamped_ones() -> None:
    program, run = compile_and_load(_symbolic_program())
    wrapper = _wrapper(program)
    assert "_inputs.holds(" in wrapper and "arg0" not in wrapper.split(
        "_inputs.holds(")[1].split(")")[0], wrapper  # the symbolic input is not stamped
    ws = [torch.randn(4) for _ in range(N)]
    for rows in (2, 5, 3, 7):
        x = torch.randn(rows, 4)
        expected = x * ws[0]
        for w in ws[1:]:
            expected = expected + w
        torch.testing.assert_close(run(x, *ws)[0], expected)
    with pytest.raises(TypeError, match="compiled graph input"):
        run(torch.randn(3, 4).double(), *ws)
