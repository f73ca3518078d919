"""Column sums inside row kernels (``Reduce.across``: ``inductor/mixed.py``,
``loop_ir/across.py``, ``codegen/triton/mixed_writer.py``): a norm's backward reads its
input once for ``dx`` and the weight gradient. The printed kernels, which bodies split,
which kernels Triton takes, the C++ backend's refusal, and numerics through Triton's
interpreter (static and symbolic rows, 3-d inputs)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest
import sympy
import torch
from ember.inductor.codegen.triton.mixed_writer import MixedReductionWriter, mixable
from ember.inductor.loop_ir import (
    Buffer,
    Compute,
    Kernel,
    Load,
    Reduce,
    Store,
    Var,
    add,
    format_kernel,
    mul,
)
from ember.inductor.loop_ir.across import across_parts, has_across
from torch import nn

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")

from test_norm_kernels import Loss, RMSNorm, cuda_training_sources  # noqa: E402


def _kernel(*extra: Any, rows: Any = 128, cols: Any = 64) -> Kernel:
    """``dw[c] = sum_r x[r, c] * g[r]`` across the rows of a row kernel over ``x``, with
    ``extra`` statements after it."""
    x0, r0 = Var("x0", rows), Var("r0", cols)
    body = (
        Load("v0", "x", add(mul(x0, cols), r0), torch.float32),
        Load("v1", "g", x0, torch.float32),
        Compute("v2", "mul", ("v0", "v1"), torch.float32),
        Reduce("v3", "sum", "v2", torch.float32, across=True),
        *extra,
    )
    buffers = (Buffer("x", torch.float32, (rows, cols), (cols, 1)),
               Buffer("g", torch.float32, (rows,), (1,)),
               Buffer("out", torch.float32, (cols,), (1,)),
               Buffer("rows", torch.float32, (rows,), (1,)))
    return Kernel("k", (x0,), (r0,), body, buffers)


def test_a_column_sum_and_its_cast_run_after_the_rows() -> None:
    k = _kernel(Compute("v4", "cast", ("v3",), torch.float16),
                Store("out", Var("r0", 64), "v4"))
    parts = across_parts(k)
    assert parts is not None
    assert [s.name for s in parts.reduces] == ["v3"]
    assert [getattr(s, "name", "store") for s in parts.columns] == ["v4", "store"]
    assert [s.name for s in parts.rows] == ["v0", "v1", "v2"]
    assert "v3: float32 = reduce_sum_across(v2)" in format_kernel(k)


def test_an_across_sum_read_by_a_row_value_does_not_split() -> None:
    """The sum is known only after every row: a value over the rows cannot read it."""
    reads_sum = _kernel(Compute("v4", "mul", ("v3", "v1"), torch.float32),
                        Store("out", Var("r0", 64), "v4"))
    assert across_parts(reads_sum) is None
    stored_by_row = _kernel(Store("rows", Var("x0", 128), "v3"))
    assert across_parts(stored_by_row) is None
    plain = dataclasses.replace(_kernel(), body=_kernel().body[:3])
    assert across_parts(plain) is None and not has_across(plain)


def test_triton_takes_whole_rows_of_a_static_size_only() -> None:
    store = Store("out", Var("r0", 64), "v3")
    assert mixable(_kernel(store))
    long_rows = Store("out", Var("r0", 8192), "v3")
    assert not mixable(_kernel(long_rows, cols=8192))  # no whole row in registers
    s0 = sympy.Symbol("s0", positive=True, integer=True)
    assert mixable(_kernel(store, rows=s0))  # symbolic rows: each program's share
    assert not mixable(_kernel(Store("out", Var("r0", s0), "v3"), cols=s0))


@pytest.mark.parametrize("rows,cols,want", [
    (16384, 4096, (1, 4096, 4)),  # the row kernel's: one row a step
    (16384, 768, (4, 1024, 4)),  # a GPT's LayerNorm: four rows a step, not one
    (192, 32, (128, 32, 4)),
    (8, 32, (8, 32, 1)),  # no more rows a step than the tensor has
])
def test_a_mixed_kernel_steps_over_at_least_mixed_tile_elements(
        rows: int, cols: int, want: tuple[int, int, int]) -> None:
    from ember.inductor.codegen.triton.mixed_writer import mixed_config

    config = mixed_config(_kernel(Store("out", Var("r0", cols), "v3"), rows=rows, cols=cols))
    assert (config.xblock, config.rblock, config.num_warps) == want
    assert config.persistent


def test_a_norm_backward_is_one_kernel_summing_its_columns() -> None:
    """RMSNorm 16384 x 4096, bf16, for CUDA: ``dx`` and the weight gradient in one
    kernel (its partial function over 261 programs of 63 rows), the weight gradient's
    cast in its combining function."""
    backward = [(k, src) for graph, k, src in cuda_training_sources(RMSNorm(4096),
                                                                     (16384, 4096))
                if graph == "backward"]
    assert len(backward) == 1
    kernel, source = backward[0]
    printed = format_kernel(kernel)
    assert printed.count("reduce_sum_across") == 1, printed
    assert printed.count("= reduce_sum(") == 1, printed
    assert "# rows and 1 column sum(s): 261 programs of 63 rows a program" in source.source
    assert "def bwd_kernel0_partial(" in source.source


def _cpu_kernels(model: nn.Module, x: torch.Tensor) -> list[Kernel]:
    from ember.aot.config import AotConfig
    from ember.aot.pipeline import aot_compile
    from ember.frontend import capture
    from ember.inductor.compile import compile_graph
    from ember.inductor.passes import run_passes

    program = run_passes(aot_compile(capture(Loss(model), x.requires_grad_(True)),
                                     AotConfig(training=True)))
    return [k for name in ("forward", "backward")
            for k, _ in compile_graph(program, name, torch.device("cpu")).kernels]


def test_the_cpp_backend_keeps_column_sums_apart() -> None:
    kernels = _cpu_kernels(RMSNorm(64), torch.randn(256, 64))
    assert kernels and not any(has_across(k) for k in kernels)


def _grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    x = x.detach().requires_grad_(True)
    Loss(model)(x).backward()
    assert x.grad is not None
    return [x.grad] + [p.grad for p in model.parameters() if p.grad is not None]


def _written_programs(monkeypatch: pytest.MonkeyPatch, most: int) -> list[tuple[int, str]]:
    """At most ``most`` programs a mixed kernel; the list fills with each written mixed
    kernel's ``(programs, rows a program)``."""
    from ember.inductor.codegen.triton import mixed_writer

    programs: list[tuple[int, str]] = []
    write = MixedReductionWriter.write

    def spy(self: MixedReductionWriter) -> Any:
        programs.append(self.programs())
        return write(self)

    monkeypatch.setattr(MixedReductionWriter, "write", spy)
    monkeypatch.setattr(mixed_writer, "MIXED_PROGRAMS", most)
    return programs


@pytest.mark.parametrize("case", ["layer_norm_3d", "rms_norm_dynamic"])
def test_mixed_kernels_match_eager_in_the_interpreter(
        case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A LayerNorm over a ``[4, 48, 32]`` input (two column sums, the rows two dims), and
    an RMSNorm compiled with ``dynamic=True`` run at two row counts (each program's
    share of the rows computed from the size argument); two programs, so that each walks
    several blocks of rows."""
    import ember.frontend
    from ember.inductor.codegen.triton import mixed_writer
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    programs = _written_programs(monkeypatch, 2)
    monkeypatch.setattr(mixed_writer, "MIXED_TILE", 1)  # the row kernel's row blocks
    torch.manual_seed(0)
    model: nn.Module
    if case == "layer_norm_3d":
        model = nn.LayerNorm(32)
        with torch.no_grad():
            model.weight.normal_(1.0, 0.1)
            model.bias.normal_(0.0, 0.1)
        inputs = [torch.randn(4, 48, 32)]
    else:
        model = RMSNorm(32)
        inputs = [torch.randn(200, 32), torch.randn(72, 32)]
    eager = copy.deepcopy(model)
    with triton_for_cpu():
        compiled = ember.frontend.compile(model, backend="inductor", options={"strict": True},
                                          dynamic=case == "rms_norm_dynamic")
        for x in inputs:
            for p in model.parameters():
                p.grad = None
            for p in eager.parameters():
                p.grad = None
            got = _grads(compiled, x)
            want = _grads(eager, x)
            for g, w in zip(got, want, strict=True):
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert programs, "no kernel summed columns across its rows"
    if case == "layer_norm_3d":
        assert programs == [(2, "96")]  # 192 rows: 2 programs of 3 blocks of 32
    else:  # each program's rows computed from the row count s0
        assert programs == [(2, "(32*((((s0 + 1) // 2) + 31) // 32))")], programs


def test_nodes_join_a_mixed_group_by_its_row_reductions_index_only() -> None:
    """A column sum's group, then a row sum over the same elements: Triton takes the
    group over the rows (the column sum across them). A pointwise node over the full
    space then joins at the row sum's index, never at the column sum's (the transposed
    index, which would store ``dx`` at the wrong places)."""
    from ember.inductor import mixed, scheduler
    from ember.inductor.buffers import PointwiseBuffer, ReductionBuffer
    from ember.inductor.codegen.triton.backend import TritonBackend
    from ember.inductor.kernel_group import KernelGroup, natural
    from ember.inductor.loop_ir import format_stmt

    f32 = torch.float32

    def x(b: Any, i: tuple[Any, ...]) -> str:
        return str(b.load("x", add(mul(i[0], 32), i[1]), f32))

    column = ReductionBuffer("w", f32, "sum", (64, 32), (0,), False, x)
    row = ReductionBuffer("s", f32, "sum", (64, 32), (1,), False, x)
    dx = PointwiseBuffer("dx", f32, (64, 32), lambda b, i: str(b.compute(
        "mul", x(b, i), b.load("s", i[0], f32))))
    outer, red, emit = natural(column)
    group = mixed.mixing(row, KernelGroup(outer, red, [(column, emit)]), TritonBackend())
    assert group is not None
    assert (group.outer, group.reduction, group.across) == ((64,), (32,), {"w"})
    placements = scheduler._placements(dx, group)
    assert len(placements) == 1
    b = group.build(placements[0])[0]
    stores = [format_stmt(s) for s in b.stmts if isinstance(s, Store)]
    assert stores[-1] == "store dx[(x0*32 + r0)] = v3", stores


class LinearGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.up(x), approximate="tanh")


def test_column_groups_as_rows_match_eager_in_the_interpreter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The experiment ``column_groups_as_rows`` (off by default): a bias gradient with
    GELU's gradient inside runs as a row kernel summing across its rows, and matches
    eager. (A batch norm's statistics stay column kernels: the variance's sum reads the
    mean's, which an across sum cannot.)"""
    import ember.frontend
    from ember.inductor.codegen.triton.testing import TritonOnCpuBackend, triton_for_cpu

    programs = _written_programs(monkeypatch, 4)
    monkeypatch.setattr(TritonOnCpuBackend, "column_groups_as_rows", True)
    torch.manual_seed(0)
    model = LinearGelu()
    eager = copy.deepcopy(model)
    x = torch.randn(96, 32)
    with triton_for_cpu():
        compiled = ember.frontend.compile(model, backend="inductor", options={"strict": True})
        got = _grads(compiled, x)
    for g, w in zip(got, _grads(eager, x), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
    assert programs == [(2, "64")], programs  # 96 rows of 64: 2 programs, a step 64 rows


@pytest.mark.parametrize("rows", [16384, "s0"])
def test_mixed_kernels_compile_for_sm90(rows: Any) -> None:
    """Both functions of a mixed kernel, static and over a symbolic row count, pass the
    real compiler for sm_90 (no GPU)."""
    from ember.inductor.codegen.triton.generate import generate_triton_kernel
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_kernel import TritonKernelSpec
    from ember.runtime.compiled.triton_launcher import split_from_entry
    from ember.runtime.ir.contracts import TritonSplitMeta

    size = sympy.Symbol(rows, positive=True, integer=True) if isinstance(rows, str) else rows
    kernel = _kernel(Compute("v4", "cast", ("v3",), torch.bfloat16),
                     Store("out", Var("r0", 768), "v4"), rows=size, cols=768)
    code = generate_triton_kernel(kernel)
    meta = code.meta()
    spec = TritonKernelSpec(name=code.name, source=code.source,
                            signature=dict(meta["signature"]),
                            constexprs=dict(meta["constexprs"]),
                            num_warps=meta["num_warps"], num_stages=meta["num_stages"])
    partial = split_from_entry(spec, TritonSplitMeta.from_json(meta["split"], "split")).spec
    for s in (spec, partial):
        assert ".target sm_90" in compile_for_target(s).asm["ptx"]


@pytest.mark.parametrize("columns,want", [(4096, 32), (768, 16), (32, 16), (16384, 64)])
def test_the_combining_function_gives_each_multiprocessor_a_program(
        columns: int, want: int) -> None:
    from ember.inductor.codegen.triton.mixed_writer import combine_columns

    assert combine_columns(columns) == want
