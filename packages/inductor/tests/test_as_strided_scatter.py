"""as_strided_scatter is lowered (a copy of its input, then a scatter of the source
through the view's row-major positions) rather than run as an extern: the extern's
result depends on where its input lies in memory, and the inductor may hand it a view
of another buffer at an offset (a functional ``clone`` is no copy for it), which made
the write land at the wrong elements."""

from __future__ import annotations

import sys
from pathlib import Path

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
