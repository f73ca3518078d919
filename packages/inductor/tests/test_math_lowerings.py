"""The float-math and special-function lowerings (``lowering/float_math.py``, and the
``erfinv``/``lgamma``/``digamma`` rows of ``pointwise._FLOAT_UNARY``): copysign, hypot,
logaddexp, logaddexp2, nextafter, erfinv, lgamma, digamma, polygamma of order 0 and 1.

Compiled against eager on edge values (+-0, +-inf, NaN, +-1, the negative integers, erfinv
outside [-1, 1]) and dense ranges, float32 and float64, through C++ and Triton's
interpreter (the ``backend`` fixture); integer and 16-bit inputs; none of these ops is a
fallback any more and a chain of them is one kernel; the fallbacks that stay (nextafter
on 16-bit floats, polygamma of order 2) are counted; gradients through the aot stage
match eager; the Triton code calls libdevice where it has the function (an sm_90
compile, no GPU needed), and on a GPU everything matches eager's CUDA kernels.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))

from helpers import compile_and_load, trace

inf, nan = math.inf, math.nan
F32, F64 = torch.float32, torch.float64

# every op this file covers: name -> (function, its ATen target)
UNARY: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "erfinv": (torch.erfinv, "aten::erfinv.default"),
    "lgamma": (torch.lgamma, "aten::lgamma.default"),
    "digamma": (torch.digamma, "aten::digamma.default"),
    "polygamma0": (lambda x: torch.polygamma(0, x), "aten::polygamma.default"),
    "trigamma": (lambda x: torch.polygamma(1, x), "aten::polygamma.default"),
}
BINARY: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str]] = {
    "copysign": (torch.copysign, "aten::copysign.Tensor"),
    "hypot": (torch.hypot, "aten::hypot.default"),
    "logaddexp": (torch.logaddexp, "aten::logaddexp.default"),
    "logaddexp2": (torch.logaddexp2, "aten::logaddexp2.default"),
    "nextafter": (torch.nextafter, "aten::nextafter.default"),
}
LOWERED_TARGETS = {t for _, t in UNARY.values()} | {t for _, t in BINARY.values()} | {
    "aten::copysign.Scalar"}

EDGES = [0.0, -0.0, inf, -inf, nan, 1.0, -1.0, 2.0, -2.0, -3.0, -100.0, 0.5, -0.5, -2.5,
         1.5, 1.4616321449683622, 0.9999999, -0.9999999, 1.0000001, -1.0000001, 1e-30,
         -1e-30, 1e-45, 25.0, 100.5, -100.5, 1e10, -1e10, 3e38, -3e38]
PAIR_VALUES = [0.0, -0.0, inf, -inf, nan, 1.0, -1.0, 0.5, -2.5, 1e-45, 3e38, -3e38, 88.0]

# (rtol, atol) for finite results; NaN, infinities and signed zeros must be exact
TOL = {F32: (1e-5, 1e-6), F64: (1e-8, 1e-12), torch.bfloat16: (1e-2, 1e-5),
       torch.float16: (1e-3, 1e-5)}


def problem(got: torch.Tensor, want: torch.Tensor, inputs: list[torch.Tensor]) -> str | None:
    """None when ``got`` matches eager's ``want`` (dtype, shape, NaNs, infinities, signed
    zeros exactly; the rest within :data:`TOL`), else the first differences."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype} {list(got.shape)}, eager {want.dtype} {list(want.shape)}"
    a, e = got.double(), want.double()
    rtol, atol = TOL[want.dtype]
    same = (a.isnan() == e.isnan()) & ((a == e) | a.isnan() | ~(a.isinf() | e.isinf()))
    same &= ~((a == 0) & (e == 0) & (a.signbit() != e.signbit()))
    finite = ~(e.isnan() | e.isinf())
    same &= ~finite | ((a - e).abs() <= atol + rtol * e.abs())
    if bool(same.all()):
        return None
    bad = (~same).nonzero().flatten()[:4].tolist()
    return f"{int((~same).sum())} of {same.numel()} differ: " + "; ".join(
        f"f({', '.join(repr(x.flatten()[i].item()) for x in inputs)}) = "
        f"{got.flatten()[i].item()!r}, eager {want.flatten()[i].item()!r}" for i in bad)


def run_all(fns: dict[str, Callable[..., torch.Tensor]], inputs: list[torch.Tensor],
            backend: str) -> dict[str, str | None]:
    """Every function of ``fns`` on ``inputs``, compiled as one graph: name -> problem.
    The graph must have no fallback."""
    names = list(fns)

    def together(*xs: torch.Tensor) -> list[torch.Tensor]:
        return [fns[n](*xs) for n in names]

    compiled, run = compile_and_load(trace(together, inputs),
                                     precompile=backend == "cpp")
    assert compiled.metadata["fallbacks"] == {}
    got = run(*[x.clone() for x in inputs])
    want = together(*[x.clone() for x in inputs])
    return {n: problem(g, w, inputs) for n, g, w in zip(names, got, want)}


def _assert_none(found: dict[str, str | None]) -> None:
    bad = {k: v for k, v in found.items() if v is not None}
    assert not bad, "\n".join(f"{k}: {v}" for k, v in bad.items())


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_unary_edge_values_match_eager(backend: str, dtype: torch.dtype) -> None:
    x = torch.tensor(EDGES, dtype=dtype)
    negative_integers = torch.arange(-12, 0, dtype=dtype)
    xs = torch.cat([x, negative_integers, x / 7, x / 1e6])
    _assert_none(run_all({k: f for k, (f, _) in UNARY.items()}, [xs], backend))


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_binary_edge_values_match_eager(backend: str, dtype: torch.dtype) -> None:
    v = torch.tensor(PAIR_VALUES, dtype=dtype)
    a, b = v.repeat_interleave(v.numel()), v.repeat(v.numel())
    big = torch.tensor([1e300, 3e38, 1e-300, 1e-40], dtype=dtype)  # hypot must not overflow
    a, b = torch.cat([a, big, -big]), torch.cat([b, big * 0.75, big])
    _assert_none(run_all({k: f for k, (f, _) in BINARY.items()}, [a, b], backend))


def _dense(dtype: torch.dtype) -> torch.Tensor:
    """-20.5 .. 20 on a grid that misses the poles (and 0) by more than rounding."""
    return torch.linspace(-20.5, 20.0, 4097, dtype=dtype) + 1 / 1024


@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_dense_ranges_match_eager(backend: str, dtype: torch.dtype) -> None:
    x = _dense(dtype)
    eps = torch.finfo(dtype).eps
    ones = 1 - torch.logspace(math.log10(eps), -1, 64, dtype=dtype)  # erfinv near 1
    u = torch.cat([torch.linspace(-1, 1, 1025, dtype=dtype)[1:-1], ones, -ones])
    gamma = {k: UNARY[k][0] for k in ("lgamma", "digamma", "trigamma")}
    _assert_none(run_all(gamma, [x], backend))
    _assert_none(run_all({"erfinv": torch.erfinv}, [u], backend))


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool], ids=str)
def test_integer_inputs_promote_to_float(backend: str, dtype: torch.dtype) -> None:
    x = torch.arange(-5, 6).to(dtype)
    y = torch.arange(5, -6, -1).to(dtype)
    fns: dict[str, Callable[..., torch.Tensor]] = {
        k: (lambda a, b, f=f: f(a)) for k, (f, _) in UNARY.items()}
    fns["copysign"] = torch.copysign
    fns["copysign_scalar"] = lambda a, b: torch.copysign(a, -0.0)
    found = run_all(fns, [x, y], backend)
    _assert_none(found)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16_bit_floats_compute_in_float32(backend: str, dtype: torch.dtype) -> None:
    x = torch.linspace(-6.3, 6.1, 64).to(dtype)
    y = torch.linspace(3.0, -4.0, 64).to(dtype)
    fns: dict[str, Callable[..., torch.Tensor]] = {
        k: (lambda a, b, f=f: f(a)) for k, (f, _) in UNARY.items() if k != "erfinv"}
    fns["erfinv"] = lambda a, b: torch.erfinv(a / 7)
    fns.update({k: f for k, (f, _) in BINARY.items() if k != "nextafter"})
    _assert_none(run_all(fns, [x, y], backend))


def _chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    s = torch.lgamma(x.exp()) + torch.digamma(x.abs() + 1) + torch.polygamma(1, y.abs() + 0.5)
    s = s + torch.erfinv(x.tanh()) + torch.polygamma(0, y.abs() + 2)
    s = s + torch.hypot(x, y) + torch.logaddexp(x, y) + torch.logaddexp2(x, y)
    s = s + torch.copysign(x, y) + torch.copysign(y, -1.0) + torch.nextafter(x, y)
    return s * 2


def test_no_fallbacks_and_one_kernel(backend: str) -> None:
    """Each op is a loop-IR op or a composition of them (not an extern call): the whole
    chain, with its neighbours (exp, abs, tanh, the sums), is one kernel."""
    x, y = torch.randn(8, 33, dtype=F64), torch.randn(8, 33, dtype=F64)
    program = trace(_chain, [x, y])
    traced = {n.target for n in program.forward.nodes if n.op == "call"}
    assert LOWERED_TARGETS <= traced  # the test really has every op
    compiled, run = compile_and_load(program, precompile=backend == "cpp")
    assert compiled.metadata["fallbacks"] == {}
    assert compiled.metadata["kernels"] == 1
    torch.testing.assert_close(run(x, y)[0], _chain(x, y))


def test_the_lowerings_are_loop_ops() -> None:
    from ember.inductor.lowering.graph_lowering import GraphLowering

    x, y = torch.randn(4, dtype=F64), torch.randn(4, dtype=F64)
    text = str(GraphLowering(trace(_chain, [x, y])).run())
    for op in ("lgamma", "digamma", "trigamma", "erfinv", "hypot", "copysign", "nextafter",
               "log1p", "exp2"):
        assert re.search(rf"= {op}\(", text), op
    assert "fallback" not in text


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_nextafter_on_16_bit_floats_stays_a_counted_fallback(backend: str,
                                                             dtype: torch.dtype) -> None:
    """nextafter steps in the storage dtype, which float32 arithmetic cannot do: eager's."""
    v = torch.tensor(PAIR_VALUES[:9], dtype=dtype)
    a, b = v.repeat_interleave(v.numel()), v.repeat(v.numel())
    compiled, run = compile_and_load(trace(lambda p, q: torch.nextafter(p, q) * 2, [a, b]),
                                     precompile=backend == "cpp")
    assert compiled.metadata["fallbacks"] == {"aten::nextafter.default": 1}
    assert problem(run(a, b)[0], torch.nextafter(a, b) * 2, [a, b]) is None


def test_polygamma_of_higher_order_stays_a_counted_fallback(backend: str) -> None:
    x = torch.linspace(0.25, 6, 32, dtype=F64)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.polygamma(2, t) + torch.polygamma(1, t)

    compiled, run = compile_and_load(trace(fn, [x]), precompile=backend == "cpp")
    assert compiled.metadata["fallbacks"] == {"aten::polygamma.default": 1}
    torch.testing.assert_close(run(x)[0], fn(x))


# -- training: the aot stage derives the backward (digamma for lgamma, polygamma(1, .) for
# digamma, ...) and the inductor lowers it too ------------------------------------------
TRAINED: dict[str, Callable[..., torch.Tensor]] = {
    "hypot": lambda x, y: torch.hypot(x, y),
    "logaddexp": lambda x, y: torch.logaddexp(x, y * 3),
    "logaddexp2": lambda x, y: torch.logaddexp2(x, y),
    "lgamma": lambda x, y: torch.lgamma(x * 3),
    "digamma": lambda x, y: torch.digamma(x.abs() + 0.1) * y,
    "erfinv": lambda x, y: torch.erfinv(x.tanh() * 0.9),
    "copysign": lambda x, y: torch.copysign(x, y) * x,
}


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.fn(x, y)


@pytest.mark.parametrize("name", sorted(TRAINED))
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_gradients_match_eager(name: str, dtype: torch.dtype) -> None:
    from ember.frontend import capture
    from ember.runtime.config import patch
    from ember.runtime.pipeline import compile_program

    torch.manual_seed(0)
    x = torch.randn(6, 7, dtype=dtype, requires_grad=True)
    y = torch.randn(6, 7, dtype=dtype, requires_grad=True)
    module = _Fn(TRAINED[name])
    with patch(program_cache=False):
        compiled = compile_program(capture(module, x, y), "inductor")
    assert compiled.program.metadata["fallbacks"] == {}
    cotangent = torch.randn(6, 7, dtype=dtype)
    out = compiled([x, y])
    out = out[0] if isinstance(out, (list, tuple)) else out
    got = torch.autograd.grad(out, [x, y], cotangent, allow_unused=True)
    want = torch.autograd.grad(module(x, y), [x, y], cotangent, allow_unused=True)
    for g, w in zip(got, want):
        if w is None:
            assert g is None or not bool(g.any())
            continue
        assert g is not None
        rtol, atol = (1e-4, 1e-5) if dtype == F32 else (1e-9, 1e-12)
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol)


# -- Triton: libdevice where it has the function, checked by compiling for sm_90 --------
def test_triton_kernel_calls_libdevice_on_a_gpu() -> None:
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry

    x, y = torch.randn(64), torch.randn(64)
    with triton_for_cpu():
        compiled, _ = compile_and_load(trace(_chain, [x, y]), precompile=False)
    [graph] = compiled.metadata["compiled"]["graphs"].values()  # type: ignore[union-attr]
    [entry] = graph["kernels"]
    spec = spec_from_entry(entry, compiled.files)
    for name in ("hypot", "erfinv", "lgamma"):
        assert f"libdevice.{name}(" in spec.source, name
    ttir = compile_for_target(spec).asm["ttir"]  # before libdevice is linked and inlined
    for symbol in ("__nv_erfinvf", "__nv_lgammaf", "__nv_hypotf"):
        assert f'symbol = "{symbol}"' in ttir, symbol


# -- on a GPU: against eager's CUDA kernels -----------------------------------------------
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize("dtype", [F32, F64], ids=str)
def test_cuda_matches_eager(dtype: torch.dtype) -> None:
    x = torch.cat([torch.tensor(EDGES, dtype=dtype), torch.arange(-12, 0, dtype=dtype),
                   _dense(dtype)]).cuda()
    u = torch.linspace(-1, 1, 1025, dtype=dtype).cuda()
    v = torch.tensor(PAIR_VALUES, dtype=dtype).cuda()
    a, b = v.repeat_interleave(v.numel()), v.repeat(v.numel())
    fns: dict[str, Callable[..., torch.Tensor]] = {
        k: (lambda p, q, r, s, f=f: f(p)) for k, (f, _) in UNARY.items()}
    fns["erfinv_dense"] = lambda p, q, r, s: torch.erfinv(q)
    fns.update({k: (lambda p, q, r, s, f=f: f(r, s)) for k, (f, _) in BINARY.items()})
    _assert_none(run_all(fns, [x, u, a, b], "cuda"))
