"""A reduction takes in the pointwise kernel that produces what it reads
(``inductor/absorb.py``): ReLU's gradient before a batch norm's per-channel sums, a
masked gradient before its bias gradient. The values are stored once and reduced in the
same pass instead of being written by one kernel and read back by the next. Under
Triton the reduction still splits over many programs: its partial programs store the
values (``split_writer.splittable``). The backend may refuse
(``KernelBackend.can_absorb``): C++ keeps column reductions apart, so the C++ cases
here are per-channel sums over contiguous NCHW rows, or a backend that always takes in."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.loop_ir import Kernel
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, format_schedule, schedule
from helpers import compile_for, trace


def masked_colsum(g: torch.Tensor, y: torch.Tensor, w: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    masked = torch.where(y > 0, g, 0.0)  # stored: the matmul reads it too
    return masked @ w, masked.sum(0)


def relu_grad_channel_sums(g: torch.Tensor, h: torch.Tensor, y: torch.Tensor,
                           x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A batch norm's backward after a ReLU on a residual sum, NCHW: the sums over N, H,
    W and dx. The masked gradient is stored (``lowering/inlining.py``: shared by three
    consumers, it loads three arrays of its size)."""
    masked = torch.where(y > 0, g + h, 0.0)
    total = masked.sum((0, 2, 3), keepdim=True)
    dot = (masked * x).sum((0, 2, 3), keepdim=True)
    return total, dot, masked * 3 - total * x - dot


class AbsorbingCpp(CppBackend):
    """C++ code for column reductions that took their producer in (correct, if slower)."""

    def can_absorb(self, fused: Kernel) -> bool:
        return True


@pytest.fixture
def cpp_absorbs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry's C++ backend (``compile_for``) takes in everywhere."""
    monkeypatch.setattr(CppBackend, "can_absorb", lambda self, fused: True)


def _kernels(fn: object, inputs: list[torch.Tensor], backend: KernelBackend) -> list[str]:
    steps = schedule(GraphLowering(trace(fn, inputs)).run(), backend)
    return [format_schedule([s]) for s in steps if isinstance(s, KernelStep)]


def _inputs(rows: int) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(rows, 64), torch.randn(rows, 64), torch.randn(64, 8)]


@pytest.mark.parametrize("make", [AbsorbingCpp, TritonBackend])
def test_the_column_sum_stores_what_it_reads(make: type[KernelBackend]) -> None:
    (kernel,) = _kernels(masked_colsum, _inputs(8192), make())
    assert kernel.startswith("kernel0 [64] reduce [8192]: buf0 (pointwise), buf2 (sum)")
    assert "stores buf0, buf2" in kernel


def test_cpp_keeps_a_column_reduction_apart() -> None:
    kernels = _kernels(masked_colsum, _inputs(8192), CppBackend())
    assert kernels[0].startswith("kernel0 [8192, 64]: buf0 (pointwise)"), kernels


@pytest.mark.parametrize("memory_format,make", [
    (torch.contiguous_format, CppBackend), (torch.channels_last, TritonBackend)])
def test_batch_norm_sums_take_in_the_relu_gradient(memory_format: torch.memory_format,
                                                   make: type[KernelBackend]) -> None:
    """NCHW: the group runs over the same dims as the sums. Channels-last: it runs over
    the storage order [N, H, W, C], and its variables become the coordinates of the
    element the sums read (``loop_ir/inverse.py``); C++ would run those sums as a column
    reduction, so only Triton takes the group in."""
    x = torch.randn(2, 16, 8, 8).contiguous(memory_format=memory_format)
    inputs = [torch.randn_like(x) for _ in range(3)] + [x]
    if memory_format == torch.channels_last:
        assert "(pointwise)" not in _kernels(relu_grad_channel_sums, inputs, CppBackend())[1]
    kernels = _kernels(relu_grad_channel_sums, inputs, make())
    assert kernels[0].startswith(
        "kernel0 [16] reduce [2, 8, 8]: buf0 (pointwise), buf1 (sum), buf2 (sum)"), kernels
    stores = kernels[0].split("stores ")[1]
    if memory_format == torch.channels_last:
        assert len(kernels) == 2 and stores == "buf0, buf1, buf2", kernels
    else:  # dx joins as a second pass, recomputing the masked gradient
        assert len(kernels) == 1 and stores == "buf1, buf2, buf3", kernels


@pytest.mark.usefixtures("cpp_absorbs")
def test_matches_eager(backend: str) -> None:
    inputs = _inputs(256)
    _, run = compile_for(masked_colsum, *inputs, backend=backend)
    for got, want in zip(run(*inputs), masked_colsum(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    for memory_format in (torch.contiguous_format, torch.channels_last):
        x = torch.randn(2, 16, 8, 8).contiguous(memory_format=memory_format)
        inputs = [torch.randn_like(x) for _ in range(3)] + [x]
        _, run = compile_for(relu_grad_channel_sums, *inputs, backend=backend)
        for got, want in zip(run(*inputs), relu_grad_channel_sums(*inputs), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_split_reduction_stores_from_its_partial_programs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced to split in four chunks a column (the interpreter runs it), the stored
    values and the sums still match eager: every element is written by one partial
    program."""
    from ember.inductor.codegen.triton import heuristics
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    monkeypatch.setattr(heuristics, "COLUMN_RBLOCK", 4)
    monkeypatch.setattr(heuristics, "COLUMN_MIN_ROWS", 64)
    inputs = _inputs(256)
    with triton_for_cpu():
        compiled, run = compile_for(masked_colsum, *inputs, backend="triton")
        got = run(*inputs)
    (source,) = [v.decode() for k, v in compiled.files.items()
                 if k.endswith(".py") and not k.endswith("wrapper.py")]
    partial = source.split("_partial(")[1].split("\ndef ")[0]
    assert "rsplit = tl.program_id(1)" in partial and "tl.store(buf0" in partial, source
    for g, w in zip(got, masked_colsum(*inputs), strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["other_space", "later_producer"])
def test_it_does_not_take_in(case: str) -> None:
    """Not a group over the reduction's full space (a sum over a slice of the values:
    the row reduction over [64] of a [128, 64] group), and not when the reduction also
    reads what a later kernel produced (the group would run before that kernel)."""
    if case == "other_space":
        def fn(g: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            masked = torch.where(y > 0, g, 0.0)
            return torch.ops.aten.mm(masked, y.t()), masked[:64].sum(0)
    else:
        def fn(g: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            masked = torch.where(y > 0, g, 0.0)
            other = torch.ops.aten.mm(masked, y.t())  # an extern after the group
            return other, (masked * other[:, :64]).sum(0)
    g, y = torch.randn(128, 64), torch.randn(128, 64)
    kernels = _kernels(fn, [g, y], CppBackend())
    assert len(kernels) == 2 and "(pointwise)" not in kernels[-1], kernels
    _, run = compile_for(fn, g, y, backend="cpp")
    for got, want in zip(run(g, y), fn(g, y), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_dense_strides_and_coordinates() -> None:
    from ember.inductor.loop_ir import Int, Var, add, mul
    from ember.inductor.loop_ir.inverse import coordinates, dense_strides

    n, h, w, c = Var("x0", 2), Var("x1", 8), Var("x2", 8), Var("x3", 16)
    nhwc = add(mul(n, 1024), mul(h, 128), mul(w, 16), c)
    assert dense_strides(nhwc, [n, h, w, c]) == [1024, 128, 16, 1]
    assert dense_strides(nhwc, [n, h, Int(0), w, c]) == [1024, 128, 0, 16, 1]
    assert dense_strides(add(mul(n, 2048), mul(h, 128), mul(w, 16), c), [n, h, w, c]) is None
    assert dense_strides(add(nhwc, 1), [n, h, w, c]) is None  # an offset
    assert dense_strides(add(mul(n, 1024), mul(h, 128), mul(w, 16)), [n, h, w, c]) is None
    # the element a per-channel reduction reads (x0: the channel; r0, r1, r2: n, h, w)
    ch, rn, rh, rw = Var("x0", 16), Var("r0", 2), Var("r1", 8), Var("r2", 8)
    read = add(mul(rn, 1024), ch, mul(rh, 128), mul(rw, 16))
    assert coordinates(read, [1024, 128, 16, 1], [n, h, w, c]) == [rn, rh, rw, ch]


def rows_of_a_3d_gradient(g: torch.Tensor, y: torch.Tensor, w: torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """A linear's bias gradient: the [2, 16, 64] gradient summed as [32, 64] rows."""
    flat = (g * torch.sigmoid(y)).reshape(32, 64)
    return torch.ops.aten.mm(flat, w), flat.sum(0)


@pytest.mark.usefixtures("cpp_absorbs")
def test_a_group_over_a_finer_shape_is_taken_in(backend: str) -> None:
    """The group runs over [2, 16, 64], the sum over [32] x [64]: its variables become
    ``r0 // 16``, ``r0 % 16``, ``x0``, which its contiguous loads fold back to
    ``r0*64 + x0`` (no ``//`` or ``%`` is left in the kernel)."""
    inputs = [torch.randn(2, 16, 64), torch.randn(2, 16, 64), torch.randn(64, 8)]
    (kernel,) = _kernels(rows_of_a_3d_gradient, inputs, TritonBackend())
    assert kernel.startswith("kernel0 [64] reduce [32]: buf0 (pointwise), buf2 (sum)"), kernel
    compiled, run = compile_for(rows_of_a_3d_gradient, *inputs, backend=backend)
    assert compiled.metadata["kernels"] == 1
    for got, want in zip(run(*inputs), rows_of_a_3d_gradient(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)



@pytest.mark.parametrize("y_strides,taken", [((1024, 64, 1), True), ((64, 128, 1), False)])
def test_not_when_an_index_would_keep_a_division(y_strides: tuple[int, ...],
                                                 taken: bool) -> None:
    """A [2, 16, 64] group read by a sum over [32] x [64] rows: as the sum's inner work its
    variables are ``r0 // 16``, ``r0 % 16``, ``x0``. A load of a contiguous ``y`` folds
    back to ``r0*64 + x0``; one of ``y`` in [16, 2, 64] storage would keep
    ``(r0 // 16)*64 + (r0 % 16)*128 + x0``, so the group stays apart."""
    from ember.inductor.absorb import absorbing
    from ember.inductor.buffers import PointwiseBuffer, ReductionBuffer
    from ember.inductor.kernel_group import KernelGroup
    from ember.inductor.loop_ir import IndexExpr, add, mul

    f32 = torch.float32

    def product(b: Any, i: tuple[IndexExpr, ...]) -> str:
        y = b.load("y", add(*(mul(v, s) for v, s in zip(i, y_strides))), f32)
        g = b.load("g", add(mul(i[0], 1024), mul(i[1], 64), i[2]), f32)
        return str(b.compute("mul", y, g))

    node = PointwiseBuffer("p", f32, (2, 16, 64), product)
    total = ReductionBuffer("s", f32, "sum", (32, 64), (0,), False,
                            lambda b, i: b.load("p", add(mul(i[0], 64), i[1]), f32))
    group = KernelGroup((2, 16, 64), (), [(node, lambda b, xs, rs: node.emit(b, xs))])
    assert (absorbing(total, group, TritonBackend()) is not None) == taken
