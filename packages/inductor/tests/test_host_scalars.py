"""CPU 0-d float32 tensors in a CUDA graph are *host scalars* (``lowering/host_scalars.py``):
a CUDA kernel takes their value as a scalar argument, read on the host by the wrapper
(``argN.item()``), and computes what the graph computes from them on the CPU (an
optimizer's bias corrections from its CPU ``step``) itself; only a CPU tensor the graph
returns is computed on the host, by an extern call. No CUDA device is needed: the Triton
code for ``cuda`` is generated, not built."""

from __future__ import annotations

import pytest
import torch
from ember.inductor.compile import compile_graph
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.runtime.ir import parse_program

pytest.importorskip("triton")

# an Adam-like update: the cpu step counter, its bias correction, a cuda tensor scaled by it
PROGRAM = '''program dialect=core-functional

graph forward(%x: f32[64]{1} cuda:0, %step: f32[]{} cpu, %lr: f64[]{} cpu):
  %t: f32[]{} cpu = aten::add.Tensor(%step, 1)
  %p: f32[]{} cpu = aten::pow.Scalar(0.9, %t)
  %c: f32[]{} cpu = aten::rsub.Scalar(%p, 1)
  %s: f32[]{} cpu = aten::sqrt.default(%c)
  %y: f32[64]{1} cuda:0 = aten::div.Tensor(%x, %s)
  %z: f32[64]{1} cuda:0 = aten::mul.Tensor(%y, %lr)
  return (%z, %t)  [user_output, user_output]
'''


def _notes(program_text: str) -> list[tuple[str, str]]:
    lowered = GraphLowering(parse_program(program_text), "forward", torch.device("cuda")).run()
    return [(getattr(n, "target", type(n).__name__), getattr(n, "note", ""))
            for n in lowered.nodes]


def test_cpu_scalar_math_is_inlined_into_the_cuda_kernel() -> None:
    lowered = GraphLowering(parse_program(PROGRAM), "forward", torch.device("cuda")).run()
    notes = [(getattr(n, "target", type(n).__name__), getattr(n, "note", ""))
             for n in lowered.nodes]
    # the float64 lr stays an extern operand (a Python float is fp32 to Triton)
    assert notes == [("PointwiseBuffer", ""),
                     ("aten::mul.Tensor", "a cpu tensor in a cuda graph"),
                     ("aten::add.Tensor", "a cpu scalar a cuda graph returns or passes to "
                                          "an extern call")], notes
    assert lowered.buffers["arg1"].host and not lowered.buffers["arg0"].host
    assert not lowered.buffers["arg2"].host  # float64: not a host scalar


def test_the_kernel_takes_the_host_scalar_by_value() -> None:
    compiled = compile_graph(parse_program(PROGRAM.replace("f64[]{} cpu", "f32[]{} cpu")),
                             "forward", torch.device("cuda"))
    wrapper = compiled.wrapper
    assert "kernel0(arg0, arg1.item(), arg2.item(), buf0)" in wrapper, wrapper
    # the step counter's new value: computed on the cpu, after the kernels
    assert "buf1 = aten.add.Tensor(arg1, 1)" in wrapper, wrapper
    assert wrapper.index("kernel0(") < wrapper.index("aten.add.Tensor(arg1, 1)")
    assert "_empty((), ()" not in wrapper  # no cuda 0-d buffer
    # (an extern result's `_layout(buf.to(dtype), ...)`, run only when eager's dtype
    # differs from the traced one, is no transfer)
    moves = "\n".join(line for line in wrapper.splitlines() if "_layout(" not in line)
    assert "copy_" not in moves and ".to(" not in moves and ".cuda(" not in moves
    assert dict(compiled.fallbacks) == {"aten::add.Tensor": 1}
    ((kernel, source),) = compiled.kernels
    assert [b.host for b in kernel.buffers] == [False, True, True, False]
    assert source.meta["signature"] == {"arg0_ptr": "*fp32", "arg1_val": "fp32",
                                        "arg2_val": "fp32", "buf0_ptr": "*fp32"}
    assert "def fwd_kernel0(arg0_ptr, arg1_val, arg2_val, buf0_ptr, XBLOCK: tl.constexpr)" \
        in source.source, source.source
    assert "libdevice.pow(" in source.source and "= arg1_val" in source.source


def test_a_cpu_tensor_that_is_not_a_host_scalar_still_runs_as_an_extern_call() -> None:
    text = PROGRAM.replace("%step: f32[]{} cpu", "%step: f32[1]{1} cpu").replace(
        "%t: f32[]{} cpu", "%t: f32[1]{1} cpu")
    text = text.replace("%p: f32[]{} cpu", "%p: f32[1]{1} cpu").replace(
        "%c: f32[]{} cpu", "%c: f32[1]{1} cpu").replace("%s: f32[]{} cpu", "%s: f32[1]{1} cpu")
    notes = _notes(text)
    assert ("aten::div.Tensor", "a cpu tensor in a cuda graph") in notes, notes
    assert ("aten::pow.Scalar", "a cpu tensor in a cuda graph") in notes, notes


def test_identical_kernels_differ_in_a_host_scalar() -> None:
    # a kernel reading a cuda 0-d tensor by pointer does not share the code of one
    # reading a host scalar by value (codegen/dedupe.py compares the buffers)
    from ember.inductor.codegen.dedupe import canonical_form

    text = '''program dialect=core-functional

graph forward(%x: f32[64]{1} cuda:0, %a: f32[]{} DEVICE):
  %y: f32[64]{1} cuda:0 = aten::mul.Tensor(%x, %a)
  return (%y,)  [user_output]
'''
    forms = []
    for device in ("cpu", "cuda:0"):
        compiled = compile_graph(parse_program(text.replace("DEVICE", device)), "forward",
                                 torch.device("cuda"))
        ((kernel, _),) = compiled.kernels
        forms.append(canonical_form(kernel))
    assert forms[0] != forms[1]
    assert [b.host for b in forms[0].buffers] == [False, True, False]


STEP = '''program dialect=core-functional

graph forward(%x: f32[64]{1} cuda:0, %step: f32[]{} cpu):
  %t: f32[]{} cpu = aten::add.Tensor(%step, 1)
  %p: f32[]{} cpu = aten::pow.Scalar(0.9, %t)
  %y: f32[64]{1} cuda:0 = aten::mul.Tensor(%x, %p)
  return (%y, %t)  [mutated_input x, mutated_input step]
'''


def test_a_mutated_cpu_step_counter_is_written_in_place_after_the_kernels() -> None:
    compiled = compile_graph(parse_program(STEP), "forward", torch.device("cuda"))
    wrapper = compiled.wrapper
    # the kernel reads the old step (by value), then the op's out= variant writes the new
    # one into the input, which the graph returns as itself: no copy back
    assert "kernel0(buf0, arg1.item(), buf0)" in wrapper, wrapper
    assert "= aten.add.out(arg1, 1, out=arg1)" in wrapper, wrapper
    assert wrapper.index("kernel0(") < wrapper.index("aten.add.out(")
    assert "return [buf0, arg1]" in wrapper, wrapper
    assert compiled.memory is not None


def test_out_variants() -> None:
    from ember.inductor.lowering.host_scalars import out_variant

    assert out_variant("aten::add.Tensor") == "aten::add.out"
    assert out_variant("aten::pow.Scalar") == "aten::pow.Scalar_out"
    assert out_variant("aten::mul.Scalar") == "aten::mul.Scalar_out"
    assert out_variant("aten::no_such_op.default") is None


def test_a_step_counter_also_returned_unchanged_keeps_its_copy_back() -> None:
    text = STEP.replace("return (%y, %t)  [mutated_input x, mutated_input step]",
                        "return (%y, %t, %step)  [mutated_input x, mutated_input step, "
                        "user_output]")
    wrapper = compile_graph(parse_program(text), "forward", torch.device("cuda")).wrapper
    assert "aten.add.out(" not in wrapper and "aten.add.Tensor(arg1, 1)" in wrapper, wrapper


def test_the_generated_kernel_computes_what_eager_does() -> None:
    # the kernel generated for cuda, run in Triton's interpreter on cpu tensors with the
    # step passed as the wrapper passes it (a Python float): eager's result
    from ember.inductor.codegen.triton.block_tuning import load_code
    from ember.inductor.codegen.triton.generate import generate_triton_kernel

    text = PROGRAM.replace("f64[]{} cpu", "f32[]{} cpu")
    compiled = compile_graph(parse_program(text), "forward", torch.device("cuda"))
    ((kernel, _),) = compiled.kernels
    launch = load_code(kernel, generate_triton_kernel(kernel))
    x, step, lr = torch.randn(64), torch.tensor(4.0), torch.tensor(0.5)
    out = torch.empty(64)
    launch(x, step.item(), lr.item(), out)
    want = x / torch.sqrt(1 - torch.pow(0.9, step + 1)) * lr
    torch.testing.assert_close(out, want)


COUNTERS = '''program dialect=core-functional

graph forward(%x: f32[64]{1} cuda:0, %a: f32[]{} cpu, %b: f32[]{} cpu, %c: f32[]{} cpu):
  %ta: f32[]{} cpu = aten::add.Tensor(%a, 1)
  %tb: f32[]{} cpu = aten::add.Tensor(%b, 1)
  %tc: f32[]{} cpu = aten::add.Tensor(%c, 2)
  %p: f32[]{} cpu = aten::pow.Scalar(0.9, %ta)
  %q: f32[]{} cpu = aten::pow.Scalar(0.9, %tb)
  %r: f32[]{} cpu = aten::mul.Tensor(%p, %q)
  %s: f32[]{} cpu = aten::mul.Tensor(%r, %tc)
  %y: f32[64]{1} cuda:0 = aten::mul.Tensor(%x, %s)
  return (%y, %ta, %tb, %tc)  [mutated_input x, mutated_input a, mutated_input b, mutated_input c]
'''


def test_counters_adding_one_number_are_written_by_one_foreach_call() -> None:
    compiled = compile_graph(parse_program(COUNTERS), "forward", torch.device("cuda"))
    wrapper = compiled.wrapper
    # a and b add 1: one aten call for both (an optimizer's 48 step counters: one call);
    # c adds 2: its own out= write; all after the kernel, which reads the old values
    assert "= aten._foreach_add_.Scalar([arg1, arg2], 1)" in wrapper, wrapper
    assert "= aten.add.out(arg3, 2, out=arg3)" in wrapper, wrapper
    assert wrapper.count("aten.add.out(") == 1, wrapper
    assert wrapper.index("kernel0(") < wrapper.index("aten.add.out(") < wrapper.index(
        "aten._foreach_add_.Scalar(")
    assert "return [buf0, arg1, arg2, arg3]" in wrapper, wrapper
    assert dict(compiled.fallbacks) == {"aten::add.Tensor": 3}
    # the call itself, on cpu tensors as the wrapper makes it: each counter in place
    a, b = torch.tensor(3.0), torch.tensor(7.0)
    versions = (a._version, b._version)
    torch.ops.aten._foreach_add_.Scalar([a, b], 1)
    assert (a.item(), b.item()) == (4.0, 8.0) and a.dtype == torch.float32
    assert a._version > versions[0] and b._version > versions[1]
