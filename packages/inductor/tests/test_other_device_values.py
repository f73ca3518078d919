"""A tensor on another device than the graph's (``torch.zeros(k)`` without a device in
a CUDA program makes a CPU tensor) never enters a kernel of the graph's device: its
nodes run as extern ATen calls, counted as fallbacks with the reason, and an input
traced on the CPU is checked for the CPU. A CPU 0-d float32 tensor read by a CUDA op is
the exception: a host scalar the kernel takes by value (``tests/test_host_scalars.py``)."""

from __future__ import annotations

import torch
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.runtime.ir import parse_program

PROGRAM = '''program dialect=core-functional

graph forward(%x: f32[4]{1} cuda:0, %s: f32[]{} cpu):
  %zeros: f32[4]{1} cpu = aten::zeros.default([4], dtype=torch.float32, device=device("cpu"), pin_memory=False)
  %a: f32[4]{1} cpu = aten::add.Tensor(%zeros, 1)
  %b: f32[4]{1} cuda:0 = aten::mul.Tensor(%x, 2)
  %c: f32[4]{1} cuda:0 = aten::mul.Tensor(%b, %s)
  return (%a, %c)  [user_output, user_output]
'''


def test_values_on_another_device_run_as_extern_calls() -> None:
    lowered = GraphLowering(parse_program(PROGRAM), "forward", torch.device("cuda")).run()
    assert dict(lowered.fallbacks) == {"aten::zeros.default": 1, "aten::add.Tensor": 1}
    notes = [(getattr(n, "target", type(n).__name__), getattr(n, "note", "")) for n in lowered.nodes]
    # x * 2 * s: one kernel on the graph's device, s (a cpu 0-d tensor) a host scalar
    assert notes == [("aten::zeros.default", "a cpu tensor in a cuda graph"),
                     ("aten::add.Tensor", "a cpu tensor in a cuda graph"),
                     ("PointwiseBuffer", "")]


def test_the_wrapper_checks_a_cpu_input_for_the_cpu_and_allocates_kernels_on_cuda() -> None:
    from ember.inductor.compile import compile_graph

    wrapper = compile_graph(parse_program(PROGRAM), "forward", torch.device("cuda")).wrapper
    assert "arg1.is_cpu" in wrapper and "arg0.is_cuda" in wrapper, wrapper
    assert "# fallback: aten::zeros.default (a cpu tensor in a cuda graph)" in wrapper, wrapper
    assert "device=torch.device('cpu')" in wrapper, wrapper
    assert "buf2 = _empty((4,), (1,), torch.float32)" in wrapper
    assert "    _empty = _allocator('cuda')" in wrapper


def test_a_program_traced_on_the_cpu_compiled_for_cuda_is_retargeted_whole() -> None:
    # the device option moves every value: nothing is "on another device" then
    text = PROGRAM.replace(" cuda:0", " cpu").replace(
        '  %zeros: f32[4]{1} cpu = aten::zeros.default([4], dtype=torch.float32, '
        'device=device("cpu"), pin_memory=False)\n  %a: f32[4]{1} cpu = aten::add.Tensor(%zeros, 1)\n',
        "  %a: f32[4]{1} cpu = aten::add.Tensor(%x, 1)\n")
    lowered = GraphLowering(parse_program(text), "forward", torch.device("cuda")).run()
    assert dict(lowered.fallbacks) == {}


RETURNS_A_CPU_CONSTANT = '''program dialect=core-functional
tensor _folded.forward.add: f32[] cpu

graph forward(%x: f32[4]{1} cuda:0):
  %add: f32[]{} cpu = constant _folded.forward.add
  %b: f32[4]{1} cuda:0 = aten::mul.Tensor(%x, 2)
  return (%add, %b)  [user_output, user_output]
'''


def test_a_cpu_constant_returned_by_a_cuda_graph_is_copied_on_the_cpu() -> None:
    # a compiled optimizer step returning its new cpu step counter (``torch.tensor(0.0)
    # + 1``, folded to a constant): a kernel would have made the copy on the GPU
    program = parse_program(RETURNS_A_CPU_CONSTANT)
    program.tensors["_folded.forward.add"] = torch.tensor(1.0)
    lowered = GraphLowering(program, "forward", torch.device("cuda")).run()
    notes = [(getattr(n, "target", type(n).__name__), getattr(n, "note", "")) for n in lowered.nodes]
    assert notes == [("aten::clone.default", "a cpu output of a cuda graph"),
                     ("PointwiseBuffer", "")], notes
    assert dict(lowered.fallbacks) == {"aten::clone.default": 1}


ATTENTION_BACKWARD = '''program dialect=core-functional

graph backward(%q: f32[1, 1, 8, 4]{32,32,4,1} cuda:0, %out: f32[1, 1, 8, 4]{32,32,4,1} cuda:0, %lse: f32[1, 1, 8]{8,8,1} cuda:0, %seed: i64[]{} cuda:0, %offset: i64[]{} cuda:0, %g: f32[1, 1, 8, 4]{32,32,4,1} cuda:0):
  %bw: (f32[1, 1, 8, 4]{32,32,4,1} cuda:0, f32[1, 1, 8, 4]{32,32,4,1} cuda:0, f32[1, 1, 8, 4]{32,32,4,1} cuda:0, f32[0]{1} cuda:0) = aten::_scaled_dot_product_efficient_attention_backward.default(%g, %q, %q, %q, None, %out, %lse, %seed, %offset, 0.0, [True, True, True, False], True)
  return (%bw.0, %bw.1, %bw.2)  [user_output, user_output, user_output]
'''


def test_a_0d_input_only_extern_calls_read_is_not_checked_for_a_device() -> None:
    """SDPA's philox seed and offset are CPU tensors outside CUDA-graph capture, device
    tensors inside, traced on the device: the backward's wrapper leaves their device to
    aten (a kernel never reads them) and checks every other input's."""
    from ember.inductor.compile import compile_graph

    program = parse_program(ATTENTION_BACKWARD)
    wrapper = compile_graph(program, "backward", torch.device("cuda")).wrapper
    assert "arg0.is_cuda" in wrapper and "arg2.is_cuda" in wrapper, wrapper
    assert "arg3.is_" not in wrapper and "arg4.is_" not in wrapper, wrapper
    assert "_check_input(arg3, 'arg3', torch.int64, (), (), None)" in wrapper, wrapper
