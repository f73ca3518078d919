"""Tracing capture: run the user's Python once on fake tensors under the recorder.

The escape-hatch frontend (non-strict mode). Whatever Python runs is baked in: control
flow takes the branch it took on the example inputs, globals and closures are read once.
What the graph depends on and can be checked cheaply is guarded (see
:mod:`ember.frontend.guards`): argument structure, tensor metadata, non-tensor argument
values, grad mode, module training flags.

Graph inputs (placeholders), in order: the module's parameters (``p_<qualname>``,
labelled PARAMETER with ``target`` the qualified name), its buffers (``b_<qualname>``,
BUFFER), then each tensor leaf of ``(args, kwargs)`` (USER_INPUT, named after the
argument: ``x``, ``batch_input_ids``). Non-tensor arguments are constants of the graph.

Graph outputs: the tensor leaves of the result, in pytree order (a tensor returned twice
is two outputs). Non-tensor leaves (Python numbers, None, strings) are not graph outputs:
they are kept in :class:`OutputLayout` and put back when the result is rebuilt.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from ember.frontend.guards import GuardSet
from ember.frontend.module_state import ModuleLayout, callable_name, module_of
from ember.frontend.pytree import flatten, flatten_with_names, unflatten
from ember.runtime.ir import InputKind, InputSpec, Program
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_source import user_source_location_of_traceback

__all__ = ["CaptureError", "OutputLayout", "TraceCapture", "capture", "trace_capture"]


class CaptureError(RuntimeError):
    """The function could not be captured; the message names the user's source line
    and what went wrong."""


@dataclass
class OutputLayout:
    """How to rebuild the user's result from the graph's flat outputs: leaf ``i`` is graph
    output ``sources[i]`` if that is an int, else the constant ``constants[i]``."""

    spec: Any
    sources: list[int | None]
    constants: list[Any]

    def rebuild(self, outputs: list[Any]) -> Any:
        leaves = [outputs[s] if s is not None else c
                  for s, c in zip(self.sources, self.constants)]
        return unflatten(leaves, self.spec)


@dataclass
class TraceCapture:
    """A captured program and what it takes to call it again.

    ``tensor_leaves``: positions, among the leaves of ``(args, kwargs)``, of the tensors
    that are graph inputs (after the module's parameters and buffers).
    """

    program: Program
    guards: GuardSet
    tensor_leaves: list[int]
    output: OutputLayout


def capture(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Program:
    """Trace ``fn(*args, **kwargs)`` into an ``aten``-dialect Program.

    ``fn`` may be an ``nn.Module`` (its parameters and buffers become PARAMETER/BUFFER
    inputs) or a bound method of one. The inputs themselves are not changed (the code
    runs on fake tensors).

    Raises:
        CaptureError: when the code cannot be traced (data-dependent Python control
            flow, ``.item()``, an op the fake tensors cannot run), naming the line.
    """
    return trace_capture(fn, module_of(fn), args, kwargs).program


def trace_capture(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    layout: ModuleLayout | None = None,
) -> TraceCapture:
    """Trace ``fn(*args, **kwargs)``; ``module``'s state (read through ``layout``, built
    if None) becomes graph inputs. See the module docstring for the conventions.

    Raises:
        CaptureError: as :func:`capture`.
    """
    if module is not None and layout is None:
        layout = ModuleLayout(module)
    leaves, spec = flatten((args, kwargs))
    guards = GuardSet()
    guards.add_spec(spec)
    guards.add_grad_mode(torch.is_grad_enabled())
    rec = GraphRecorder()
    taken: set[str] = set()
    fake_state = _state_inputs(rec, guards, module, layout, taken)
    names = _unique(flatten_with_names(args, _parameter_names(fn))
                    + flatten_with_names(kwargs))
    fake_leaves, tensor_leaves = _argument_inputs(rec, guards, leaves, names, taken)
    fake_args, fake_kwargs = unflatten(fake_leaves, spec)
    try:
        with layout.swapped(fake_state) if layout is not None else nullcontext(), rec:
            result = fn(*fake_args, **fake_kwargs)
    except Exception as e:
        where = user_source_location_of_traceback(e.__traceback__)
        at = f" at {where}: {where.text}" if where is not None else ""
        raise CaptureError(
            f"could not trace {callable_name(fn)}{at}\n  {type(e).__name__}: {e}{_hint(e)}"
        ) from e
    outputs, layout_of_result = _split_result(result)
    program = rec.finish(outputs)
    if layout is not None:
        for slot, value in zip(layout.slots, layout.read()):
            program.tensors[slot.qualname] = value.detach()
    return TraceCapture(program, guards, tensor_leaves, layout_of_result)


def _state_inputs(
    rec: GraphRecorder,
    guards: GuardSet,
    module: torch.nn.Module | None,
    layout: ModuleLayout | None,
    taken: set[str],
) -> list[torch.Tensor]:
    """Placeholders and guards for the module's parameters and buffers; their fakes."""
    if module is None or layout is None:
        return []
    guards.add_training("self", module)
    fakes = []
    for i, (slot, value) in enumerate(zip(layout.slots, layout.read())):
        prefix = "p_" if slot.kind is InputKind.PARAMETER else "b_"
        name = _take(prefix + _identifier(slot.qualname), taken)
        fakes.append(rec.add_input(value, InputSpec(name, slot.kind, slot.qualname)))
        guards.add_tensor(f"S[{i}]", slot.qualname, value)
    return fakes


def _argument_inputs(
    rec: GraphRecorder, guards: GuardSet, leaves: list[Any], names: list[str], taken: set[str]
) -> tuple[list[Any], list[int]]:
    """Placeholders and guards for the argument leaves: the leaves with tensors replaced
    by fakes, and the positions of the tensors."""
    fake_leaves: list[Any] = []
    tensor_leaves: list[int] = []
    for i, (leaf, name) in enumerate(zip(leaves, names)):
        if isinstance(leaf, torch.Tensor):
            fake_leaves.append(rec.add_input(leaf, InputSpec(_take(name, taken))))
            tensor_leaves.append(i)
            guards.add_tensor(f"L[{i}]", name, leaf)
        else:
            fake_leaves.append(leaf)
            guards.add_value(f"L[{i}]", name, leaf)
    if len(tensor_leaves) > 1:
        guards.add_aliasing([f"L[{i}]" for i in tensor_leaves],
                            [names[i] for i in tensor_leaves],
                            [leaves[i] for i in tensor_leaves])
    return fake_leaves, tensor_leaves


def _split_result(result: Any) -> tuple[list[torch.Tensor], OutputLayout]:
    """The result's tensor leaves (graph outputs) and how to rebuild the result."""
    out_leaves, out_spec = flatten(result)
    outputs: list[torch.Tensor] = []
    sources: list[int | None] = []
    constants: list[Any] = []
    for leaf in out_leaves:
        if isinstance(leaf, torch.Tensor):
            sources.append(len(outputs))
            constants.append(None)
            outputs.append(leaf)
        else:
            sources.append(None)
            constants.append(leaf)
    return outputs, OutputLayout(out_spec, sources, constants)


def _hint(error: Exception) -> str:
    kind = type(error).__name__
    if "DataDependent" in kind or "DynamicOutputShape" in kind:
        return ("\n  hint: the Python code depends on a tensor's value (if/while on a "
                "tensor, .item(), .tolist(), boolean-mask indexing); tracing runs on "
                "tensors without values. Express it with tensor ops (torch.where) or use "
                "options={'capture': 'strict'}.")
    return ""


def _parameter_names(fn: Callable[..., Any]) -> list[str] | None:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = [p.name for p in params if p.kind is p.VAR_POSITIONAL]
    return names + [f"{star[0]}_{i}" for i in range(32)] if star else names


def _identifier(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in text)


def _take(name: str, taken: set[str]) -> str:
    candidate, i = name, 1
    while candidate in taken:
        candidate, i = f"{name}_{i}", i + 1
    taken.add(candidate)
    return candidate


def _unique(names: list[str]) -> list[str]:
    taken: set[str] = set()
    return [_take(n, taken) for n in names]
