"""``tools/benchlib/static_memory.py``: a zoo model's inference graph compiled for CUDA
on a machine without one, and its wrapper's memory plan printed (issue #19 item 5)."""

from __future__ import annotations

import pytest
import torch
from benchlib import static_memory
from ember.inductor.compile import compile_graph


def test_the_cuda_plan_of_the_mlp_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    # Linear-GELU-Linear + residual: the GELU and the residual add write in place of the
    # matmul results they read last; the first result is freed after the second matmul
    assert static_memory.main(["mlp", "--suite", "test", "--table"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "mlp float32 (test, cuda): static peak 5.0 KiB, ideal 8.0 KiB, 4 steps",
        "memory of graph 'forward' (cuda): peak 5.0 KiB at step 2, ideal 8.0 KiB (bytes at "
        "the size hints; inputs and constants not counted)",
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
    assert "buf2 = _layout(buf2, (8, 32), (32, 1))\n    del buf1\n" in wrapper
    assert "empty_strided(" not in wrapper
