"""Fusion stops where a Triton kernel would take more than ``MAX_KERNEL_BUFFERS``
buffers (``codegen/triton/backend.py``): independent updates of many same-shaped tensors
(an optimizer step over hundreds of parameters) fuse side by side into a few kernels, not
one of thousands of pointer arguments. Code generation only: no GPU needed."""

from __future__ import annotations

import re

import pytest
import torch
from ember.inductor.codegen.triton.backend import MAX_KERNEL_BUFFERS
from ember.inductor.compile import compile_graph
from ember.runtime.ir import parse_program

pytest.importorskip("triton")


def _program(n: int) -> str:
    inputs = ", ".join(f"%x{i}: f32[64]{{1}} cuda:0, %y{i}: f32[64]{{1}} cuda:0"
                       for i in range(n))
    body = "\n".join(f"  %z{i}: f32[64]{{1}} cuda:0 = aten::add.Tensor(%x{i}, %y{i})"
                     for i in range(n))
    outs = ", ".join(f"%z{i}" for i in range(n))
    kinds = ", ".join("user_output" for _ in range(n))
    return (f"program dialect=core-functional\n\ngraph forward({inputs}):\n{body}\n"
            f"  return ({outs})  [{kinds}]\n")


@pytest.mark.parametrize("n", [10, 200])
def test_side_by_side_fusion_stops_at_the_buffer_limit(n: int) -> None:
    compiled = compile_graph(parse_program(_program(n)), "forward", torch.device("cuda"))
    # each launch's arguments (kernels of identical code are listed once in .kernels)
    launches = re.findall(r"^    kernel\d+\((.*)\)$", compiled.wrapper, re.M)
    sizes = [len(args.split(", ")) for args in launches]
    assert all(s <= MAX_KERNEL_BUFFERS for s in sizes), sizes
    assert sum(sizes) == 3 * n  # every update in some kernel, each buffer once
    # as few kernels as the limit allows
    assert len(sizes) == -(-3 * n // (MAX_KERNEL_BUFFERS // 3 * 3)), sizes
