"""A custom operator (Python or C++) or a user Triton kernel that writes the caller's
tensor, compiled end to end: on the ``inductor`` backend it writes the input itself
when the input's old value is dead afterwards (the output code calls it on ``argN``
with a note saying so, returns ``argN`` as the mutated input, and no ``aten::copy_``
runs: neither the aot stage's clone nor the runtime's copy back); ``eager`` and
``aot_eager`` keep their copies; every backend matches eager.

On the CPU the Triton kernel runs in Triton's interpreter (``triton_for_cpu``); the
``cuda`` tests run the same on a GPU with a JIT kernel."""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from ember_testing.copies import CopyCounter

sys.path.insert(0, str(Path(__file__).parent))

from custom_ops_library import CPP_NAMESPACE, build_cpp_operators, ema_, scale_

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.runtime.compiled.triton_kernel import _interpreter_mode


def _shift(x_ptr, n, scale, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale + 1.0, mask=mask)


with _interpreter_mode(True):
    shift_interp = triton.jit(_shift)
with _interpreter_mode(False):
    shift_jit = triton.jit(_shift)


def _launch(kernel: Any, x: torch.Tensor) -> None:
    kernel[(triton.cdiv(x.numel(), 32),)](x, x.numel(), 3.0, BLOCK=32)


# -- the programs --------------------------------------------------------------------------
def python_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    scale_(x, 2.0)
    return y + 1


def python_op_then_read(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    scale_(x, 2.0)
    return x * y  # reads the new value: still no copy


def old_value_read_later(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    old = x * 1
    scale_(x, 2.0)
    return old + x  # the old value is live after the call: the input is copied first


def cpp_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    getattr(torch.ops, CPP_NAMESPACE).clamp_(x, -0.5, 0.5)
    return y - 1


def triton_interp(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _launch(shift_interp, x)
    return y * 2


def triton_jit(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    _launch(shift_jit, x)
    return y * 2


def _check(fn: Callable[..., torch.Tensor], backend: str, device: str = "cpu",
           n: int = 70) -> tuple[str, int]:
    """Compile ``fn``, run it twice against eager (the output and the written input);
    returns the output code (``EMBER_LOGS=output_code``) and the ``aten::copy_`` calls
    of the second call."""
    options = {"strict": True} if backend == "inductor" else {}
    compiled = ef.compile(fn, backend=backend, options=options)
    code, copies = "", 0
    for _ in range(2):
        x, y = torch.randn(n, device=device), torch.randn(n, device=device)
        want_x, want_y = x.clone(), y.clone()
        want = fn(want_x, want_y)
        with patch(logs="output_code"), CopyCounter() as counter, \
                contextlib.redirect_stderr(io.StringIO()) as log:
            got = compiled(x, y)
        code = code or log.getvalue()
        copies = counter.count
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x, want_x)
    assert compiled.stats.graph_breaks == 0 and compiled.stats.graphs == 1
    return code, copies


BACKENDS = ["eager", "aot_eager", "inductor"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_python_custom_op_writes_the_input(backend: str) -> None:
    code, copies = _check(python_op, backend)
    if backend == "aot_eager":
        assert copies == 1  # the interpreter's clone is written, then copied back
    if backend != "inductor":
        return
    ns = "ember_corpus"
    assert (f"# extern: {ns}::scale_.default (custom operator, writes arg0 in place "
            "(graph input %x: no copy in or back))") in code, code
    assert f"= ops.{ns}.scale_.default(arg0, 2.0)\n" in code, code
    assert "return [buf1, arg0]" in code, code
    assert copies == 0


def test_reading_the_new_value_after_the_call() -> None:
    code, copies = _check(python_op_then_read, "inductor")
    assert "scale_.default(arg0, 2.0)" in code and copies == 0, code


def test_an_old_value_read_later_keeps_the_copy() -> None:
    code, copies = _check(old_value_read_later, "inductor")
    assert "scale_.default(buf0, 2.0) " not in code  # the sanity of the next line
    assert "scale_.default(arg0" not in code and copies == 1, code


@pytest.fixture(scope="module")
def cpp_ops() -> None:
    try:
        build_cpp_operators()
    except RuntimeError as e:
        pytest.skip(str(e))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cpp_custom_op_writes_the_input(cpp_ops: None, backend: str) -> None:
    code, copies = _check(cpp_op, backend)
    if backend == "inductor":
        assert f"= ops.{CPP_NAMESPACE}.clamp_.default(arg0, -0.5, 0.5)\n" in code, code
        assert copies == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_triton_kernel_writes_the_input(backend: str) -> None:
    with triton_for_cpu():
        code, _ = _check(triton_interp, backend)
    if backend != "inductor":
        return
    assert ("# extern: ember::triton_kernel_.default (user Triton kernel, writes arg0 in "
            "place (graph input %x: no copy in or back))") in code, code
    assert "writes tensors [0] (the call launches it on them in place)" in code, code
    assert "= ops.ember.triton_kernel_.default(" in code and "', [arg0], [" in code, code
    assert "return [buf1, arg0]" in code, code  # (Triton's interpreter copies: not counted)


def test_across_serialized_stage_boundaries() -> None:
    """``EMBER_SERIALIZE_BOUNDARIES=1``: the saved and re-loaded program elides too."""
    with patch(serialize_boundaries=True), triton_for_cpu():
        for fn in (python_op, triton_interp):
            code, _ = _check(fn, "inductor")
            assert "writes arg0 in place" in code and "return [buf1, arg0]" in code, code


class _Averaging(torch.nn.Module):
    """A training model whose buffer a custom operator updates (no grad: written in
    place even though the program has a backward graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.register_buffer("avg", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        ema_(self.avg, h.detach().mean(0), 0.1)
        return h.relu().sum()


def test_a_buffer_updated_in_training_is_written_in_place() -> None:
    torch.manual_seed(0)
    eager, model = _Averaging(), _Averaging()
    model.load_state_dict(eager.state_dict())
    compiled = ef.compile(model, backend="inductor", options={"strict": True})
    code = ""
    for _ in range(2):
        x = torch.randn(4, 8)
        want = eager(x)
        with patch(logs="output_code"), contextlib.redirect_stderr(io.StringIO()) as log:
            got = compiled(x)
        code = code or log.getvalue()
        want.backward()
        got.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(model.avg, eager.avg)
        torch.testing.assert_close(model.lin.weight.grad, eager.lin.weight.grad)
    assert "ema_.default(arg" in code and "(graph input %" in code, code
    assert compiled.stats.graphs == 1


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
@pytest.mark.parametrize(("fn", "call"), [
    (python_op, "= ops.ember_corpus.scale_.default(arg0, 2.0)\n"),
    (triton_jit, "', [arg0], ["),
], ids=["python_op", "triton"])
def test_on_cuda(fn: Callable[..., torch.Tensor], call: str) -> None:
    code, copies = _check(fn, "inductor", device="cuda", n=1000)
    assert call in code and "return [buf1, arg0]" in code, code
    assert copies == 0
    for backend in ("eager", "aot_eager"):
        _check(fn, backend, device="cuda", n=1000)
