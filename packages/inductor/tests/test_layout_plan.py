"""The layout plan (``lowering/layout_plan.py``) on a conv-BN-ReLU stack compiled for
training on the CPU: every ``convolution`` and ``convolution_backward`` gets all its
tensor arguments channels-last, the saved activations are stored channels-last by the
forward kernels that produce them, the backward converts nothing, and the forward
converts only its inputs (the image and the weights, once each); loss and gradients
equal eager's."""

from __future__ import annotations

import copy
import re

import pytest
import torch
from ember.inductor.buffers import ExternCall
from ember.inductor.loop_ir import Compute, Reduce
from ember.inductor.lowering.extern_args import ExternArg, TensorArg
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.layout import is_channels_last
from ember.inductor.lowering.layout_plan import layout_plan
from ember.inductor.lowering.lowered_graph import LoweredGraph
from ember.inductor.passes import run_passes
from ember.inductor.scheduler import KernelStep, schedule
from ember.runtime.ir import Program, TensorMeta, ValueRef, print_program
from torch import nn

# the GPU's convolution layouts on CPU tensors (conftest.gpu_convolution_layouts)
pytestmark = pytest.mark.usefixtures("gpu_convolution_layouts")

pytest.importorskip("ember.aot")
pytest.importorskip("ember.frontend")

CONVS = ("aten::convolution.default", "aten::convolution_backward.default")


def conv_bn_relu_stack(channels: int = 8) -> nn.Module:
    """Three 3x3 convolutions with batch norm and ReLU, a max pool between the second
    and the third."""
    torch.manual_seed(0)
    c = channels
    return nn.Sequential(
        nn.Conv2d(3, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c, 2 * c, 3, padding=1, bias=True), nn.BatchNorm2d(2 * c), nn.ReLU(),
    ).train()


def training_program(module: nn.Module, x: torch.Tensor) -> Program:
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    return AotStage().run(capture(module, x), {})


def strides_of(lowered: LoweredGraph, arg: ExternArg) -> tuple[tuple[int, ...], tuple[int, ...]]:
    assert isinstance(arg, TensorArg), arg
    if arg.view is not None:
        sizes, strides, _ = arg.view
        return tuple(int(s) for s in sizes), tuple(int(s) for s in strides)
    info = lowered.buffers[arg.buffer]
    return tuple(int(s) for s in info.sizes), tuple(int(s) for s in info.strides)


def convolution_calls(lowered: LoweredGraph) -> list[ExternCall]:
    return [n for n in lowered.extern_nodes if n.target in CONVS]


def copy_kernels(lowered: LoweredGraph) -> list[tuple[str, ...]]:
    """The buffers each kernel that only copies (no arithmetic: a layout conversion)
    loads."""
    return [tuple(step.kernel.loaded_buffers()) for step in schedule(lowered)
            if isinstance(step, KernelStep)
            and not any(isinstance(s, (Compute, Reduce)) for s in step.kernel.body)]


@pytest.fixture(scope="module")
def lowered_stack() -> tuple[Program, LoweredGraph, LoweredGraph]:
    from ember.inductor.lowering import layout_plan_rules

    with pytest.MonkeyPatch.context() as patch:  # module scope: before gpu_convolution_layouts
        patch.setitem(layout_plan_rules.CONVOLUTION_ANCHORS, "cpu", "all")
        program = run_passes(training_program(conv_bn_relu_stack(), torch.randn(2, 3, 8, 8)))
        return (program, GraphLowering(program, "forward").run(),
                GraphLowering(program, "backward").run())


def test_every_convolution_gets_channels_last_arguments(
        lowered_stack: tuple[Program, LoweredGraph, LoweredGraph]) -> None:
    _, forward, backward = lowered_stack
    seen = []
    for lowered in (forward, backward):
        for call in convolution_calls(lowered):
            n_tensors = 2 if call.target == "aten::convolution.default" else 3
            for i, arg in enumerate(call.args[:n_tensors]):
                sizes, strides = strides_of(lowered, arg)
                assert is_channels_last(sizes, strides), (call.target, i, sizes, strides)
            # the results come back channels-last as declared: no conversion after them
            _, sizes, strides = call.result_meta[0] or (None, (), ())
            if call.result_meta[0] is not None:
                assert is_channels_last(sizes, strides), (call.target, call.result_meta)
            seen.append(call.target)
    assert seen == [CONVS[0]] * 3 + [CONVS[1]] * 3


def test_only_the_inputs_are_converted_once_and_the_backward_converts_nothing(
        lowered_stack: tuple[Program, LoweredGraph, LoweredGraph]) -> None:
    _, forward, backward = lowered_stack
    # forward inputs: the image and the three weights (parameters come first)
    image = forward.inputs[-1].name
    weights = [g.name for g in forward.inputs if g.meta is not None
               and len(getattr(g.meta, "sizes", ())) == 4 and g.name != image]
    assert len(weights) == 3
    copied = [buf for loads in copy_kernels(forward) for buf in loads]
    assert sorted(copied) == sorted([image, *weights]), copied
    assert copy_kernels(backward) == []


def test_saved_tensors_are_stored_channels_last_by_their_producers(
        lowered_stack: tuple[Program, LoweredGraph, LoweredGraph]) -> None:
    program, forward, _ = lowered_stack
    text = re.sub(r"  #.*", "", print_program(program))
    # the backward expects them channels-last ...
    for line in ("%saved_convolution: f32[2, 8, 8, 8]{512,1,64,8} cpu",
                 "%saved_convolution_2: f32[2, 16, 4, 4]{256,1,64,16} cpu",
                 "%saved_input: f32[2, 3, 8, 8]{192,1,24,3} cpu",
                 "%saved_p_3_weight: f32[8, 8, 3, 3]{72,1,24,8} cpu"):
        assert line in text, line
    # ... and the forward returns them so: the convolutions' own results, and the
    # input copies its convolutions read (no second copy)
    specs = program.signature.outputs["forward"]
    backward_inputs = {n.name: n.meta for n in program.graphs["backward"].placeholders}
    conv_results = {c.outputs[0] for c in convolution_calls(forward)}
    conv_inputs = {a.buffer for c in convolution_calls(forward) for a in c.args[:2]
                   if isinstance(a, TensorArg)}
    n_checked = 0
    for spec, out in zip(specs, forward.outputs):
        meta = backward_inputs.get(spec.target or "")
        if not isinstance(meta, TensorMeta) or meta.ndim != 4:
            continue
        _, strides = strides_of(forward, out)
        assert strides == tuple(meta.strides), (spec.target, strides, meta)
        assert isinstance(out, TensorArg) and out.buffer in conv_results | conv_inputs
        n_checked += 1
    # 3 convolutions' results, the image, 3 weights, and the first ReLU (the second
    # convolution's input, saved for its weight's gradient: aot.save_conv_inputs)
    assert n_checked == 8


def test_training_matches_eager_with_eager_strides_for_the_caller() -> None:
    import ember.frontend

    model = conv_bn_relu_stack()
    eager = copy.deepcopy(model)
    compiled = ember.frontend.compile(model, backend="inductor", options={"strict": True})
    x = torch.randn(2, 3, 16, 16)
    for _ in range(2):  # the second step reads the running statistics the first wrote
        got, want = compiled(x), eager(x)
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        got.sum().backward()
        want.sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert p.grad is not None and q.grad is not None
        assert p.grad.stride() == q.grad.stride(), name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-3, msg=name)
    for (name, b), c in zip(model.named_buffers(), eager.buffers()):
        torch.testing.assert_close(b, c, rtol=1e-4, atol=1e-4, msg=name)


def test_plan_keeps_what_the_caller_sees() -> None:
    """Graph inputs, the forward's user output, the tangent and the gradients keep their
    traced layouts; a saved input is saved through a channels-last clone."""
    program = training_program(conv_bn_relu_stack(), torch.randn(2, 3, 8, 8))
    _, plan = layout_plan(program)
    assert sorted(plan.saved_clones) == ["input", "p_0_weight", "p_3_weight", "p_7_weight"]
    pinned = set(plan.pinned)
    assert {"forward:input", "forward:relu_2", "backward:tangent_0",
            "backward:convolution_backward.1"} <= pinned, pinned
    assert "saved_convolution" in plan.channels_last["backward"]
    assert "convolution" in plan.channels_last["forward"]
    # the program passed in is not changed
    assert "{512,1,64,8}" not in print_program(program)


def test_inference_program_keeps_its_outputs_and_weights() -> None:
    """Without a backward nothing is saved: the plan only marks the values between the
    convolutions, and the weights stay as they are (passed row-major)."""
    from helpers import trace

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = torch.relu(torch.nn.functional.conv2d(x, w, padding=1))
        return torch.nn.functional.conv2d(y, w, padding=1)

    _, plan = layout_plan(trace(f, [torch.randn(1, 4, 5, 5), torch.randn(4, 4, 3, 3)]))
    assert plan.saved_clones == []
    assert plan.channels_last["forward"] == ["convolution", "relu"]
    assert "forward:convolution_1" in plan.pinned  # the output


@pytest.mark.parametrize("channels_last_model", [False, True],
                         ids=["row_major", "channels_last_model"])
def test_the_aot_stage_keeps_saved_layouts_in_the_backward(channels_last_model: bool) -> None:
    """Each backward placeholder of a saved tensor has the meta of the forward value it
    receives: as traced (a channels-last model and input trace channels-last saved
    tensors), and after the plan."""
    model = conv_bn_relu_stack()
    x = torch.randn(2, 3, 8, 8)
    if channels_last_model:
        for param in model.parameters():  # what module.to(memory_format=...) does
            if param.dim() == 4:
                param.data = param.data.contiguous(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    program = training_program(model, x)
    planned, _ = layout_plan(program)
    for p in (program, planned):
        backward = {n.name: n.meta for n in p.graphs["backward"].placeholders}
        forward = {n.name: n.meta for n in p.forward.nodes}
        saved = [(spec.target, value) for spec, value in
                 zip(p.signature.outputs["forward"], p.forward.output_values)
                 if spec.kind.value == "saved_tensor"]
        assert len(saved) >= 7
        for target, value in saved:
            assert isinstance(value, ValueRef) and value.index is None
            assert backward[target or ""] == forward[value.node], target
    conv = program.forward.node("convolution").meta
    assert isinstance(conv, TensorMeta)
    assert (conv.strides == (512, 1, 64, 8)) == channels_last_model


def run_training_step(program: Program, x: torch.Tensor, options: dict[str, object]
                      ) -> list[torch.Tensor]:
    """The compiled forward and backward of ``program`` run by hand: the forward on the
    program's tensors and ``x``, the backward on what it saved and a ones tangent for
    the user output (zeros for the others); returns the gradients."""
    from ember.runtime.compiled import load_executor
    from ember.runtime.ir import InputKind, OutputKind
    from helpers import compile_and_load

    compiled, run_forward = compile_and_load(program, **options)
    inputs = [x if spec.kind == InputKind.USER_INPUT else
              program.tensors[spec.target or ""].clone()
              for spec in program.signature.inputs["forward"]]
    outputs = run_forward(*inputs)
    saved = {spec.target: out for spec, out in
             zip(program.signature.outputs["forward"], outputs)
             if spec.kind == OutputKind.SAVED_TENSOR}
    backward_inputs = []
    for node in program.graphs["backward"].placeholders:
        meta = node.meta
        assert isinstance(meta, TensorMeta)
        if node.name in saved:
            backward_inputs.append(saved[node.name])
        else:
            fill = 1.0 if node.name == "tangent_0" else 0.0
            backward_inputs.append(torch.full([int(s) for s in meta.sizes], fill))
    run_backward = load_executor(compiled, "backward")
    return [g for g in run_backward(backward_inputs) if isinstance(g, torch.Tensor)]


def test_triton_kernels_of_the_channels_last_step_match_cpp() -> None:
    """The channels-last training kernels generated for Triton (run by its interpreter)
    give the C++ kernels' gradients."""
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu

    program = training_program(conv_bn_relu_stack(4), torch.randn(2, 3, 8, 8))
    x = torch.randn(2, 3, 8, 8)
    want = run_training_step(program, x, {})
    with triton_for_cpu():
        got = run_training_step(program, x, {"precompile": False})
    assert len(got) == len(want) == 10  # one a parameter
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_channels_last_step_kernels_compile_for_sm90(dtype: torch.dtype) -> None:
    """Every Triton kernel of the channels-last training step (forward and backward)
    compiles for an sm_90 target (no GPU needed)."""
    pytest.importorskip("triton")
    from ember.inductor.codegen.triton.testing import triton_for_cpu
    from ember.runtime.compiled.triton_aot import compile_for_target
    from ember.runtime.compiled.triton_launcher import spec_from_entry
    from helpers import compile_and_load

    model = conv_bn_relu_stack(4).to(dtype)
    program = training_program(model, torch.randn(2, 3, 8, 8, dtype=dtype))
    with triton_for_cpu():
        compiled, _ = compile_and_load(program, precompile=False)
    graphs = compiled.metadata["compiled"]["graphs"]
    specs = [spec_from_entry(e, compiled.files)
             for name in ("forward", "backward") for e in graphs[name]["kernels"]]
    assert len(specs) >= 10
    for spec in specs:
        assert ".target sm_90" in compile_for_target(spec).asm["ptx"], spec.name


def test_symbolic_batch_is_planned_too() -> None:
    """With a symbolic batch the saved tensors get channels-last strides (they do not
    involve the batch symbol), and training matches eager at several batch sizes."""
    import ember.frontend
    from ember.aot.stage import AotStage
    from ember.frontend import capture

    model = conv_bn_relu_stack()
    traced = capture(model, torch.randn(2, 3, 8, 8),
                     dynamic_shapes={"input": {0: ("b", 2, None)}})
    planned, _ = layout_plan(AotStage().run(traced, {}))
    text = print_program(planned)
    assert "%saved_convolution_2: f32[s0, 16, 4, 4]{256,1,64,16} cpu" in text
    assert "%saved_input: f32[s0, 3, 8, 8]{192,1,24,3} cpu" in text

    eager = copy.deepcopy(model)
    compiled = ember.frontend.compile(model, backend="inductor", dynamic=True,
                                      options={"strict": True})
    for n in (2, 3):
        x = torch.randn(n, 3, 8, 8)
        got, want = compiled(x), eager(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        got.sum().backward()
        want.sum().backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-3, msg=name)
