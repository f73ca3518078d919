"""The parameters ``triton_header.kernel_header`` reads from a generated kernel's
``def`` line are the ones Triton's ``@triton.jit`` finds in the function, for every
``@triton.jit`` function the code generator writes: pointwise kernels, reductions,
split reductions (the partial kernel too), matmul templates with an epilogue, kernels
over symbolic sizes. A warm start launches stored binaries with these names alone.
Generated for the CPU (Triton's interpreter); nothing runs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from ember.inductor.codegen.triton.matmul_choice import forced_matmul
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.compile import compile_program
from ember.runtime.compiled.triton_header import kernel_header
from ember.runtime.compiled.triton_kernel import TritonKernelSpec, jit_function_from_source
from helpers import trace

pytest.importorskip("triton")

BF = torch.bfloat16


def _linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.gelu(F.linear(x, w, b), approximate="tanh") + x[..., :36]


CASES: dict[str, tuple[Callable[..., Any], list[torch.Tensor]]] = {
    "pointwise": (lambda x, y: torch.tanh(x + y) * 2, [torch.randn(64, 32)] * 2),
    "softmax": (lambda x: torch.softmax(x, -1), [torch.randn(16, 1000)]),
    "split_sum": (lambda x: x.sum(), [torch.randn(1 << 20)]),
    "layer_norm": (lambda x, w: F.layer_norm(x, (96,), w), [torch.randn(8, 96), torch.randn(96)]),
    "template": (_linear_gelu, [torch.randn(2, 20, 40).to(BF), torch.randn(36, 40).to(BF),
                                torch.randn(36).to(BF)]),
}


def _jit_functions(name: str) -> list[tuple[str, str]]:
    """(source, function name) of every ``@triton.jit`` function of the case's kernels."""
    fn, inputs = CASES[name]
    program = trace(fn, inputs)
    with triton_for_cpu(matmul_templates=True), forced_matmul("bm32_bn32_bk16_g8_s2_w4"):
        compiled = compile_program(program, {"strict": True, "precompile_triton": False})
    found = []
    for path, data in compiled.files.items():
        if path.endswith(".py") and not path.endswith("wrapper.py"):
            source = data.decode()
            found += [(source, n) for n in re.findall(r"@triton\.jit\s*\ndef (\w+)\(", source)]
    return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_header_of_each_generated_function_is_tritons_reading(name: str) -> None:
    functions = _jit_functions(name)
    assert functions
    for source, fn_name in functions:
        header = kernel_header(source, fn_name)
        assert header is not None, source
        spec = TritonKernelSpec(fn_name, source, {})
        fn = jit_function_from_source(spec, interpret=True, device="interpret")
        assert header.arg_names == tuple(fn.arg_names)
    if name == "split_sum":
        assert any(n.endswith("_partial") for _, n in functions)
    if name == "template":
        assert any("tl.dot(" in source for source, _ in functions)
