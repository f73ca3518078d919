"""A kernel's parameters read from its source's ``def`` line (``triton_header``): what
a stored binary's launch uses instead of importing the kernel's ``@triton.jit`` function;
a ``def`` it cannot read with certainty gives None (the caller imports the module).
``TritonKernel`` loaded with a header imports the function only when a launch needs JIT.
The inductor's generated kernels are checked against Triton's own reading in
``packages/inductor/tests/test_triton_header_sources.py``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ember.runtime.compiled import triton_kernel
from ember.runtime.compiled.triton_header import KernelHeader, kernel_header
from ember.runtime.compiled.triton_kernel import TritonKernel, TritonKernelSpec


def _source(params: str, name: str = "k") -> str:
    return (f"import triton\nimport triton.language as tl\n\n@triton.jit\n"
            f"def {name}({params}):\n    pass\n")


@pytest.mark.parametrize("params, names", [
    ("x, y, BLOCK: tl.constexpr", ("x", "y", "BLOCK")),
    ("in_ptr0, out_ptr0,\n        xnumel, XBLOCK : tl.constexpr,\n", (
        "in_ptr0", "out_ptr0", "xnumel", "XBLOCK")),
    ("a, b: tl.tensor, c: tl.constexpr = 4", ("a", "b", "c")),
    ("a: tl.dtype[tl.float32], b", ("a", "b")),
    ("", ()),
])
def test_the_parameters_of_a_def_line(params: str, names: tuple[str, ...]) -> None:
    assert kernel_header(_source(params), "k") == KernelHeader("k", names)


@pytest.mark.parametrize("source", [
    _source("x, *args"),                  # star parameters
    _source("x, **kw"),
    _source("x, s='a,b'"),                # a string in the list
    _source("x, # note\n y"),             # a comment in the list
    _source("x, x"),                      # a duplicate
    _source("x, , y"),                    # an empty item
    _source("x, 1y"),                     # not an identifier
    _source("x, y", name="other"),        # no such function
    _source("x") + _source("y"),          # two of them
    "def k(x, y:\n",                      # unbalanced
    "class C:\n    def k(self, x):\n        pass\n",  # not at the top level
])
def test_an_uncertain_def_line_gives_none(source: str) -> None:
    assert kernel_header(source, "k") is None


def test_a_helper_function_of_the_module_is_not_the_kernel() -> None:
    source = ("@triton.jit\ndef helper(a, b):\n    return a\n\n@triton.jit\n"
              "def k(x, y, BLOCK: tl.constexpr):\n    pass\n")
    assert kernel_header(source, "k") == KernelHeader("k", ("x", "y", "BLOCK"))
    assert kernel_header(source, "helper") == KernelHeader("helper", ("a", "b"))


SPEC = TritonKernelSpec("k", _source("x, y, BLOCK: tl.constexpr"),
                        {"x": "*fp32", "y": "*fp32"}, {"BLOCK": 128})


def test_a_cuda_kernel_of_tensor_arguments_loads_without_its_function(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    imported: list[str] = []

    def jit_function(spec: TritonKernelSpec, *, interpret: bool, device: str) -> Any:
        imported.append(spec.name)
        return _FakeJit(("x", "y", "BLOCK"))

    monkeypatch.setattr(triton_kernel, "jit_function_from_source", jit_function)
    kernel = triton_kernel.load_triton_kernel(SPEC, "cuda")
    assert imported == []
    assert kernel._trailing_constexprs() == (128,)
    monkeypatch.setattr(triton_kernel.triton_cache, "device_tag", lambda d, i: "cuda-sm90")
    assert kernel._jit().arg_names == ("x", "y", "BLOCK")  # the first JIT launch's need
    assert imported == ["k"]
    # an integer argument: launches always go through JIT, so the function comes now
    with_int = TritonKernelSpec("k", _source("x, n, BLOCK: tl.constexpr"),
                                {"x": "*fp32", "n": "i32"}, {"BLOCK": 128})
    triton_kernel.load_triton_kernel(with_int, "cuda")
    assert imported == ["k", "k"]


def test_a_header_that_disagrees_with_the_function_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_kernel, "jit_function_from_source",
                        lambda spec, interpret, device: _FakeJit(("y", "x", "BLOCK")))
    monkeypatch.setattr(triton_kernel.triton_cache, "device_tag", lambda d, i: "cuda-sm90")
    kernel = TritonKernel(SPEC, None, False, torch.device("cuda", 0),
                          header=KernelHeader("k", ("x", "y", "BLOCK")))
    with pytest.raises(RuntimeError, match=r"read from the source \(x, y, BLOCK\) are not "
                                           r"the function's \(y, x, BLOCK\)"):
        kernel._jit()


def test_neither_function_nor_header_is_refused() -> None:
    with pytest.raises(ValueError, match="neither its function nor header"):
        TritonKernel(SPEC, None, False, torch.device("cuda", 0))


class _FakeJit:
    def __init__(self, names: tuple[str, ...]) -> None:
        self.arg_names = names
        self.__name__ = "k"
