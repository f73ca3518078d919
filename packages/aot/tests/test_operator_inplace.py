"""Python's in-place operators on tensors (``x <<= 1``, ``x &= y``, ...) record the
dunder ATen ops (``aten::__ilshift__``, ``aten::__iand__``, ...), whose functional
variants are the dunder ops without the ``i`` (``aten::__lshift__``): the aot stage
functionalizes them like any other mutation."""

from __future__ import annotations

import torch
from aot_capture import compile_fn
from ember.runtime.ir import resolve_op
from ember_testing.mutation_corpus import check_against_eager


def _shifts_and_bits(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x <<= 1
    x >>= y.abs() % 3
    x &= y
    x |= 4
    x ^= y
    x <<= y.abs() % 2
    return x


def _bool_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a &= b
    a ^= b
    return a


def test_dunder_inplace_operators_match_eager() -> None:
    for fn, inputs in (
        (_shifts_and_bits, (torch.randint(-9, 9, (3, 4)), torch.randint(-9, 9, (4,)))),
        (_bool_bits, (torch.rand(3, 4) > 0.5, torch.rand(4) > 0.5)),
    ):
        program, run = compile_fn(fn, *[t.clone() for t in inputs])
        assert not any(resolve_op(n.target)._schema.is_mutable for n in program.forward.calls())
        check_against_eager(fn, lambda *args, run=run: run(list(args)), inputs)
