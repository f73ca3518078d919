"""The schedule and generated kernels read as text, compared with the text in this file.

The schedule (``scheduler.format_schedule``: which loop nodes fused into which kernel, what
each kernel loads and stores) of small programs, some under both backends (Triton keeps a
split reduction apart from a second pass: ``TritonBackend.can_fuse``), and
the C++ and Triton sources of softmax's kernel. Print the current texts with
``python packages/inductor/tests/test_schedule_golden.py``, paste them over the constants
below and review the diff.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.backend import KernelBackend
from ember.inductor.codegen.cpp.backend import CppBackend
from ember.inductor.codegen.cpp.kernel import generate_function
from ember.inductor.codegen.triton.backend import TritonBackend
from ember.inductor.codegen.triton.generate import generate_triton_kernel
from ember.inductor.loop_ir import Kernel
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import KernelStep, Step, format_schedule, schedule
from helpers import trace


def softmax(x: torch.Tensor) -> torch.Tensor:
    m = x.amax(-1, keepdim=True)
    e = (x - m).exp()
    return e / e.sum(-1, keepdim=True)


def linear_relu_colsum(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    h = torch.ops.aten.mm(x, w) + b
    return torch.relu(h), h.sum(0)


def total_and_double(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return x.sum(), x * 2


def total_and_centered(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    total = x.sum()
    return total, (x - total).sum()


def relu_grad_colsum(g: torch.Tensor, y: torch.Tensor, w: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    masked = torch.where(y > 0, g, 0.0)  # stored: the matmul reads it too
    return torch.ops.aten.mm(masked, w), masked.sum(0)


PROGRAMS: dict[str, tuple[Callable[..., object], list[torch.Tensor]]] = {
    "softmax": (softmax, [torch.randn(4, 8)]),
    "linear_relu_colsum": (linear_relu_colsum,
                           [torch.randn(4, 8), torch.randn(8, 16), torch.randn(16)]),
    "total_and_double": (total_and_double, [torch.randn(256, 512)]),
    "total_and_centered": (total_and_centered, [torch.randn(256, 512)]),
    "relu_grad_colsum": (relu_grad_colsum,
                         [torch.randn(8192, 64), torch.randn(8192, 64), torch.randn(64, 8)]),
}


def steps_of(name: str, backend: KernelBackend) -> list[Step]:
    fn, inputs = PROGRAMS[name]
    return schedule(GraphLowering(trace(fn, inputs)).run(), backend)


def schedule_text(name: str, backend: KernelBackend) -> str:
    return format_schedule(steps_of(name, backend))


def softmax_kernel() -> Kernel:
    (step,) = steps_of("softmax", CppBackend())
    assert isinstance(step, KernelStep)
    return step.kernel


SCHEDULES: dict[tuple[str, str], str] = {
    ("softmax", "cpp"): """\
kernel0 [4] reduce [8]: buf0 (max), buf1 (sum), buf2 (pointwise); loads arg0; stores buf2""",
    ("linear_relu_colsum", "cpp"): """\
extern aten::mm.default(arg0, arg1) -> buf0
kernel0 [16] reduce [4]: buf1 (sum), buf2 (pointwise); loads buf0, arg2; stores buf1, buf2""",
    # both fuse the independent x * 2 into the reduction's kernel (horizontal fusion):
    # Triton's split reduction stores it from its partial programs ...
    ("total_and_double", "cpp"): """\
kernel0 [] reduce [256, 512]: buf0 (sum), buf1 (pointwise); loads arg0; stores buf0, buf1""",
    ("total_and_double", "triton"): """\
kernel0 [] reduce [256, 512]: buf0 (sum), buf1 (pointwise); loads arg0; stores buf0, buf1""",
    # ... but a second pass after the total would keep Triton from splitting x.sum() over
    # many programs, so it keeps that pass apart
    ("total_and_centered", "cpp"): """\
kernel0 [] reduce [256, 512]: buf0 (sum), buf1 (sum); loads arg0; stores buf0, buf1""",
    ("total_and_centered", "triton"): """\
kernel0 [] reduce [256, 512]: buf0 (sum); loads arg0; stores buf0
kernel1 [] reduce [256, 512]: buf1 (sum); loads arg0, buf0; stores buf1""",
    # under Triton the column sum takes in the pointwise kernel it reads (absorb.py): the
    # masked gradient is stored for the matmul and summed in one pass; C++ keeps a column
    # reduction apart (CppBackend.can_absorb)
    ("relu_grad_colsum", "cpp"): """\
kernel0 [8192, 64]: buf0 (pointwise); loads arg1, arg0; stores buf0
extern aten::mm.default(arg2, buf0) -> buf1
kernel1 [64] reduce [8192]: buf2 (sum); loads buf0; stores buf2""",
    ("relu_grad_colsum", "triton"): """\
kernel0 [64] reduce [8192]: buf0 (pointwise), buf2 (sum); loads arg1, arg0; stores buf0, buf2
extern aten::mm.default(arg2, buf0) -> buf1""",
}

BACKENDS: dict[str, Callable[[], KernelBackend]] = {"cpp": CppBackend, "triton": TritonBackend}


@pytest.mark.parametrize(("name", "backend"), list(SCHEDULES))
def test_schedule_matches_golden(name: str, backend: str) -> None:
    assert schedule_text(name, BACKENDS[backend]()) == SCHEDULES[(name, backend)]


SOFTMAX_CPP = """\
// fused from: amax, sum, div
extern "C" void kernel0(const float* __restrict__ arg0, float* __restrict__ buf2) {
    EmberTeam ember_team(32, 32768, 4);
    #pragma omp parallel num_threads(ember_team.size) if (ember_team.size > 1)
    {
        EmberTeamMember ember_member(ember_team);
        #pragma omp for nowait
        for (int64_t x0 = 0; x0 < 4; x0++) {
            float cache_v3[8];  // see ROW_CACHE
            // pass 0 over the reduction ranges
            float acc_v1 = -std::numeric_limits<float>::infinity();
            int nan_v1 = 0;
            #pragma omp simd reduction(max:acc_v1) reduction(|:nan_v1)
            for (int64_t r0 = 0; r0 < 8; r0++) {
                const float v0 = arg0[(x0*8 + r0)];
                acc_v1 = (v0 > acc_v1) ? v0 : acc_v1;
                nan_v1 |= (v0 != v0);
            }
            const float v1 = nan_v1 ? std::numeric_limits<float>::quiet_NaN() : acc_v1;
            // pass 1 over the reduction ranges
            double acc_v4 = 0;
            float bacc_v4 = 0;
            #pragma omp simd reduction(+:bacc_v4)
            for (int64_t r0 = 0; r0 < 8; r0++) {
                const float v0 = arg0[(x0*8 + r0)];
                const float v2 = static_cast<float>(v0 - v1);
                const float v3 = ember_exp(v2);
                cache_v3[r0*1] = v3;
                bacc_v4 += v3;
            }
            acc_v4 += bacc_v4;
            const float v4 = static_cast<float>(acc_v4);
            // pass 2 over the reduction ranges
            #pragma omp simd
            for (int64_t r0 = 0; r0 < 8; r0++) {
                const float v0 = arg0[(x0*8 + r0)];
                const float v2 = static_cast<float>(v0 - v1);
                const float v3 = cache_v3[r0*1];
                const float v5 = static_cast<float>(v3 / v4);
                buf2[(x0*8 + r0)] = v5;
            }
        }
    }
}"""

SOFTMAX_TRITON = """\
import triton
import triton.language as tl

from ember.runtime.compiled.triton_math import libdevice_for_this_import

libdevice = libdevice_for_this_import()


@triton.jit
def _ember_add(a, b):
    return a + b


@triton.jit
def _ember_max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def kernel0(arg0_ptr, buf2_ptr, XBLOCK: tl.constexpr, RBLOCK: tl.constexpr):
    # fused: amax, sum, div
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < 4
    rbase = tl.arange(0, RBLOCK)[None, :]
    x0 = xindex
    rindex = rbase
    rmask = rindex < 8
    xrmask = xmask & rmask
    r0 = rindex
    v0 = tl.load(arg0_ptr + (8 * x0 + r0), mask=xrmask, other=0.0)
    v1_tile = tl.where(xrmask, v0, float('-inf'))
    v1 = tl.reduce(v1_tile, 1, _ember_max_nan)[:, None]
    v2 = (v0 - v1)
    v3 = tl.exp(v2)
    v4_tile = tl.where(xrmask, v3, 0)
    v4 = tl.reduce(v4_tile, 1, _ember_add)[:, None]
    v5 = (v3 / v4)
    tl.store(buf2_ptr + (8 * x0 + r0), v5, mask=xrmask)
"""


def cpp_text() -> str:
    return generate_function(softmax_kernel()).strip("\n")


def triton_text() -> str:
    return generate_triton_kernel(softmax_kernel()).source


def test_cpp_softmax_kernel_matches_golden() -> None:
    assert cpp_text() == SOFTMAX_CPP


def test_triton_softmax_kernel_matches_golden() -> None:
    assert triton_text() == SOFTMAX_TRITON


def main() -> None:
    """Print the current texts, to paste over the constants above."""
    for (name, backend) in SCHEDULES:
        print(f"# schedule {name} / {backend}\n{schedule_text(name, BACKENDS[backend]())}\n")
    print(f"# SOFTMAX_CPP\n{cpp_text()}\n\n# SOFTMAX_TRITON\n{triton_text()}")


if __name__ == "__main__":
    main()
