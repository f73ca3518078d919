"""Channels-last training end to end (issue 19, item 1): the zoo's ResNet (residual
blocks, strided and 1x1 convolutions, batch norm, pooling, a linear head) compiled for
training has every ``convolution`` and ``convolution_backward`` take all its tensor
arguments channels-last, no layout-conversion kernel in its backward, and only its
inputs (the image, the weights) converted in its forward; the loss and the gradients
equal eager's. On CUDA (bfloat16) the same is asserted on the extern calls, and the
profile of a training step has no cuDNN layout conversion."""

from __future__ import annotations

import copy

import ember.frontend
import pytest
import torch
import zoo
from ember.aot.stage import AotStage
from ember.frontend import capture
from ember.inductor.loop_ir import Compute, Reduce
from ember.inductor.lowering.extern_args import TensorArg
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.lowering.layout import is_channels_last, same_layout
from ember.inductor.lowering.layout_plan_rules import ARG, LAYOUT_RULES
from ember.inductor.lowering.lowered_graph import LoweredGraph
from ember.inductor.passes import run_passes
from ember.inductor.scheduler import KernelStep, schedule
from ember.runtime.ir import TensorMeta

CONVS = ("aten::convolution.default", "aten::convolution_backward.default")


def resnet(device: str, dtype: torch.dtype) -> tuple[torch.nn.Module, torch.Tensor]:
    module, (x,) = zoo.registry.get("resnet").make(device, dtype, "test")
    return module.train(), x


def lowered_graphs(module: torch.nn.Module, x: torch.Tensor) -> dict[str, LoweredGraph]:
    program = run_passes(AotStage().run(capture(module, x), {}))
    return {name: GraphLowering(program, name).run() for name in ("forward", "backward")}


def tensor_layout(lowered: LoweredGraph, arg: object) -> tuple[tuple[int, ...], tuple[int, ...]]:
    assert isinstance(arg, TensorArg), arg
    if arg.view is not None:
        sizes, strides, _ = arg.view
    else:
        info = lowered.buffers[arg.buffer]
        sizes, strides = info.sizes, info.strides
    return tuple(int(s) for s in sizes), tuple(int(s) for s in strides)


def channels_last_or_degenerate(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Channels-last, or a layout whose channels-last form is row-major too (a 1x1
    weight, a 1x1 spatial map)."""
    from ember.inductor.lowering.layout import channels_last_strides

    return is_channels_last(sizes, strides) or same_layout(
        sizes, strides, channels_last_strides(sizes))


def assert_convolutions_channels_last(graphs: dict[str, LoweredGraph]) -> int:
    """Every convolution's tensor arguments and activation result are channels-last;
    returns how many convolution calls there are."""
    n = 0
    for lowered in graphs.values():
        for call in lowered.extern_nodes:
            if call.target not in CONVS:
                continue
            n += 1
            positions = [p.index for p in LAYOUT_RULES[call.target].channels_last
                         if p.kind == ARG]
            for i in positions:
                arg = call.args[i]
                sizes, strides = tensor_layout(lowered, arg)
                assert channels_last_or_degenerate(sizes, strides), (
                    lowered.graph_name, call.target, i, sizes, strides)
            if call.result_meta[0] is not None:
                _, sizes, strides = call.result_meta[0]
                assert channels_last_or_degenerate(tuple(int(s) for s in sizes),
                                                   tuple(int(s) for s in strides))
    return n


def copy_kernels(lowered: LoweredGraph) -> list[list[str]]:
    """The buffers loaded by each kernel that only copies (a layout conversion)."""
    return [step.kernel.loaded_buffers() for step in schedule(lowered)
            if isinstance(step, KernelStep)
            and not any(isinstance(s, (Compute, Reduce)) for s in step.kernel.body)]


def one_by_one_weights(lowered: LoweredGraph) -> set[str]:
    """The graph inputs whose channels-last layout is row-major too (1x1 weights)."""
    return {g.name for g in lowered.inputs if isinstance(g.meta, TensorMeta)
            and g.meta.ndim == 4 and channels_last_or_degenerate(
                tuple(int(s) for s in g.meta.sizes), tuple(int(s) for s in g.meta.strides))}


def test_resnet_training_on_cpu_runs_channels_last(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU's policy (every convolution channels-last) on CPU tensors: the plan's
    mechanics. The CPU's own policy keeps a dense ResNet in its traced layouts (below)."""
    from ember.inductor.lowering import layout_plan_rules

    monkeypatch.setitem(layout_plan_rules.CONVOLUTION_ANCHORS, "cpu", "all")
    module, x = resnet("cpu", torch.float32)
    graphs = lowered_graphs(module, x)
    assert assert_convolutions_channels_last(graphs) >= 2 * 7  # forward and backward
    assert copy_kernels(graphs["backward"]) == []
    forward = graphs["forward"]
    copied = [b for loads in copy_kernels(forward) for b in loads]
    assert len(copied) == len(set(copied))  # each input converted once
    four_d = {g.name for g in forward.inputs
              if isinstance(g.meta, TensorMeta) and g.meta.ndim == 4}
    assert set(copied) == four_d - one_by_one_weights(forward)  # the image, 3x3 weights


def test_a_dense_resnet_trains_on_cpu_in_its_traced_layouts() -> None:
    """On the CPU only grouped convolutions ask for channels-last
    (``CONVOLUTION_ANCHORS``): oneDNN ran dense stacks slower channels-last, each call
    reordering the row-major weight."""
    module, x = resnet("cpu", torch.float32)
    graphs = lowered_graphs(module, x)
    convs = [call for lowered in graphs.values() for call in lowered.extern_nodes
             if call.target in CONVS]
    assert len(convs) >= 2 * 7
    for lowered in graphs.values():
        for call in lowered.extern_nodes:
            if call.target in CONVS:
                for arg in call.args[:3]:
                    if isinstance(arg, TensorArg):
                        assert not is_channels_last(*tensor_layout(lowered, arg)), call
    assert copy_kernels(graphs["backward"]) == [] and copy_kernels(graphs["forward"]) == []


def test_resnet_training_on_cpu_matches_eager() -> None:
    module, x = resnet("cpu", torch.float32)
    eager = copy.deepcopy(module)
    compiled = ember.frontend.compile(module, backend="inductor", options={"strict": True})
    for _ in range(2):
        got, want = compiled(x), eager(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        got.float().sum().backward()
        want.float().sum().backward()
    for (name, p), q in zip(module.named_parameters(), eager.parameters()):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-3, msg=name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_resnet_training_on_cuda_passes_channels_last_to_cudnn(dtype: torch.dtype) -> None:
    module, x = resnet("cuda", dtype)
    graphs = lowered_graphs(module, x)
    assert assert_convolutions_channels_last(graphs) >= 2 * 7
    assert copy_kernels(graphs["backward"]) == []


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_resnet_training_step_on_cuda_has_no_cudnn_layout_conversion() -> None:
    """The profile of a bfloat16 training step (after a warm-up step) has no cuDNN
    ``nchwToNhwc`` / ``nhwcToNchw`` kernels; loss and gradients close to eager's."""
    from torch.profiler import ProfilerActivity, profile

    module, x = resnet("cuda", torch.bfloat16)
    eager = copy.deepcopy(module)
    compiled = ember.frontend.compile(module, backend="inductor", options={"strict": True})

    def step() -> torch.Tensor:
        module.zero_grad(set_to_none=True)
        loss: torch.Tensor = compiled(x).float().sum()
        torch.autograd.backward(loss)
        return loss

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        loss = step()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    conversions = [n for n in names if "nchwToNhwc" in n or "nhwcToNchw" in n]
    assert conversions == [], conversions
    eager.zero_grad(set_to_none=True)
    want = eager(x).float().sum()
    want.backward()
    torch.testing.assert_close(loss, want, rtol=5e-2, atol=5e-1)
    for (name, p), q in zip(module.named_parameters(), eager.parameters()):
        assert p.grad is not None and q.grad is not None, name
        torch.testing.assert_close(p.grad.float(), q.grad.float(), rtol=1e-1, atol=1e-1,
                                   msg=name)
