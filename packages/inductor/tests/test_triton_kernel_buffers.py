"""Fusion stops where a kernel would take more than its backend's ``max_kernel_buffers``
buffers (or ``max_kernel_statements`` statements: ``test_kernel_statement_limit.py``) (Triton: ``codegen/triton/backend.py``): independent updates of many same-shaped tensors
(an optimizer step over hundreds of parameters) fuse side by side into a few kernels, not
one of thousands of pointer arguments. Code generation only: no GPU needed."""

from __future__ import annotations

import re

import pytest
import torch
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.compile import compile_graph
from ember.runtime.ir import parse_program

pytest.importorskip("triton")

LIMIT: int = TritonBackend.max_kernel_buffers or 0


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
    assert all(s <= LIMIT for s in sizes), sizes
    assert sum(sizes) == 3 * n  # every update in some kernel, each buffer once
    # as few kernels as the limits allow: buffers, and statements (two loads, the add,
    # the store each: max_kernel_statements)
    statements = TritonBackend.max_kernel_statements or 0
    assert all(len(k.body) <= statements for k, _ in compiled.kernels)
    per_kernel = min(LIMIT // 3, statements // 4)
    assert len(sizes) == -(-n // per_kernel), sizes


def test_a_cpu_step_over_many_small_tensors_loads() -> None:
    # ctypes calls a C function of at most 1024 arguments: 400 small independent adds
    # (1200 buffers, under HORIZONTAL_LIMIT_ELEMENTS: no horizontal limit) were one
    # kernel of 1200 arguments that could not be loaded
    from helpers import compile_fn

    def adds(*xs: torch.Tensor) -> list[torch.Tensor]:
        return [xs[i] + xs[i + 1] for i in range(0, len(xs), 2)]

    inputs = [torch.randn(16) for _ in range(800)]
    compiled, run = compile_fn(adds, *inputs)
    outs = run(*inputs)
    for got, want in zip(outs, adds(*inputs)):
        torch.testing.assert_close(got, want)


def _large_program(n: int, size: int) -> str:
    """``n`` independent in-place-style updates ``z = x * 0.9 + y`` over ``size`` elements
    (an optimizer step's shape of work)."""
    inputs = ", ".join(f"%x{i}: f32[{size}]{{1}} cuda:0, %y{i}: f32[{size}]{{1}} cuda:0"
                       for i in range(n))
    body = "\n".join(
        f"  %m{i}: f32[{size}]{{1}} cuda:0 = aten::mul.Tensor(%x{i}, 0.9)\n"
        f"  %z{i}: f32[{size}]{{1}} cuda:0 = aten::add.Tensor(%m{i}, %y{i})"
        for i in range(n))
    outs = ", ".join(f"%z{i}" for i in range(n))
    kinds = ", ".join("user_output" for _ in range(n))
    return (f"program dialect=core-functional\n\ngraph forward({inputs}):\n{body}\n"
            f"  return ({outs})  [{kinds}]\n")


def test_large_independent_updates_fuse_up_to_the_horizontal_limit() -> None:
    # 12 updates of 3 buffers over 4M elements: side by side up to 24 buffers a kernel
    # (8 updates), measured on the H200 (an AdamW step over every weight in one kernel
    # ran at 2.4x the GPU time of kernels of 24 buffers)
    limit = TritonBackend.horizontal_buffer_limit
    assert limit == 24
    compiled = compile_graph(parse_program(_large_program(12, 1 << 22)), "forward",
                             torch.device("cuda"))
    launches = re.findall(r"^    kernel\d+\((.*)\)$", compiled.wrapper, re.M)
    sizes = [len(args.split(", ")) for args in launches]
    assert sizes == [24, 12], sizes
    # small arrays (under HORIZONTAL_LIMIT_ELEMENTS) stay in one kernel
    small = compile_graph(parse_program(_large_program(12, 1024)), "forward",
                          torch.device("cuda"))
    assert len(re.findall(r"^    kernel\d+\(", small.wrapper, re.M)) == 1, small.wrapper
