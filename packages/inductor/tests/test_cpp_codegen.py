"""C++ backend details: the float16/bfloat16 conversions of the prelude (bit-exact
against torch), and what the generated source looks like."""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.cpp.prelude import PRELUDE
from ember.runtime.compiled.cpp_build import compile_cpp
from ember.runtime.ir import Program
from helpers import compile_fn

_CONVERTERS = PRELUDE + r"""
extern "C" void h2f(const uint16_t* a, float* b, int64_t n) {
    for (int64_t i = 0; i < n; i++) b[i] = ember_half_to_float(a[i]);
}
extern "C" void f2h(const float* a, uint16_t* b, int64_t n) {
    for (int64_t i = 0; i < n; i++) b[i] = ember_float_to_half(a[i]);
}
extern "C" void f2bf(const float* a, uint16_t* b, int64_t n) {
    for (int64_t i = 0; i < n; i++) b[i] = ember_float_to_bf16(a[i]);
}
"""


def _call(lib: ctypes.CDLL, name: str, a: torch.Tensor, out: torch.Tensor) -> None:
    getattr(lib, name)(ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(out.data_ptr()),
                       ctypes.c_int64(a.numel()))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return bool(((a.view(torch.int16) == b.view(torch.int16)) | (a.isnan() & b.isnan())).all())


def test_half_and_bfloat16_conversions_are_exact() -> None:
    lib = ctypes.CDLL(str(compile_cpp(_CONVERTERS)))
    every_half = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    out = torch.empty(65536)
    _call(lib, "h2f", every_half, out)
    torch.testing.assert_close(out, every_half.float(), rtol=0, atol=0, equal_nan=True)
    gen = torch.Generator().manual_seed(0)
    floats = torch.cat([torch.randn(200_000, generator=gen) * s
                        for s in (1e-8, 1e-5, 1.0, 3e2, 7e4)] + [
        every_half.float(), every_half.float() * (1 + 2**-12),
        torch.tensor([float("inf"), -float("inf"), float("nan"), 65519.99, 65520.0, 2.98e-8])])
    half = torch.empty(floats.numel(), dtype=torch.float16)
    _call(lib, "f2h", floats, half)
    assert _same_bits(half, floats.half())
    bf = torch.empty(floats.numel(), dtype=torch.bfloat16)
    _call(lib, "f2bf", floats, bf)
    assert _same_bits(bf, floats.bfloat16())


def test_generated_source_shape() -> None:
    x = torch.randn(64, 128)
    compiled, _ = compile_fn(lambda x: (x * 2).exp().sum(-1), x)
    source = next(v for k, v in compiled.files.items() if k.endswith(".cpp")).decode()
    assert 'extern "C" void kernel0(const float* __restrict__ arg0' in source
    assert "#pragma omp simd reduction(+:" in source  # the sum pass may vectorize
    assert "// fused from: sum" in source


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_where_feeding_math_is_a_bit_select_and_exact(dtype: torch.dtype) -> None:
    """A float ``where`` whose value feeds ``exp`` is ``ember_select`` (integer bit
    selects, so a masked softmax's exp vectorizes on AVX2); it passes NaN, infinities and
    signed zeros through bit-exactly. A ``where`` feeding no math call stays ``c ? a : b``."""
    special = torch.tensor([float("nan"), -0.0, 0.0, float("inf"), -float("inf"), 1e-45,
                            -3.5, 2.0], dtype=dtype)
    x = special.repeat(8)
    y = special.flip(0).repeat(8)
    m = torch.arange(64) % 3 == 0

    def f(m: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        w = torch.where(m, x, y)
        return w, w.exp()

    compiled, run = compile_fn(f, m, x, y)
    assert "ember_select(" in _kernels_source(compiled)
    got, want = run(m, x, y), f(m, x, y)
    bits = torch.int32 if dtype == torch.float32 else torch.int64
    assert torch.equal(got[0].view(bits), want[0].view(bits))
    torch.testing.assert_close(got[1], want[1], equal_nan=True)

    plain, _ = compile_fn(lambda m, x, y: torch.where(m, x, y) * 2, m, x, y)
    source = _kernels_source(plain)
    assert "ember_select(" not in source and " ? " in source


def _kernels_source(compiled: Program) -> str:
    """The generated C++ after the prelude."""
    source = next(v for k, v in compiled.files.items() if k.endswith(".cpp")).decode()
    return source[source.index('extern "C" void kernel0'):]


@pytest.mark.parametrize("call", ["ember_max(x[i], z[i])", "ember_min(x[i], z[i])",
                                  "ember_sign(x[i])", "ember_sigmoid(x[i])", "ember_exp(x[i])",
                                  "ember_rand(static_cast<int64_t>(z[0]), i)",
                                  "ember_randn(static_cast<int64_t>(z[0]), i)",
                                  # a masked softmax's exp: a float select feeding libmvec
                                  "ember_exp(ember_select(z[i] > 0.0f, x[i], -INFINITY))",
                                  "std::exp(ember_select(z[i] > 0.0f, -INFINITY, x[i]))"])
def test_prelude_elementwise_helpers_vectorize(call: str, tmp_path: Path) -> None:
    """A loop over a prelude helper is vectorized by the compiler (GCC's report): one
    that is not runs ~30x slower (ember_sign once did, through its control flow)."""
    import shutil
    import subprocess

    from ember.runtime.compiled.cpp_build import build_flags

    cxx = shutil.which("g++")
    if cxx is None or "g++" not in subprocess.run([cxx, "--version"], capture_output=True,
                                                  text=True, check=False).stdout.lower():
        pytest.skip("the vectorizer report is GCC's")
    src = tmp_path / "h.cpp"
    src.write_text(PRELUDE + "\nextern \"C\" void k(const float* __restrict__ x, "
                   "const float* __restrict__ z, float* __restrict__ y) {\n"
                   f"    for (long i = 0; i < 4096; i++) y[i] = {call};\n}}\n")
    flags = [f for f in build_flags() if f not in ("-shared", "-fopenmp") and not f.startswith("-l")]
    report = subprocess.run([cxx, *flags, "-c", str(src), "-o", str(tmp_path / "h.o"),
                             "-fopt-info-vec-optimized"], capture_output=True, text=True,
                            check=False)
    assert report.returncode == 0, report.stderr
    line = PRELUDE.count("\n") + 3
    assert any(f"h.cpp:{line}:" in r and "loop vectorized" in r
               for r in report.stderr.splitlines()), report.stderr
