"""``tools/benchlib/static_memory.py``: a zoo model's inference graph compiled for CUDA
on a machine without one, and its wrapper's memory plan printed (issue #19 item 5)."""

from __future__ import annotations

import pytest
import torch
from benchlib import static_memory
from ember.inductor.compile import compile_graph
from ember.runtime.ir import InputSpec
from ember.runtime.tracing import GraphRecorder


def test_the_cuda_plan_of_the_mlp_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    # Linear-GELU-Linear + residual: the GELU and the residual add write in place of the
    # matmul results they read last; the first result is freed after the second matmul
    assert static_memory.main(["mlp", "--suite", "test", "--table"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "mlp float32 (test, cuda): static peak 5.0 KiB, ideal 8.0 KiB, 4 steps",
        ("memory of graph 'forward' (cuda): peak 5.0 KiB at step 2, ideal 8.0 KiB (bytes at "
        "the size hints; inputs and constants not counted)"),
        "  step  what                        allocated    freed     live",
        "     0  extern aten::addmm.default    4.0 KiB        0  4.0 KiB",
        "     1  kernel0 (buf1 in buf0)              0        0  4.0 KiB",
        "     2  extern aten::addmm.default    1.0 KiB  4.0 KiB  5.0 KiB",
        "     3  kernel1 (buf3 in buf2)              0        0  1.0 KiB",
    ]


def test_the_cuda_wrapper_writes_in_place_and_frees_where_dead() -> None:
    program = static_memory.inference_program("mlp", torch.device("cuda"), torch.float32,
                                              "test")
    wrapper = compile_graph(program, "forward", torch.device("cuda")).wrapper
    assert "    buf1 = buf0; del buf0  # written in place of buf0's memory\n" \
           "    kernel0(buf1, buf1)\n" in wrapper
    assert "buf2 = torch.addmm(arg3, buf1, _read_view(arg2, (128, 32), (1, 128), 0))\n" \
           "    del arg2\n    del arg3\n    del buf1\n" in wrapper  # inputs too (caller's)
    assert " = _empty(" not in wrapper


def test_on_a_gpu_a_dead_buffer_is_not_held_where_that_raises_the_peak() -> None:
    # buf1 (512 B) dies before the 16 KiB kernel1; the last matmul's result could take its
    # memory, but holding buf1 through kernel1 would raise the peak: on CUDA it is freed
    # where it dies and the result is fresh (on the CPU it is reused: test_memory_plan.py)
    w1, wb, wback = torch.randn(16, 16), torch.randn(16, 256), torch.randn(256, 16)

    def wide(x: torch.Tensor) -> torch.Tensor:
        b = (x @ w1).flip(0) * 2
        d = (b @ wb).flip(0) * 3
        return d @ wback

    rec = GraphRecorder()
    x = rec.add_input(torch.randn(8, 16), InputSpec("in0"))
    with rec:
        out = wide(x)
    program = rec.finish([out])
    program.dialect = "core-functional"
    cuda = torch.device("cuda")
    compiled = compile_graph(static_memory.program_on(program, cuda), "forward", cuda)
    wrapper = compiled.wrapper
    assert "    kernel0(buf0, buf1)\n    del buf0\n" in wrapper
    assert "buf2 = torch.mm(buf1, const1)\n    del buf1\n" in wrapper
    assert "reuse" not in wrapper
    assert compiled.memory is not None and compiled.memory.peak == 16 * 1024
