"""A generated kernel computing a mutated graph input's new value stores it into the
input's memory (``codegen/input_writes.py``): the wrapper binds the new value's buffer to
the input, returns the input itself as its ``MUTATED_INPUT`` output, and the runtime's copy
back is skipped. Read as printed wrapper code and memory logs, on the C++ backend and
through Triton's interpreter; the cases that keep the copy; numerics against eager."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path

import pytest
import torch
from ember_testing.copies import CopyCounter

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.memory_plan import plan_memory
from ember.inductor.codegen.triton.testing import triton_for_cpu
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.scheduler import schedule
from ember.runtime.callable import ProgramCallable
from ember.runtime.compiled import load_executor
from ember.runtime.ir import Program, parse_program
from ember.runtime.ir.contracts import CompileReport
from helpers import compile_and_load


def _program(body: str, params: str = "%x: f32[8]{1} cpu, %y: f32[8]{1} cpu",
             header: str = "") -> Program:
    program = parse_program("program dialect=core-functional\n" + header
                            + f"\ngraph forward({params}):\n" + body)
    program.untrusted_origin = None  # text this test wrote
    return program


# what the aot stage makes of ``x.add_(1); return y * 2``
ADD_ = """\
  %add: f32[8]{1} cpu = aten::add.Tensor(%x, 1)
  %mul: f32[8]{1} cpu = aten::mul.Tensor(%y, 2)
  return (%mul, %add)  [user_output, mutated_input x]
"""


@pytest.fixture(params=["cpp", "triton"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    context: AbstractContextManager[None] = (
        triton_for_cpu() if request.param == "triton" else nullcontext())
    with context:
        yield request.param


def _compile(program: Program, backend: str) -> tuple[Program, str]:
    options = {} if backend == "cpp" else {"precompile": False}
    compiled, _ = compile_and_load(program, **options)
    code = next(v for k, v in compiled.files.items() if k.endswith(".py")).decode()
    return compiled, code


def _input_lines(program: Program) -> list[str]:
    """The memory log's lines on mutated inputs (``EMBER_LOGS=memory``)."""
    lowered = GraphLowering(program).run()
    _, report = plan_memory(lowered, schedule(lowered), "cpu")
    return list(report.inputs)


def test_the_kernel_stores_into_the_input_and_returns_it(backend: str) -> None:
    compiled, code = _compile(_program(ADD_), backend)
    assert ("    buf0 = _empty((8,), (1,), torch.float32)\n"
            "    buf1 = arg0  # mutated input arg0 written in place (returned as itself: no "
            "copy back)\n"
            "    kernel0(arg1, buf0, buf1, buf1)\n") in code
    assert "    return [buf0, buf1]\n" in code
    assert code.count(" = _empty(") == 1  # buf0 only
    assert CompileReport.from_program(compiled).memory == {"forward": {
        "peak_bytes": 32, "ideal_bytes": 64, "inputs_in_place": 1, "inputs_copied_back": 0}}
    source = next(v for k, v in compiled.files.items() if "/wrapper" not in k).decode()
    if backend == "cpp":  # buf1: the pointer the wrapper passed, arg0's memory
        assert "const float* __restrict__ arg0, float* __restrict__ buf1)" in source
        assert ("const float v3 = arg0[x0];\n" in source
                and "buf1[x0] = v5;\n" in source)
    else:
        assert ("v3 = tl.load(arg0_ptr + (x0))\n" in source
                and "tl.store(buf1_ptr + (x0), v5)\n" in source)


def test_no_copy_back_values_and_version(backend: str) -> None:
    compiled, _ = _compile(_program(ADD_), backend)
    x, y = torch.randn(8), torch.randn(8)
    want_x, want_out, version = x + 1, y * 2, x._version
    # the wrapper returns the input itself as its mutated-input output
    assert load_executor(compiled, "forward")([x.clone(), y])[1] is not x
    x_in = x.clone()
    assert load_executor(compiled, "forward")([x_in, y])[1] is x_in
    with CopyCounter() as copies:
        (out,) = ProgramCallable(compiled)([x, y])
    if backend == "cpp":  # Triton's interpreter copies the arguments of each launch
        assert copies.count == 0
    torch.testing.assert_close(x, want_x)
    torch.testing.assert_close(out, want_out)
    assert x._version > version  # autograd sees the write, as eager's add_


def test_the_memory_log_names_the_input_written_in_place() -> None:
    assert _input_lines(_program(ADD_)) == [
        "input %x (arg0): buf1 written in place by kernel0 (no copy back)"]


def test_several_inputs_in_one_kernel_read_modify_write() -> None:
    # SGD with momentum: buf = 0.9 * buf + g; p = p - 0.1 * buf (p, buf mutated)
    program = _program("""\
  %mul: f32[8]{1} cpu = aten::mul.Tensor(%b, 0.9)
  %add: f32[8]{1} cpu = aten::add.Tensor(%mul, %g)
  %mul_1: f32[8]{1} cpu = aten::mul.Tensor(%add, 0.1)
  %sub: f32[8]{1} cpu = aten::sub.Tensor(%p, %mul_1)
  return (%sub, %add)  [mutated_input p, mutated_input b]
""", params="%p: f32[8]{1} cpu, %g: f32[8]{1} cpu, %b: f32[8]{1} cpu")
    assert _input_lines(program) == [
        "input %p (arg0): buf0 written in place by kernel0 (no copy back)",
        "input %b (arg2): buf1 written in place by kernel0 (no copy back)"]
    compiled, _ = compile_and_load(program)
    p, g, b = torch.randn(8), torch.randn(8), torch.randn(8)
    want_b = b * 0.9 + g
    want_p = p - 0.1 * want_b
    with CopyCounter() as copies:
        assert ProgramCallable(compiled)([p, g, b]) == []
    assert copies.count == 0
    torch.testing.assert_close(p, want_p)
    torch.testing.assert_close(b, want_b)


# -- where the input keeps its copy ------------------------------------------------------
# ``y = x.flip(0); x.mul_(2); return y``: the flip reads the old value at another index
FLIP = """\
  %flip: f32[8]{1} cpu = aten::flip.default(%x, [0])
  %mul: f32[8]{1} cpu = aten::mul.Tensor(%x, 2)
  return (%flip, %mul)  [user_output, mutated_input x]
"""


def test_old_value_read_at_another_index_keeps_the_copy(backend: str) -> None:
    (line,) = _input_lines(_program(FLIP))
    assert line == "input %x (arg0): copied back (kernel0 reads its old value at another index)"
    compiled, code = _compile(_program(FLIP), backend)
    assert "= arg0  # mutated input" not in code
    x = torch.randn(8)
    want_y, want_x = x.flip(0), x * 2
    x_in = x.clone()
    assert load_executor(compiled, "forward")([x_in, torch.randn(8)])[1] is not x_in
    torch.testing.assert_close(x_in, x)  # the wrapper left the input alone
    with CopyCounter() as copies:
        (y,) = ProgramCallable(compiled)([x, torch.randn(8)])
    if backend == "cpp":
        assert copies.count == 1
    torch.testing.assert_close(y, want_y)
    torch.testing.assert_close(x, want_x)


def test_old_value_read_by_a_later_kernel_keeps_the_copy() -> None:
    # ``x.add_(1)`` and a contiguous copy of ``x.t()`` taken before it: the transposing
    # kernel runs after the one computing the new value
    program = _program("""\
  %add: f32[2, 4]{4,1} cpu = aten::add.Tensor(%x, 1)
  %p: f32[4, 2]{1,4} cpu = aten::permute.default(%x, [1, 0])
  %c: f32[4, 2]{2,1} cpu = aten::clone.default(%p, memory_format=torch.contiguous_format)
  return (%add, %c)  [mutated_input x, user_output]
""", params="%x: f32[2, 4]{4,1} cpu")
    assert _input_lines(program) == [
        "input %x (arg0): copied back (kernel1 reads its old value after kernel0)"]
    compiled, _ = compile_and_load(program)
    x = torch.randn(2, 4)
    want_x, want_c = x + 1, x.t().contiguous()
    (c,) = ProgramCallable(compiled)([x])
    torch.testing.assert_close(c, want_c)
    torch.testing.assert_close(x, want_x)


def test_old_value_read_again_in_the_kernel_is_one_load_before_the_store() -> None:
    # ``x.add_(1)`` and ``x * 3`` taken before it fuse into one kernel that loads ``x[i]``
    # once, before storing the new value there: written in place, the product still sees
    # the old value
    program = _program("""\
  %add: f32[8]{1} cpu = aten::add.Tensor(%x, 1)
  %mul: f32[8]{1} cpu = aten::mul.Tensor(%x, 3)
  return (%add, %mul)  [mutated_input x, user_output]
""")
    assert _input_lines(program) == [
        "input %x (arg0): buf0 written in place by kernel0 (no copy back)"]
    compiled, _ = compile_and_load(program)
    x = torch.randn(8)
    want_x, want_mul = x + 1, x * 3
    (mul,) = ProgramCallable(compiled)([x, torch.randn(8)])
    torch.testing.assert_close(mul, want_mul)
    torch.testing.assert_close(x, want_x)


def test_an_aliased_input_keeps_the_copy() -> None:
    aliases = ('metadata {"input_aliases": {"y": {"base": "x", "sizes": [8], '
               '"strides": [1], "storage_offset": 0}}}')
    assert _input_lines(_program(ADD_, header=aliases)) == [
        "input %x (arg0): copied back (input %y views it)"]


def test_a_layout_mismatch_keeps_the_copy() -> None:
    program = _program("""\
  %add: f32[2, 4]{4,1} cpu = aten::add.Tensor(%x, 1)
  return (%add)  [mutated_input x]
""", params="%x: f32[2, 4]{1,2} cpu")
    assert _input_lines(program) == [
        "input %x (arg0): copied back (layout: buf0 is [2, 4] strides [4, 1], the input "
        "[2, 4] strides [1, 2])"]
    compiled, _ = compile_and_load(program)
    x = torch.randn(4, 2).t()
    want = x + 1
    with CopyCounter() as copies:
        ProgramCallable(compiled)([x])
    assert copies.count == 1
    torch.testing.assert_close(x, want)


def test_the_new_value_also_returned_keeps_the_copy() -> None:
    # the matmul makes the lowering store ``x + 1`` once; both outputs return that buffer
    program = _program("""\
  %add: f32[2, 4]{4,1} cpu = aten::add.Tensor(%x, 1)
  %mm: f32[2, 1]{1,1} cpu = aten::mm.default(%add, %y)
  return (%mm, %add, %add)  [user_output, user_output, mutated_input x]
""", params="%x: f32[2, 4]{4,1} cpu, %y: f32[4, 1]{1,1} cpu")
    assert _input_lines(program) == [
        "input %x (arg0): copied back (output 1 is also buf0 or the input)"]
    compiled, _ = compile_and_load(program)
    x, y = torch.randn(2, 4), torch.randn(4, 1)
    want = x + 1
    mm, out = ProgramCallable(compiled)([x, y])
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(mm, want @ y)
    assert out.data_ptr() != x.data_ptr()


def test_requires_grad_in_training_keeps_the_copy() -> None:
    program = _program(ADD_, params="%x: f32[8]{1} cpu requires_grad, %y: f32[8]{1} cpu")
    program.graphs["backward"] = program.graphs["forward"]  # only its presence counts
    assert _input_lines(program) == [
        "input %x (arg0): copied back (requires grad in a program with a backward graph)"]


def test_an_input_passed_in_another_layout_is_copied_back() -> None:
    # the wrapper relays a strided input into a copy; the kernel writes the copy
    compiled, _ = compile_and_load(_program(ADD_))
    base = torch.randn(16)
    x = base[::2]
    want = x + 1
    with CopyCounter() as copies:
        ProgramCallable(compiled)([x, torch.randn(8)])
    assert copies.count >= 1
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(base[1::2], base[1::2])


def test_a_run_time_check_after_the_write_keeps_the_copy() -> None:
    # ``x.add_(y[i])`` with a bad index raises in eager before ``x`` changes; the kernel
    # checking ``i`` must not have written ``x`` when the wrapper raises
    program = _program("""\
  %index: f32[2]{1} cpu = aten::index.Tensor(%y, [%i])
  %add: f32[2]{1} cpu = aten::add.Tensor(%x, %index)
  return (%add)  [mutated_input x]
""", params="%x: f32[2]{1} cpu, %y: f32[8]{1} cpu, %i: i64[2]{1} cpu")
    assert _input_lines(program) == [
        "input %x (arg0): copied back (a run-time check of kernel0 may fail after the "
        "write)"]
    compiled, _ = compile_and_load(program)
    x = torch.zeros(2)
    with pytest.raises(IndexError):
        ProgramCallable(compiled)([x, torch.randn(8), torch.tensor([1, 9])])
    torch.testing.assert_close(x, torch.zeros(2))
