"""Test helpers: trace functional torch code into core-functional programs, compile
them with the inductor stage, and run them through the runtime's loader."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember.inductor.compile import compile_program
from ember.runtime.compiled import load_executor
from ember.runtime.ir import InputSpec, Program
from ember.runtime.tracing import GraphRecorder


def trace(fn: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> Program:
    """A core-functional program of ``fn`` traced on ``inputs`` (fn must be functional
    and use Core ATen ops only, or ops the inductor lowers)."""
    rec = GraphRecorder()
    fakes = [rec.add_input(t, InputSpec(f"in{i}")) for i, t in enumerate(inputs)]
    with rec:
        out = fn(*fakes)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    program = rec.finish(outs)
    program.dialect = "core-functional"
    return program


def compile_and_load(program: Program, **options: Any) -> tuple[Program, Callable[..., list[Any]]]:
    """The compiled program and a callable ``fn(*inputs) -> list of outputs``."""
    options.setdefault("strict", True)  # tests want Ember's own errors, not a fallback
    compiled = compile_program(program, options)
    run = load_executor(compiled, "forward")
    return compiled, lambda *xs: run(list(xs))


def compile_fn(fn: Callable[..., Any], *inputs: torch.Tensor) -> tuple[Program, Callable[..., list[Any]]]:
    return compile_and_load(trace(fn, inputs))


def compile_for(fn: Callable[..., Any], *inputs: torch.Tensor, backend: str
                ) -> tuple[Program, Callable[..., list[Any]]]:
    """:func:`compile_fn` for the ``backend`` fixture's value (Triton: not precompiled)."""
    options = {} if backend == "cpp" else {"precompile": False}
    return compile_and_load(trace(fn, inputs), **options)


def triton_specs(compiled: Program, graph: str = "forward") -> list[Any]:
    """The ``TritonKernelSpec`` of every Triton function of ``graph`` in ``compiled``: each
    kernel, and a split reduction's partial function after it."""
    from ember.runtime.compiled.triton_launcher import spec_from_entry, split_from_entry

    specs = []
    for entry in compiled.metadata["compiled"]["graphs"][graph]["kernels"]:
        spec = spec_from_entry(entry, compiled.files)
        specs.append(spec)
        if "split" in entry["meta"]:
            specs.append(split_from_entry(spec, entry["meta"]["split"]).spec)
    return specs
