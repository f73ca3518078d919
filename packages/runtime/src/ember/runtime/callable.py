"""ProgramCallable: a compiled program as a plain function over flat inputs.

It runs the ``forward`` graph through an executor and applies the signature's epilogue:
outputs labelled MUTATED_INPUT are copied back into the input they belong to and hidden
from the caller; SAVED_TENSOR outputs (kept for a backward graph) are hidden too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ember.runtime.executor import ExecutorFactory, make_executor
from ember.runtime.interpreter import bind_inputs
from ember.runtime.ir import OutputKind, OutputSpec, Program

_HIDDEN_KINDS = (OutputKind.MUTATED_INPUT, OutputKind.SAVED_TENSOR)


class ProgramCallable:
    """Run ``program``'s forward graph: ``outputs = fn(inputs)``.

    ``inputs`` is the flat list of every forward placeholder's value in order (or only
    the user inputs, the parameters/buffers/constants then come from
    ``program.tensors``; see :func:`ember.runtime.interpreter.bind_inputs`). The result
    is the flat list of user-visible outputs in order.

    Raises (at construction):
        ValueError: the signature's output specs do not match the graph's outputs, or a
            MUTATED_INPUT spec names no placeholder.
    """

    def __init__(
        self, program: Program, executor_factory: ExecutorFactory = make_executor
    ) -> None:
        self.program = program
        graph = program.forward
        n_outputs = len(graph.output_values)
        specs = program.signature.outputs.get("forward") or [OutputSpec()] * n_outputs
        if len(specs) != n_outputs:
            raise ValueError(
                f"forward graph has {n_outputs} outputs but the signature labels {len(specs)}"
            )
        positions = {p.name: i for i, p in enumerate(graph.placeholders)}
        self._copy_back: list[tuple[int, int]] = []  # (output index, input index)
        self._visible: list[int] = []
        for i, spec in enumerate(specs):
            if spec.kind == OutputKind.MUTATED_INPUT:
                if spec.target not in positions:
                    raise ValueError(
                        f"output {i} is a mutated input of {spec.target!r}, "
                        "which is not a placeholder of the forward graph"
                    )
                self._copy_back.append((i, positions[spec.target]))
            if spec.kind not in _HIDDEN_KINDS:
                self._visible.append(i)
        self._forward = executor_factory(program, "forward")

    def __call__(self, inputs: Sequence[Any]) -> list[Any]:
        full = bind_inputs(self.program, "forward", inputs)
        outputs = self._forward(full)
        for out_index, in_index in self._copy_back:
            _copy_into(full[in_index], outputs[out_index])
        return [outputs[i] for i in self._visible]


def _copy_into(destination: torch.Tensor, value: torch.Tensor) -> None:
    """Write a mutated input's new value back into it.

    NOTE: a destination that does not require grad (a buffer such as batch norm's
    running_mean) is written under no_grad, as eager torch's in-kernel update does;
    otherwise copy_ would attach it to the autograd graph of ``value``.
    """
    if destination.requires_grad:
        destination.copy_(value)
    else:
        with torch.no_grad():
            destination.copy_(value)
