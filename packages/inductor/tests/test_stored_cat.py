"""A concatenation that a matmul reads, and another consumer reads too, is stored at its
definition (``inlining.Uses.stored_anyway``): the other consumers read the stored buffer
instead of recomputing the concatenation's masked loads per element (a GPT's qkv bias
gradient sums the concatenated ``dq``, ``dk``, ``dv`` its weight gradient's matmul reads)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.inlining import Uses
from ember.inductor.scheduler import format_schedule, schedule
from helpers import compile_fn, trace


def qkv_grads(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, w: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.cat([a, b, c], dim=1)
    return g.t() @ w, g.sum(0)


def two_pieces(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.cat([a, b], dim=1)
    return g.t() @ w, g.sum(0)


def no_matmul(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.cat([a, b, c], dim=1)
    return g * 2.0, g.sum(0)


def _readers(fn: Callable[..., object], inputs: list[torch.Tensor],
             backend: KernelBackend, buffer: str = "arg0") -> tuple[int, str]:
    """How many kernels load ``buffer``, and the schedule."""
    text = format_schedule(schedule(GraphLowering(trace(fn, inputs)).run(), backend))
    loads = [line.split("; loads ")[1].split(";")[0].split(", ")
             for line in text.splitlines() if line.startswith("kernel") and "; loads " in line]
    return sum(buffer in names for names in loads), text


def _pieces(n: int) -> list[torch.Tensor]:
    return [torch.randn(16, 32) for _ in range(n)]


@pytest.mark.parametrize("backend", [CppBackend(), TritonBackend()], ids=["cpp", "triton"])
def test_a_cat_a_matmul_reads_is_read_back_not_recomputed(backend: KernelBackend) -> None:
    readers, text = _readers(qkv_grads, [*_pieces(3), torch.randn(16, 8)], backend)
    assert readers == 1, text  # the cat's kernel; the sum reads its buffer (or joins it)


@pytest.mark.parametrize(("fn", "pieces", "stored"), [
    (qkv_grads, 3, True), (two_pieces, 2, False), (no_matmul, 3, False)])
def test_the_rule(fn: Callable[..., object], pieces: int, stored: bool) -> None:
    inputs = _pieces(pieces) + ([torch.randn(16, 8)] if fn is not no_matmul else [])
    graph = trace(fn, inputs).graphs["forward"]
    (cat,) = [n.name for n in graph.nodes if n.target == "aten::cat.default"]
    assert Uses(graph).stored_anyway(cat) is stored
    # two pieces: the sum recomputes the concatenation from both
    if fn is two_pieces:
        readers, text = _readers(fn, inputs, CppBackend())
        assert readers == 2, text


def test_values_match_eager() -> None:
    inputs = [*_pieces(3), torch.randn(16, 8)]
    _, run = compile_fn(qkv_grads, *inputs)
    for got, want in zip(run(*inputs), qkv_grads(*inputs)):
        torch.testing.assert_close(got, want)
