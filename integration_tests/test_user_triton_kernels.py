"""A corpus of user Triton kernels (``user_triton_kernels.py``) launched inside compiled
functions: each launch is one ``ember::triton_kernel`` node (0 graph breaks), and every
backend matches the same function run eagerly, outputs and mutated inputs alike.

Both capture modes record the launch: strict capture (bytecode) on every backend, trace
capture (``options={"capture": "trace"}``) on the inductor for every case and on the
other backends for a few (:data:`TRACE_ON_EVERY_BACKEND`), to keep the suite fast.

On the CPU the kernels run in Triton's interpreter: the kernel module is imported with
the interpreter on (``_kernels(interpret=True)``), and the inductor generates Triton code
for the CPU too (``triton_for_cpu``), so no C++ is built. The ``cuda`` tests run the
same cases as JIT kernels on the GPU, with autotuning over two configs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

triton = pytest.importorskip("triton")

import ember.frontend as ef
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.runtime.config import patch

HERE = Path(__file__).resolve().parent
BACKENDS = ["eager", "aot_eager", "inductor"]
TRACE_ON_EVERY_BACKEND = ["vector_add", "autotuned_matmul", "inplace_update",
                          "training_around_kernel", "custom_op_autograd"]
"""The cases trace capture runs on ``eager`` and ``aot_eager`` too (all run on the
inductor)."""


def _interpreter(enabled: bool) -> contextlib.AbstractContextManager[None]:
    """``@triton.jit`` makes interpreted (or JIT) kernels while active (the runtime's
    own switch, used around its kernel imports)."""
    from ember.runtime.compiled.triton_kernel import _interpreter_mode

    return _interpreter_mode(enabled)


def _kernels(interpret: bool) -> ModuleType:
    """``user_triton_kernels.py`` imported as interpreted or JIT kernels (its own module
    name each: a compiled launch finds its kernel as ``module:attribute``)."""
    name = "user_triton_kernels_" + ("interp" if interpret else "jit")
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, HERE / "user_triton_kernels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    with _interpreter(interpret):
        spec.loader.exec_module(module)
        module.scaled_relu = module.register_scaled_relu(  # type: ignore[attr-defined]
            "ember_corpus_" + ("interp" if interpret else "jit"))
    return module


Case = tuple[Callable[..., Any], Callable[[str], list[torch.Tensor]]]


def _cases(K: Any) -> dict[str, Case]:
    cdiv = triton.cdiv

    def vector_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        K.add_kernel[(cdiv(x.numel(), 32),)](x * 2, y, out, x.numel(), BLOCK=32)
        return out.relu() + 1

    def grid_lambda(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        K.add_kernel[lambda meta: (cdiv(n, meta["BLOCK"]),)](x, y.sin(), out, n, BLOCK=16)
        return out

    def fused_softmax(x: torch.Tensor) -> torch.Tensor:
        y = x * 3
        out = torch.empty_like(y)
        K.softmax_kernel[(y.shape[0],)](out, y, y.stride(0), out.stride(0), y.shape[1],
                                        BLOCK=triton.next_power_of_2(y.shape[1]))
        return out - 1

    def layer_norm_fwd(x: torch.Tensor, w: torch.Tensor,
                       b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows, cols = x.shape
        y = torch.empty_like(x)
        mean = x.new_empty(rows)
        rstd = x.new_empty(rows)
        K.layer_norm_fwd_kernel[(rows,)](x, w, b, y, mean, rstd, x.stride(0), cols, 1e-5,
                                         BLOCK=triton.next_power_of_2(cols))
        return y * 2, mean, rstd

    def layer_norm_bwd(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                       dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rows, cols = x.shape
        block = triton.next_power_of_2(cols)
        y = torch.empty_like(x)
        mean = x.new_empty(rows)
        rstd = x.new_empty(rows)
        K.layer_norm_fwd_kernel[(rows,)](x, w, b, y, mean, rstd, x.stride(0), cols, 1e-5,
                                         BLOCK=block)
        dx = torch.empty_like(x)
        dw = torch.zeros_like(w)
        db = torch.zeros_like(b)
        K.layer_norm_bwd_kernel[(rows,)](dy, x, w, mean, rstd, dx, dw, db, x.stride(0), cols,
                                         BLOCK=block)
        return dx, dw, db

    def autotuned_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        M, K_ = a.shape
        N = b.shape[1]
        c = a.new_empty(M, N)
        K.matmul_kernel[lambda meta: (cdiv(M, meta["BLOCK_M"]), cdiv(N, meta["BLOCK_N"]))](
            a, b, c, M, N, K_, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1))
        return c + 1

    def seeded_dropout(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        K.dropout_kernel[(cdiv(x.numel(), 64),)](x, out, x.numel(), 0.25, 1234, BLOCK=64)
        return out

    def inplace_update(x: torch.Tensor) -> torch.Tensor:
        K.scale_shift_inplace_kernel[(cdiv(x.numel(), 32),)](x, x.numel(), 2.0, 0.5,
                                                             BLOCK=32)
        return x.sum()

    def same_tensor_in_and_out(x: torch.Tensor) -> torch.Tensor:
        y = x * 3
        K.store_then_reload_kernel[(cdiv(y.numel(), 32),)](y, y, y.numel(), BLOCK=32)
        return y - 1  # 1 everywhere: the kernel read back its own store

    def two_outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.empty_like(x)
        c = torch.empty_like(x)
        K.sincos_kernel[(cdiv(x.numel(), 32),)](x, s, c, x.numel(), BLOCK=32)
        return s * s + c * c, s

    def helper_call(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        K.bias_gelu_kernel[(cdiv(x.numel(), 64),)](x, b, out, x.numel(), x.shape[1],
                                                   BLOCK=64)
        return out

    def heuristics(x: torch.Tensor) -> torch.Tensor:
        out = x.new_empty(x.shape[0])
        K.row_sum_kernel[(x.shape[0],)](x, out, x.stride(0), x.shape[1])
        return out

    def gather_rows(idx: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        out = table.new_empty(idx.shape[0], table.shape[1])
        K.gather_rows_kernel[(idx.shape[0],)](idx, table, out, table.shape[1], BLOCK=16)
        return out

    def relaid_operands(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # the kernel indexes memory flat: each operand must be in its traced layout
        xt = (x * 2).t().contiguous()
        bb = b.expand(x.shape[1], b.shape[0]).contiguous()
        out = torch.empty_like(xt)
        K.add_kernel[(cdiv(xt.numel(), 32),)](xt, bb, out, xt.numel(), BLOCK=32)
        return out

    def training_around_kernel(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        out = torch.empty_like(y)
        K.add_kernel[(cdiv(y.numel(), 32),)](y, y, out, y.numel(), BLOCK=32)
        return (out * x).sum()  # the launch records no autograd, as in eager

    def custom_op_autograd(x: torch.Tensor) -> torch.Tensor:
        relu: Callable[[torch.Tensor, float], torch.Tensor] = K.scaled_relu
        return (relu(x * 2, 0.5) + x).sum()

    def randn(*shape: int) -> Callable[[str], torch.Tensor]:
        return lambda device: torch.randn(*shape, device=device)

    def inputs(*makers: Callable[[str], torch.Tensor]) -> Callable[[str], list[torch.Tensor]]:
        return lambda device: [m(device) for m in makers]

    return {
        "vector_add": (vector_add, inputs(randn(100), randn(100))),
        "grid_lambda": (grid_lambda, inputs(randn(50), randn(50))),
        "fused_softmax": (fused_softmax, inputs(randn(6, 20))),
        "layer_norm_fwd": (layer_norm_fwd, inputs(randn(5, 24), randn(24), randn(24))),
        "layer_norm_bwd": (layer_norm_bwd, inputs(randn(5, 24), randn(24), randn(24),
                                                  randn(5, 24))),
        "autotuned_matmul": (autotuned_matmul, inputs(randn(20, 24), randn(24, 18))),
        "seeded_dropout": (seeded_dropout, inputs(randn(200))),
        "inplace_update": (inplace_update, inputs(randn(70))),
        "same_tensor_in_and_out": (same_tensor_in_and_out, inputs(randn(40))),
        "two_outputs": (two_outputs, inputs(randn(40))),
        "helper_call": (helper_call, inputs(randn(4, 16), randn(16))),
        "heuristics": (heuristics, inputs(randn(7, 12))),
        "gather_rows": (gather_rows, inputs(
            lambda d: torch.tensor([2, 0, 3, 3], device=d), randn(5, 16))),
        "relaid_operands": (relaid_operands, inputs(randn(6, 5), randn(6))),
        "training_around_kernel": (training_around_kernel, inputs(
            lambda d: torch.randn(40, device=d, requires_grad=True))),
        "custom_op_autograd": (custom_op_autograd, inputs(
            lambda d: torch.randn(30, device=d, requires_grad=True))),
    }


CASE_NAMES = list(_cases(None))


def _clone(values: list[torch.Tensor]) -> list[torch.Tensor]:
    return [v.detach().clone().requires_grad_(v.requires_grad) for v in values]


def _check(name: str, backend: str, device: str, capture: str = "strict") -> None:
    kernels = _kernels(interpret=device == "cpu")
    fn, make_inputs = _cases(kernels)[name]
    options: dict[str, Any] = {"capture": capture}
    if backend == "inductor":
        options["strict"] = True  # no silent eager fallback of a graph
    compiled = ef.compile(fn, backend=backend, options=options)
    for _ in range(2):
        inputs = make_inputs(device)
        expected_inputs, actual_inputs = _clone(inputs), _clone(inputs)
        expected = fn(*expected_inputs)
        actual = compiled(*actual_inputs)
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
        for e, a in zip(expected_inputs, actual_inputs):  # in-place kernels too
            torch.testing.assert_close(a.detach(), e.detach(), rtol=1e-4, atol=1e-4)
        if isinstance(expected, torch.Tensor) and expected.requires_grad:  # training
            torch.autograd.backward(expected)
            actual.backward()
            for e, a in zip(expected_inputs, actual_inputs):
                torch.testing.assert_close(a.grad, e.grad, rtol=1e-4, atol=1e-4)
    assert compiled.stats.graph_breaks == 0, [b.reason for b in
                                              getattr(compiled, "breaks", [])]
    assert compiled.stats.graphs == 1


def _runs() -> list[Any]:
    """(name, backend, capture) of every corpus run: strict capture on every backend,
    trace capture on the inductor (and on every backend for TRACE_ON_EVERY_BACKEND)."""
    runs = [pytest.param(n, b, "strict", id=f"{n}-{b}")
            for n in CASE_NAMES for b in BACKENDS]
    runs += [pytest.param(n, b, "trace", id=f"{n}-{b}-trace")
             for n in CASE_NAMES for b in BACKENDS
             if b == "inductor" or n in TRACE_ON_EVERY_BACKEND]
    return runs


RUNS = _runs()


# NOTE: Triton's own jit library functions (tl.max, tl.sum, tl.rand, ...) are
# interpretable only when TRITON_INTERPRET=1 was set before Triton was imported: the CPU
# cases run in a child pytest with it set (test_corpus_in_triton_interpreter).
IN_INTERPRETER = os.environ.get("TRITON_INTERPRET", "0") == "1"


@pytest.mark.skipif(not IN_INTERPRETER, reason="runs in the TRITON_INTERPRET=1 child "
                    "process of test_corpus_in_triton_interpreter")
@pytest.mark.parametrize(("name", "backend", "capture"), RUNS)
def test_corpus_on_cpu_interpreter(name: str, backend: str, capture: str) -> None:
    with triton_for_cpu():
        _check(name, backend, "cpu", capture)


@pytest.mark.skipif(not IN_INTERPRETER, reason="runs in the TRITON_INTERPRET=1 child "
                    "process of test_corpus_in_triton_interpreter")
def test_output_code_in_cpu_interpreter(capsys: pytest.CaptureFixture[str]) -> None:
    """The wrapper shows the kernel's source above its launch; Ember's own kernels
    (the ``* 2`` before, the ``relu`` and ``+ 1`` after) fuse around it, not into it."""
    kernels = _kernels(interpret=True)
    fn, make_inputs = _cases(kernels)["vector_add"]
    compiled = ef.compile(fn, backend="inductor", options={"strict": True})
    with triton_for_cpu(), patch(logs="output_code"):
        compiled(*make_inputs("cpu"))
    code = capsys.readouterr().err
    key = "user_triton_kernels_interp:add_kernel"
    assert f"# user Triton kernel {key} (source user_kernels/add_kernel_" in code
    # the output (torch.empty_like, dead before the launch) is written where it is: no copy
    assert "writes tensors [2] (the call launches it on them in place)" in code
    assert "# | def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):" in code
    assert "# |     tl.store(out_ptr + offs, x + y, mask=mask)" in code
    assert f"= ops.ember.triton_kernel_.default('{key}', [buf0, arg1, buf1]" in code, code
    assert code.count("@triton.jit") >= 2  # Ember's kernels before and after the call


@pytest.mark.skipif(IN_INTERPRETER, reason="this is the child process")
def test_corpus_in_triton_interpreter() -> None:
    """Every CPU case, in a child pytest with ``TRITON_INTERPRET=1`` (and the program
    saved and loaded at every stage boundary)."""
    env = dict(os.environ, TRITON_INTERPRET="1", EMBER_SERIALIZE_BOUNDARIES="1")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
         str(Path(__file__)), "-k", "cpu_interpreter"],
        env=env, capture_output=True, text=True, timeout=900, check=False,
        cwd=HERE.parent)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    # every run, and the output-code test
    assert f"{len(RUNS) + 1} passed" in summary, summary


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize(("name", "backend", "capture"), RUNS)
def test_corpus_on_gpu(name: str, backend: str, capture: str) -> None:
    _check(name, backend, "cuda", capture)


# ---- compile-only checks for the H200 (no GPU needed) ---------------------------------------

F32, I32, I64 = "*fp32", "i32", "*i64"
SM90_SIGNATURES: dict[str, tuple[dict[str, str], dict[str, int]]] = {
    "add_kernel": ({"x_ptr": F32, "y_ptr": F32, "out_ptr": F32, "n": I32}, {"BLOCK": 32}),
    "softmax_kernel": ({"out_ptr": F32, "in_ptr": F32, "in_stride": I32, "out_stride": I32,
                        "n_cols": I32}, {"BLOCK": 32}),
    "layer_norm_fwd_kernel": ({"x_ptr": F32, "w_ptr": F32, "b_ptr": F32, "y_ptr": F32,
                               "mean_ptr": F32, "rstd_ptr": F32, "stride": I32,
                               "n_cols": I32, "eps": "fp32"}, {"BLOCK": 32}),
    "layer_norm_bwd_kernel": ({"dy_ptr": F32, "x_ptr": F32, "w_ptr": F32, "mean_ptr": F32,
                               "rstd_ptr": F32, "dx_ptr": F32, "dw_ptr": F32, "db_ptr": F32,
                               "stride": I32, "n_cols": I32}, {"BLOCK": 32}),
    "matmul_kernel": ({"a_ptr": F32, "b_ptr": F32, "c_ptr": F32, "M": I32, "N": I32,
                       "K": I32, "stride_am": I32, "stride_ak": I32, "stride_bk": I32,
                       "stride_bn": I32, "stride_cm": I32, "stride_cn": I32},
                      {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32}),
    "dropout_kernel": ({"x_ptr": F32, "out_ptr": F32, "n": I32, "p": "fp32", "seed": I32},
                       {"BLOCK": 64}),
    "scale_shift_inplace_kernel": ({"x_ptr": F32, "n": I32, "scale": "fp32",
                                    "shift": "fp32"}, {"BLOCK": 32}),
    "sincos_kernel": ({"x_ptr": F32, "sin_ptr": F32, "cos_ptr": F32, "n": I32},
                      {"BLOCK": 32}),
    "store_then_reload_kernel": ({"x_ptr": F32, "out_ptr": F32, "n": I32}, {"BLOCK": 32}),
    "bias_gelu_kernel": ({"x_ptr": F32, "b_ptr": F32, "out_ptr": F32, "n": I32,
                          "n_cols": I32}, {"BLOCK": 64}),
    "row_sum_kernel": ({"x_ptr": F32, "out_ptr": F32, "stride": I32, "n_cols": I32},
                       {"BLOCK": 16}),
    "gather_rows_kernel": ({"idx_ptr": I64, "table_ptr": F32, "out_ptr": F32,
                            "n_cols": I32}, {"BLOCK": 16}),
    "relu_fwd_kernel": ({"x_ptr": F32, "out_ptr": F32, "n": I32, "scale": "fp32"},
                        {"BLOCK": 64}),
    "relu_bwd_kernel": ({"x_ptr": F32, "dy_ptr": F32, "dx_ptr": F32, "n": I32,
                         "scale": "fp32"}, {"BLOCK": 64}),
}


@pytest.mark.skipif(IN_INTERPRETER, reason="needs JIT kernels (this is the child process)")
@pytest.mark.parametrize("name", sorted(SM90_SIGNATURES))
def test_corpus_kernel_compiles_for_sm90(name: str) -> None:
    """Each corpus kernel compiles for the H200's sm_90 (what the interpreter accepts
    and the GPU compiler might not)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel = getattr(_kernels(interpret=False), name)
    while not hasattr(kernel, "arg_names") or type(kernel).__name__ != "JITFunction":
        kernel = kernel.fn  # the autotuner's / heuristics' jit function
    signature, constexprs = SM90_SIGNATURES[name]
    ordered = {a: signature.get(a, "constexpr") for a in kernel.arg_names}
    compiled = triton.compile(ASTSource(kernel, signature=ordered, constexprs=constexprs),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    assert "cubin" in compiled.asm and compiled.metadata.name.startswith(name)
