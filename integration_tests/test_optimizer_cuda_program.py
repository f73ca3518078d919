"""The code a compiled Adam/AdamW step gets on CUDA, generated on a machine without a GPU
(issue #19: on the H200 the step copied into CUDA tensors and ran ~20 eager ops per
parameter, 11.15 ms a 100M-parameter step against torch.compile's 1.36 ms).

The step is captured on the CPU as ``ember.frontend.compile(opt.step)`` captures it
(after an eager first step, so the state exists: the steady-state graph), then every
tensor but the 0-d ``state['step']`` counters is moved to ``cuda:0``, as on a GPU, where
eager keeps ``step`` on the CPU. The aot and inductor stages then generate the wrapper
and the Triton kernels (not built). Expected: one kernel per group of same-shaped
parameters (the update horizontally fused), the CPU step read as a kernel argument
(``argN.item()``, the bias corrections computed in the kernel), every CUDA input written
in place, nothing copied to the device; the only extern calls are the new step counters,
computed on the CPU into the counters themselves, all in one call
(``aten._foreach_add_.Scalar([argN, ...], 1)``)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import ember.frontend as ef
import ember.runtime.pipeline as pipeline
import pytest
import torch
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.inductor.compile import CompiledGraph, compile_graph
from ember.inductor.passes import run_passes
from ember.runtime.ir import Program, TensorMeta
from torch import nn

pytest.importorskip("triton")

CUDA = torch.device("cuda", 0)


def _on_cuda(value: Any) -> Any:
    """``value`` (a meta or a tuple of them) with every CPU tensor but a 0-d one on
    ``cuda:0`` (eager's non-capturable optimizer keeps ``state['step']`` on the CPU)."""
    if isinstance(value, TensorMeta) and value.device.type == "cpu" and len(value.sizes):
        return dataclasses.replace(value, device=CUDA)
    if isinstance(value, tuple):
        return tuple(_on_cuda(v) for v in value)
    return value


def _captured_step(monkeypatch: pytest.MonkeyPatch, cls: type[torch.optim.Optimizer],
                   layers: list[tuple[int, int]], **kwargs: Any) -> Program:
    """The aten program ``ef.compile(opt.step)`` captures for the steady-state step."""
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(i, o) for i, o in layers))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt = cls(model.parameters(), **kwargs)
    opt.step()  # eager: the state exists, the captured step is the steady-state one
    captured: list[Program] = []
    run_stages = pipeline.run_stages

    def record(program: Program, stages: Any, options: Any) -> Program:
        captured.append(program)
        return run_stages(program, stages, options)

    monkeypatch.setattr(pipeline, "run_stages", record)
    ef.compile(opt.step, backend="eager")()
    (program,) = captured
    return program


def _compiled_for_cuda(program: Program) -> CompiledGraph:
    for graph in program.graphs.values():
        for node in graph.nodes:
            node.meta = _on_cuda(node.meta)
    core = run_passes(aot_compile(program, AotConfig(training=False)))
    return compile_graph(core, "forward", CUDA)


@pytest.fixture
def adamw(monkeypatch: pytest.MonkeyPatch) -> Iterator[CompiledGraph]:
    # two weights [8, 8], two biases [8]: two iteration spaces
    program = _captured_step(monkeypatch, torch.optim.AdamW, [(8, 8), (8, 8)], lr=1e-2,
                             foreach=True)
    yield _compiled_for_cuda(program)


def _launches(wrapper: str) -> list[str]:
    return re.findall(r"^    (kernel\d+)\(", wrapper, re.M)


def _counters(wrapper: str) -> list[str]:
    """The inputs the wrapper's one ``aten._foreach_add_.Scalar([...], 1)`` adds one to."""
    (listed,) = re.findall(r"= aten\._foreach_add_\.Scalar\(\[([^\]]*)\], 1\)$", wrapper,
                           re.M)
    return listed.split(", ")


def test_the_adamw_step_is_one_kernel_per_parameter_shape(adamw: CompiledGraph) -> None:
    wrapper = adamw.wrapper
    assert _launches(wrapper) == ["kernel0", "kernel1"], wrapper
    # the only extern call: the four cpu step counters' new values, written into them
    # on the cpu after the kernels, all in one foreach call (one aten call, not one a
    # counter; the runtime copies nothing back)
    assert dict(adamw.fallbacks) == {"aten::add.Tensor": 4}, wrapper
    counters = _counters(wrapper)
    assert len(counters) == 4, wrapper
    assert "aten.add.out(" not in wrapper, wrapper
    assert wrapper.index("kernel1(") < wrapper.index("aten._foreach_add_.Scalar(")
    assert wrapper.count("# fallback:") == 1, wrapper
    returned = wrapper[wrapper.index("    return ["):]
    assert all(f" {a}," in returned or f" {a}]" in returned for a in counters), returned
    # the counters written are the ones the kernels read the step from
    assert sorted(re.findall(r"(arg\d+)\.item\(\)", wrapper)) == sorted(counters), wrapper


def test_the_adamw_step_copies_nothing_to_the_gpu(adamw: CompiledGraph) -> None:
    wrapper = adamw.wrapper
    # every cuda input (params, exp_avg, exp_avg_sq: 12) written in place by a kernel
    assert wrapper.count("written in place (returned as itself: no copy back)") == 12, wrapper
    for text in ("copy_(", ".to(", ".cuda(", "_to_copy", "lift_fresh", " = _empty("):
        assert text not in wrapper, (text, wrapper)
    # each step counter reaches its kernel as a scalar argument, read on the host
    assert len(re.findall(r"arg\d+\.item\(\)", wrapper)) == 4, wrapper
    assert adamw.memory is not None


def test_the_kernels_compute_the_bias_corrections_from_the_step(adamw: CompiledGraph) -> None:
    for kernel, source in adamw.kernels:
        hosts = [b.name for b in kernel.buffers if b.host]
        assert len(hosts) == 2, kernel.buffers  # the step of each of its two parameters
        signature = source.meta["signature"]
        assert isinstance(signature, dict)
        assert [signature[f"{h}_val"] for h in hosts] == ["fp32", "fp32"], signature
        assert source.source.count("libdevice.pow(") == 4, source.source  # beta1, beta2 ** step
        assert "tl.load(arg" in source.source


@pytest.mark.parametrize("name", ["adam", "adamw_foreach"])
def test_a_step_of_many_parameters_launches_one_kernel_per_shape(
        monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    cls, kwargs = {"adam": (torch.optim.Adam, {"lr": 1e-3, "foreach": False}),
                   "adamw_foreach": (torch.optim.AdamW, {"lr": 1e-3, "foreach": True})}[name]
    program = _captured_step(monkeypatch, cls, [(16, 16)] * 6, **kwargs)
    compiled = _compiled_for_cuda(program)
    # 12 parameter tensors, two shapes: two kernels (tools/bench_optimizer.py's 48
    # tensors of two shapes are two kernels too)
    assert len(_launches(compiled.wrapper)) == 2, compiled.wrapper
    assert dict(compiled.fallbacks) == {"aten::add.Tensor": 12}, compiled.wrapper
    assert len(set(_counters(compiled.wrapper))) == 12, compiled.wrapper  # in one call
