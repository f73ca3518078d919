"""The aot stage's clean-up is the runtime's graph toolkit (ember.runtime.ir.cleanup):
what it keeps and merges, seen on the stage's output."""

from __future__ import annotations

import torch
from aot_capture import capture
from ember.aot.pipeline import aot_compile
from ember.runtime.ir import print_program


def _unused_random(x: torch.Tensor) -> torch.Tensor:
    torch.rand_like(x)  # unused, but it advances the generator as in eager
    return x + torch.rand_like(x)


def test_an_unused_random_call_stays() -> None:
    # the stage used to drop it, so the kept call drew the first numbers of the stream
    # where eager draws the second
    text = print_program(aot_compile(capture(_unused_random, torch.randn(3))))
    assert text.count("aten::rand_like") == 2


def test_duplicates_merge_and_dead_code_goes() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x.cos()
        return x.sin() * x.sin()

    text = print_program(aot_compile(capture(f, torch.randn(3))))
    assert text.count("aten::sin") == 1 and "aten::cos" not in text
