"""Static memory of zoo models' inference graphs, compiled for a device this machine may
not have (issue #19 item 5): the wrapper's memory plan, no kernel run.

    python tools/benchlib/static_memory.py hf_gpt2,resnet --device cuda --dtype bfloat16 \\
        [--suite full] [--table] [--train]

Each model is captured and run through aot on the CPU; its tensors' device is then set to
``--device`` and the inductor stage lowers and schedules it for that device (Triton
kernels, the CUDA wrapper), without building kernels. Prints each model's static peak and
ideal (``ember.inductor.codegen.memory_plan``; bytes at the size hints, inputs and
weights not counted); ``--table`` adds the step table ``EMBER_LOGS=memory`` prints.
These are the plan's bytes, not a device's measured peak (``tools/bench.py``'s
``peak MiB`` column on CUDA). ``--train`` compiles the training program (floating inputs
requiring grad, as the bench's ``--train``) and reports the forward's and the backward's
peaks and the bytes the forward saves for the backward: a step holds at most the
larger of the forward's peak and the saved bytes plus the backward's peak.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
import zoo
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.frontend import capture
from ember.inductor.codegen.memory_plan import MemoryReport, format_bytes, plan_memory
from ember.inductor.loop_ir.symbolic_index import size_hints
from ember.inductor.lowering.graph_lowering import GraphLowering
from ember.inductor.passes import run_passes
from ember.inductor.scheduler import schedule
from ember.runtime.ir import Program, TensorMeta, symbolic


def on_device(device: torch.device, value: Any) -> Any:
    """``value`` (a meta, argument or container of them) with CPU devices as ``device``."""
    if isinstance(value, TensorMeta):
        return dataclasses.replace(value, device=device) if value.device.type == "cpu" else value
    if isinstance(value, torch.device):
        return device if value.type == "cpu" else value
    if isinstance(value, (tuple, list)):
        return type(value)(on_device(device, v) for v in value)
    if isinstance(value, dict):
        return {k: on_device(device, v) for k, v in value.items()}
    return value


def inference_program(name: str, device: torch.device, dtype: torch.dtype,
                      suite: str) -> Program:
    """Model ``name``'s core-functional inference program, its tensors on ``device``."""
    module, inputs = zoo.get(name).make(torch.device("cpu"), dtype, suite)
    module.eval()
    with torch.no_grad():
        program = aot_compile(capture(module, *inputs), AotConfig(training=False))
    return run_passes(program_on(program, device))


def training_program(name: str, device: torch.device, dtype: torch.dtype,
                     suite: str) -> Program:
    """Model ``name``'s core-functional training program, its tensors on ``device``."""
    from benchlib.accuracy import training_inputs

    module, inputs = zoo.get(name).make(torch.device("cpu"), dtype, suite)
    module.train()
    from ember.inductor.stage import InductorStage

    # NOTE: with the passes the inductor stage asks the aot stage for, as the pipeline
    program = aot_compile(capture(module, *training_inputs(inputs)), AotConfig(
        training=True, pre_grad_passes=tuple(InductorStage().pre_grad_passes())))
    return run_passes(program_on(program, device))


def program_on(program: Program, device: torch.device) -> Program:
    """``program`` with every CPU device in its metas and arguments set to ``device``
    (changed in place, and returned)."""
    for graph in program.graphs.values():
        for node in graph.nodes:
            node.meta = on_device(device, node.meta)
            node.args = on_device(device, node.args)
            node.kwargs = on_device(device, node.kwargs)
    return program


def static_memory(program: Program, device: torch.device,
                  graph_name: str = "forward") -> MemoryReport:
    """The memory report of ``program``'s graph ``graph_name``, lowered for ``device``."""
    graph = program.graphs[graph_name]
    hints = {s: symbolic.hint_of(s, r) for s, r in graph.symbols.items()}
    with size_hints(hints, graph.symbols):
        lowered = GraphLowering(program, graph_name, device).run()
        _, report = plan_memory(lowered, schedule(lowered), str(device))
    return report


def _train_line(name: str, program: Program, device: torch.device) -> str:
    forward = static_memory(program, device, "forward")
    backward = static_memory(program, device, "backward")
    saved = int(program.metadata.get("aot", {}).get("saved_bytes", 0))
    step = max(forward.peak, saved + backward.peak)
    return (f"{name} training: forward peak {format_bytes(forward.peak)}, saved "
            f"{format_bytes(saved)}, backward peak {format_bytes(backward.peak)}; a step "
            f"holds at most {format_bytes(step)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", help="comma-separated zoo model names")
    parser.add_argument("--device", default="cuda", choices=("cpu", "cuda"))
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--suite", default="full", choices=zoo.SUITES)
    parser.add_argument("--table", action="store_true", help="print each step's bytes too")
    parser.add_argument("--train", action="store_true",
                        help="the training program: forward, saved and backward bytes")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        parser.error(f"unknown dtype {args.dtype!r}")
    device = torch.device(args.device)
    for name in args.models.split(","):
        if args.train:
            print(_train_line(name, training_program(name, device, dtype, args.suite), device))
            continue
        report = static_memory(inference_program(name, device, dtype, args.suite), device)
        print(f"{name} {args.dtype} ({args.suite}, {device}): static peak "
              f"{format_bytes(report.peak)}, ideal {format_bytes(report.ideal)}, "
              f"{len(report.steps)} steps")
        if args.table:
            print(report.format())
    return 0


if __name__ == "__main__":
    sys.exit(main())
