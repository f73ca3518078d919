"""as_strided_scatter is lowered (a copy of its input, then a scatter of the source
through the view's row-major positions) rather than run as an extern: the extern's
result depends on where its input lies in memory, and the inductor may hand it a view
of another buffer at an offset (a functional ``clone`` is no copy for it), which made
the write land at the wrong elements."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_fn

aten = torch.ops.aten


def _write_diagonal_of_slice(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    # what the aot stage makes of ``x[1:].diagonal().copy_(s)``: a row-major copy of the
    # slice (meta offset 0), then as_strided_scatter addressing that copy
    return aten.as_strided_scatter(aten.clone(x[1:]), s, [2], [5], 0)


def test_scatter_into_a_copied_slice() -> None:
    x, s = torch.randn(3, 4), torch.randn(2)
    program, run = compile_fn(_write_diagonal_of_slice, x, s)
    (got,) = run(x.clone(), s.clone())
    torch.testing.assert_close(got, _write_diagonal_of_slice(x, s))
    assert not program.metadata["fallbacks"]


def _compile_symbolic(f: Callable[[torch.Tensor], torch.Tensor]) -> Callable[..., Any]:
    """``f`` of one ``[s0, s1]`` input recorded with symbolic sizes and compiled: its
    forward executor."""
    from ember.inductor.compile import compile_program
    from ember.runtime.compiled import load_executor
    from ember.runtime.ir import InputSpec
    from ember.runtime.tracing import GraphRecorder

    rec = GraphRecorder(dynamic=True)
    fake = rec.add_input(torch.randn(3, 4), InputSpec("x"), dynamic_dims={0: (2, None),
                                                                          1: (2, None)})
    with rec:
        out = f(fake)
    program = rec.finish([out])
    program.dialect = "core-functional"
    return load_executor(compile_program(program, {}), "forward")


def test_scatter_into_a_copied_slice_of_symbolic_sizes() -> None:
    # not lowered over symbolic sizes: the extern gets a row-major copy of the slice,
    # not a view of the input at an offset
    def f(x: torch.Tensor) -> torch.Tensor:
        part = aten.clone(x[1:])
        return aten.as_strided_scatter(part, torch.zeros(2), [2], [part.shape[1] + 1], 0)

    run = _compile_symbolic(f)
    for shape in ((3, 4), (5, 6)):
        x = torch.randn(shape)
        (got,) = run([x.clone()])
        torch.testing.assert_close(got, f(x))


def test_scatter_into_a_copied_input_at_an_offset_of_symbolic_sizes() -> None:
    # the input is passed as a slice of a larger tensor (storage offset 5): the extern
    # must not get it itself (eager addresses its storage from the storage's start)
    def f(x: torch.Tensor) -> torch.Tensor:
        return aten.as_strided_scatter(aten.clone(x), torch.zeros(2), [2], [x.shape[1] + 1], 0)

    run = _compile_symbolic(f)
    for rows, cols in ((3, 4), (5, 6)):
        x = torch.randn(rows * cols + 5)[5:].view(rows, cols)
        (got,) = run([x])
        torch.testing.assert_close(got, f(x.clone()))
