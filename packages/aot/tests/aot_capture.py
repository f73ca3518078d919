"""Test helpers: capture functions and modules with the runtime's recorder (the aot
tests do not use ember.frontend), compile them with the aot stage, and run them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember.aot.config import AotConfig
from ember.aot.pipeline import aot_compile
from ember.runtime.callable import ProgramCallable
from ember.runtime.ir import InputKind, InputSpec, Program, verify
from ember.runtime.tracing import GraphRecorder

# input index -> {dim: (min, max)}: the dims a capture makes symbolic
DynamicDims = dict[int, dict[int, tuple[int, int | None]]]


def capture(fn: Callable[..., Any], *inputs: torch.Tensor,
            dynamic: DynamicDims | None = None) -> Program:
    """Record ``fn(*inputs)`` as an aten program (placeholders ``in0``, ``in1``, ...);
    with ``dynamic``, the dims it names are symbolic."""
    rec = GraphRecorder(dynamic=True) if dynamic else GraphRecorder()
    fakes = [_add_input(rec, t, InputSpec(f"in{i}"), (dynamic or {}).get(i))
             for i, t in enumerate(inputs)]
    with rec:
        outs = fn(*fakes)
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    return rec.finish(list(outs))


def _add_input(rec: GraphRecorder, t: torch.Tensor, spec: InputSpec,
               dims: dict[int, tuple[int, int | None]] | None) -> torch.Tensor:
    if dims:
        return rec.add_input(t, spec, dynamic_dims=dims)
    return rec.add_input(t, spec)


def module_inputs(module: torch.nn.Module) -> list[tuple[str, torch.Tensor, InputKind]]:
    """The module's parameters and buffers: (qualified name, tensor, kind)."""
    named = [(k, v, InputKind.PARAMETER) for k, v in module.named_parameters()]
    named += [(k, v, InputKind.BUFFER) for k, v in module.named_buffers()]
    return named


def capture_module(module: torch.nn.Module, *inputs: torch.Tensor,
                   dynamic: DynamicDims | None = None) -> Program:
    """Record ``module(*inputs)`` with its parameters and buffers as placeholders
    (after the user inputs); with ``dynamic``, the input dims it names are symbolic."""
    rec = GraphRecorder(dynamic=True) if dynamic else GraphRecorder()
    fakes = [_add_input(rec, t, InputSpec(f"in{i}"), (dynamic or {}).get(i))
             for i, t in enumerate(inputs)]
    state = {
        name: rec.add_input(t, InputSpec(name.replace(".", "_"), kind, name))
        for name, t, kind in module_inputs(module)
    }
    with rec:
        outs = torch.func.functional_call(module, state, tuple(fakes))
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    return rec.finish(list(outs))


def compile_fn(fn: Callable[..., Any], *inputs: torch.Tensor,
               config: AotConfig | None = None,
               dynamic: DynamicDims | None = None) -> tuple[Program, ProgramCallable]:
    """Capture, run the aot passes, verify the result; return it and its callable."""
    program = aot_compile(capture(fn, *inputs, dynamic=dynamic), config)
    verify(program, "core-functional")
    return program, ProgramCallable(program)


def compile_module(module: torch.nn.Module, *inputs: torch.Tensor,
                   config: AotConfig | None = None,
                   dynamic: DynamicDims | None = None) -> tuple[Program, Callable[..., Any]]:
    """Like :func:`compile_fn` for a module; the callable takes the user inputs and reads
    the module's live parameters and buffers."""
    program = aot_compile(capture_module(module, *inputs, dynamic=dynamic), config)
    verify(program, "core-functional")
    run = ProgramCallable(program)

    def call(*args: torch.Tensor) -> list[Any]:
        state = [t for _, t, _ in module_inputs(module)]
        return run([*args, *state])

    return program, call


def clone_all(values: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [v.clone() for v in values]
