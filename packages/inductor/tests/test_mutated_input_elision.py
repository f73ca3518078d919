"""A mutating custom operator writing a *graph input* the program mutates: the
operator gets the input's buffer (``argN``) itself when the input's old value is dead
after the call, and the input's ``MUTATED_INPUT`` output is ``argN``, so neither the
copy in (the aot stage's ``clone``) nor the runtime's copy back runs. Read as printed
lowered graphs and wrapper code; numerics against eager."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from ember_testing.copies import CopyCounter

sys.path.insert(0, str(Path(__file__).parent))

from ember.inductor.codegen.wrapper import render_arg
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import Program, parse_program
from helpers import compile_and_load


@torch.library.custom_op("ember_elision_test::scale_", mutates_args=("x",))
def scale_(x: torch.Tensor, k: float) -> None:
    x.mul_(k)


@scale_.register_fake
def _(x: torch.Tensor, k: float) -> None:
    return None


@torch.library.custom_op("ember_elision_test::axpy_", mutates_args=("y",))
def axpy_(y: torch.Tensor, x: torch.Tensor, a: float) -> None:
    y.add_(x, alpha=a)


@axpy_.register_fake
def _(y: torch.Tensor, x: torch.Tensor, a: float) -> None:
    return None


def _program(body: str, params: str = "%x: f32[4]{1} cpu, %y: f32[4]{1} cpu",
             header: str = "") -> Program:
    program = parse_program("program dialect=core-functional\n" + header
                            + f"\ngraph forward({params}):\n" + body)
    program.untrusted_origin = None  # text this test wrote
    return program


# what the aot stage makes of ``scale_(x, 2.0); return y + 1``
DEAD_BODY = """\
  %clone: f32[4]{1} cpu = aten::clone.default(%x)
  %scale_ = ember_elision_test::scale_.default(%clone, 2.0)
  %add: f32[4]{1} cpu = aten::add.Tensor(%y, 1)
  return (%add, %clone)  [user_output, mutated_input x]
"""
DEAD = _program(DEAD_BODY)


def _lowered(program: Program) -> str:
    return str(GraphLowering(program).run())


def _wrapper(program: Program) -> str:
    compiled, _ = compile_and_load(program)
    return str(next(v for k, v in compiled.files.items() if k.endswith(".py")).decode())


def test_a_dead_mutated_input_is_written_in_place() -> None:
    assert _lowered(DEAD) == """\
lowered graph 'forward' on cpu
  input arg0: float32[4] strides [1]
  input arg1: float32[4] strides [1]
  buffer buf1: float32[4] strides [1] (computed)
  buf0 = extern ember_elision_test::scale_.default(arg0, 2.0) (custom operator, writes \
arg0 in place (graph input %x: no copy in or back))  # from scale_
  buf1 = pointwise over [4]:  # from add
      v0: float32 = load arg1[i0]
      v1: float32 = 1.0
      v2: float32 = add(v0, v1)
      store buf1[i0] = v2
  outputs buf1, arg0"""


def test_the_wrapper_calls_the_op_on_the_input_and_returns_it() -> None:
    code = _wrapper(DEAD)
    assert "    # extern: ember_elision_test::scale_.default (custom operator, writes arg0 " \
           "in place (graph input %x: no copy in or back))\n" \
           "    buf0 = ops.ember_elision_test.scale_.default(arg0, 2.0)\n" in code
    assert "    return [buf1, arg0]\n" in code
    assert code.count(" = _empty(") == 1  # buf1 only: no copy of arg0


def test_no_copy_back_and_values_match_eager() -> None:
    compiled, _ = compile_and_load(DEAD)
    run = ProgramCallable(compiled)
    x, y = torch.randn(4), torch.randn(4)
    want_x, want_out = x * 2, y + 1
    with CopyCounter() as copies:
        (out,) = run([x, y])
    torch.testing.assert_close(x, want_x)
    torch.testing.assert_close(out, want_out)
    assert copies.count == 0


def test_an_input_that_requires_grad_is_not_copied_onto_itself() -> None:
    compiled, _ = compile_and_load(DEAD)  # no backward graph: inference
    x = torch.randn(4, requires_grad=True)
    want = x.detach() * 2
    with torch.no_grad(), CopyCounter() as copies:
        ProgramCallable(compiled)([x, torch.randn(4)])
    torch.testing.assert_close(x.detach(), want)
    assert copies.count == 0


def test_a_copy_back_from_other_memory_still_runs() -> None:
    # the input came in another layout: the wrapper wrote a relaid copy, copied back
    compiled, _ = compile_and_load(DEAD)
    run = ProgramCallable(compiled)
    base = torch.randn(8)
    x, y = base[::2], torch.randn(4)
    want = x * 2
    with CopyCounter() as copies:
        run([x, y])
    torch.testing.assert_close(x, want)
    assert copies.count >= 1


# -- where the input keeps its copy -------------------------------------------------------
def _copied(program: Program) -> str:
    lowered = GraphLowering(program).run()
    (call,) = lowered.extern_nodes
    return ", ".join(call.mutates)


def test_old_value_read_after_the_call_keeps_the_copy() -> None:
    program = _program("""\
  %clone: f32[4]{1} cpu = aten::clone.default(%x)
  %scale_ = ember_elision_test::scale_.default(%clone, 2.0)
  %mul: f32[4]{1} cpu = aten::mul.Tensor(%x, 3)
  return (%mul, %clone)  [user_output, mutated_input x]
""")
    assert _copied(program) == "buf0"


def test_old_value_computed_lazily_after_the_call_keeps_the_copy() -> None:
    # %mul comes before the call in the graph, but its kernel runs for the output
    program = _program("""\
  %mul: f32[4]{1} cpu = aten::mul.Tensor(%x, 3)
  %clone: f32[4]{1} cpu = aten::clone.default(%x)
  %scale_ = ember_elision_test::scale_.default(%clone, 2.0)
  return (%mul, %clone)  [user_output, mutated_input x]
""")
    assert _copied(program) == "buf0"


def test_an_input_the_program_does_not_mutate_keeps_the_copy() -> None:
    program = _program("""\
  %clone: f32[4]{1} cpu = aten::clone.default(%x)
  %scale_ = ember_elision_test::scale_.default(%clone, 2.0)
  return (%clone)  [user_output]
""")
    assert _copied(program) == "buf0"


def test_another_argument_of_the_call_reading_the_input_keeps_the_copy() -> None:
    program = _program("""\
  %clone: f32[4]{1} cpu = aten::clone.default(%x)
  %axpy_ = ember_elision_test::axpy_.default(%clone, %x, 2.0)
  return (%clone)  [mutated_input x]
""")
    assert _copied(program) == "buf0"
    compiled, _ = compile_and_load(program)
    x = torch.randn(4)
    want = x * 3
    ProgramCallable(compiled)([x, torch.randn(4)])
    torch.testing.assert_close(x, want)


def test_an_input_aliased_with_another_input_keeps_the_copy() -> None:
    aliases = ('metadata {"input_aliases": {"y": {"base": "x", "sizes": [4], '
               '"strides": [1], "storage_offset": 0}}}')
    assert _copied(_program(DEAD_BODY, header=aliases)) == "buf0"


def test_an_input_in_another_layout_than_the_written_value_keeps_the_copy() -> None:
    program = _program("""\
  %clone: f32[2, 3]{3,1} cpu = aten::clone.default(%x, memory_format=torch.contiguous_format)
  %scale_ = ember_elision_test::scale_.default(%clone, 2.0)
  return (%clone)  [mutated_input x]
""", params="%x: f32[2, 3]{1,2} cpu")
    assert _copied(program) == "buf0"


def test_an_input_requiring_grad_in_training_keeps_the_copy() -> None:
    program = _program(DEAD_BODY, params="%x: f32[4]{1} cpu requires_grad, %y: f32[4]{1} cpu")
    program.graphs["backward"] = program.graphs["forward"]  # only its presence counts
    assert _copied(program) == "buf0"
    program.graphs.pop("backward")
    assert _copied(program) == "arg0"  # inference: requires_grad alone does not matter


def test_the_written_value_also_returned_to_the_user_is_a_copy() -> None:
    program = _program("""\
  %clone: f32[4]{1} cpu = aten::clone.default(%x)
  %scale_ = ember_elision_test::scale_.default(%clone, 2.0)
  return (%clone, %clone)  [user_output, mutated_input x]
""")
    compiled, _ = compile_and_load(program)
    x = torch.randn(4)
    want = x * 2
    (out,) = ProgramCallable(compiled)([x, torch.randn(4)])
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(out, want)
    assert out.data_ptr() != x.data_ptr()  # eager's custom op returns nothing to alias


# -- user Triton kernels (``ember::triton_kernel``: the lowering never resolves the kernel)
def _launch(tensors: str, writes: list[int], same: list[list[int]] | None = None,
            after: str = "") -> Program:
    """``kernel[grid](<tensors>)`` writing ``writes``, as the aot stage leaves it."""
    spec = {"args": [{"index": i, "kind": "tensor"} for i in range(tensors.count("%"))],
            "grids": [{"dims": [0], "when": {}}], "kernel": "m:k",
            "source_file": "user_kernels/k.py", "source_sha256": "0" * 64,
            "writes": writes, "same": same or []}
    text = json.dumps(json.dumps(spec, separators=(",", ":")))
    results = ", ".join(["f32[4]{1} cpu"] * len(writes))
    return _program(f"""\
  %e: f32[4]{{1}} cpu = aten::empty_like.default(%y)
  %tk: ({results}) = ember::triton_kernel.default("m:k", [{tensors}], [1], {text})
  %copy: f32[4]{{1}} cpu = aten::copy.default(%x, %tk.0)
  %out: f32[4]{{1}} cpu = aten::add.Tensor(%tk.{len(writes) - 1}, 1){after}
  return (%out, %copy)  [user_output, mutated_input x]
""")


def test_a_user_kernel_writing_a_dead_input_is_launched_in_place() -> None:
    lowered = GraphLowering(_launch("%x, %e", [0, 1])).run()
    (call,) = lowered.extern_nodes
    assert (call.target, call.mutates) == ("ember::triton_kernel_.default", ("arg0", "buf0"))
    assert call.note == ("user Triton kernel, writes arg0 in place (graph input %x: no copy "
                         "in or back), buf0")  # buf0: the empty_like, dead after it too
    assert str(lowered).endswith("  outputs buf2, arg0")


def test_a_user_kernel_keeps_its_copies_where_the_old_value_is_live() -> None:
    read_later = _launch("%x", [0], after="\n  %old: f32[4]{1} cpu = aten::mul.Tensor(%x, 2)")
    twice = _launch("%x, %x", [0])  # two tensors at the launch, CSE made them one
    for program in (read_later, twice):
        lowered = GraphLowering(program).run()
        (call,) = lowered.extern_nodes
        # launched on a copy the wrapper makes (the in-place twin on a buffer of its own),
        # never on the input itself
        assert "arg0" not in call.mutates, call
        assert call.target == "ember::triton_kernel.default" or (
            call.target == "ember::triton_kernel_.default" and len(call.mutates) == 1)


def test_one_tensor_passed_twice_to_a_user_kernel_is_one_buffer() -> None:
    (call,) = GraphLowering(_launch("%x, %x", [0], [[0, 1]])).run().extern_nodes
    assert call.target == "ember::triton_kernel_.default" and call.mutates == ("arg0",)
    assert render_arg(call.args[1]) == "[arg0, arg0]"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_written_in_place_on_cuda() -> None:
    program = _program(DEAD_BODY.replace(" cpu", " cuda:0"),
                       params="%x: f32[4]{1} cuda:0, %y: f32[4]{1} cuda:0")
    compiled, _ = compile_and_load(program)
    code = next(v for k, v in compiled.files.items() if k.endswith(".py")).decode()
    assert "buf0 = ops.ember_elision_test.scale_.default(arg0, 2.0)" in code
    x, y = torch.randn(1000, device="cuda")[:4], torch.randn(4, device="cuda")
    want = x * 2
    with CopyCounter() as copies:
        (out,) = ProgramCallable(compiled)([x, y])
    torch.testing.assert_close(x, want)
    torch.testing.assert_close(out, y + 1)
    assert copies.count == 0
