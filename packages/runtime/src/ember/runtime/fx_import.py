"""Any FX ``GraphModule`` to an ``aten`` :class:`~ember.runtime.ir.Program`.

:func:`import_fx` runs the GraphModule once on fake tensors under the runtime's recorder
(:class:`~ember.runtime.tracing.GraphRecorder`), so a torch-level graph (``torch.relu``,
``call_module`` of ``nn.Linear``, as Dynamo hands over) and an aten-level graph
(``aten.mm.default``, as ``make_fx`` makes) both become the ATen ops the dispatcher runs.

How the GraphModule maps to the program:

=================================  ==================================================
GraphModule                        program (graph ``forward``)
=================================  ==================================================
``placeholder`` nodes, in order    USER_INPUT placeholders, same names, same order
``get_attr`` of an ``nn.Parameter``  PARAMETER input, target = its qualified name
``get_attr`` of a registered buffer  BUFFER input, target = its qualified name
``get_attr`` of another tensor     CONSTANT input, target = its qualified name
parameters/buffers of submodules   PARAMETER/BUFFER inputs (``call_module`` nodes)
the returned value                 its tensor leaves in ``pytree`` order, USER_OUTPUT
=================================  ==================================================

Attribute inputs follow the placeholders, in the order the graph first reads them; their
values are in ``program.tensors`` (detached), so a caller may pass only the user inputs.
A nested return value (``(a, [b, {"c": c}])``) is flattened as
``torch.utils._pytree`` flattens it; non-tensor leaves (``None``, Python numbers) are not
graph outputs. :func:`record_fx` returns the program together with :class:`FxImport`,
which rebuilds the GraphModule's return value from the program's flat outputs.

Example inputs may be real tensors or fake tensors (of any ``FakeTensorMode``): the
recorder runs on fakes of its own with the same sizes, strides, dtype, device and
``requires_grad``. Symbolic sizes (``SymInt`` inputs, fake tensors with symbolic shapes)
are dynamic shapes, which Ember does not support yet (issue #15): a
``NotImplementedError`` says so, never a program specialized to one shape.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ember.runtime._torch import is_fake, pytree
from ember.runtime.ir import InputKind, InputSpec, Program, verify
from ember.runtime.tracing import GraphRecorder

__all__ = ["FxImport", "import_fx", "is_symbolic", "record_fx"]

DYNAMIC_SHAPES_ISSUE = "issue #15"
_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclass(frozen=True)
class FxImport:
    """A GraphModule recorded as a program, and how to call it like the GraphModule.

    Attributes:
        program: the ``aten`` program (verified).
        attributes: the GraphModule's own tensors behind the attribute inputs (the
            placeholders after the user inputs), live (not detached), in order.
        output_spec: the ``pytree`` spec of the GraphModule's return value.
        output_leaves: its leaves: an ``int`` is the index of a program output, any
            other value is a non-tensor leaf returned as it is.
    """

    program: Program
    attributes: tuple[torch.Tensor, ...]
    output_spec: Any
    output_leaves: tuple[Any, ...]

    def rebuild(self, outputs: Sequence[Any]) -> Any:
        """The GraphModule's return value from the program's flat ``outputs``."""
        leaves = [outputs[leaf] if isinstance(leaf, _OutputIndex) else leaf
                  for leaf in self.output_leaves]
        return pytree.tree_unflatten(leaves, self.output_spec)


class _OutputIndex(int):
    """An output leaf that is the program output of this index (not a Python int the
    GraphModule returned)."""


def import_fx(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Program:
    """Record ``graph_module`` (torch-level or aten-level FX) as an ``aten`` program.

    Args:
        graph_module: the GraphModule; it is run once on fake tensors.
        example_inputs: one value per ``placeholder`` node, in order: real tensors or
            fake tensors (any ``FakeTensorMode``) giving sizes, strides, dtype, device
            and ``requires_grad``.

    Returns:
        The program (see the module docstring for how inputs and outputs map), verified
        as ``aten``.

    Raises:
        NotImplementedError: a symbolic example input or size (dynamic shapes, issue
            #15), or a non-tensor example input.
        ValueError: the number of example inputs is not the number of placeholders.
        ember.runtime.tracing.RecordingError: an op or value the IR cannot hold.
        ember.runtime.ir.VerificationError: the recorded program breaks the ``aten``
            rules (a bug).
    """
    return record_fx(graph_module, example_inputs).program


def record_fx(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> FxImport:
    """:func:`import_fx`, also returning the attribute tensors and the output structure
    (:class:`FxImport`). Raises what :func:`import_fx` raises."""
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError(f"the GraphModule has {len(placeholders)} placeholders but "
                         f"{len(example_inputs)} example inputs were given")
    for node, value in zip(placeholders, example_inputs):
        check_static(node.name, value, node.meta.get("example_value"))
    attributes = _attribute_inputs(graph_module)
    taken = {n.name for n in placeholders}

    def lift(tensor: torch.Tensor) -> InputSpec | None:
        known = attributes.get(id(tensor))
        if known is None or known[0] is not tensor:
            return None  # a tensor made outside the GraphModule: a constant node
        _, kind, target = known
        prefix = {InputKind.PARAMETER: "p_", InputKind.BUFFER: "b_"}.get(kind, "c_")
        return InputSpec(_fresh_name(prefix + _identifier(target), taken), kind, target)

    rec = GraphRecorder(lift=lift)
    fakes = [rec.add_input(_own_fake(rec, value), InputSpec(node.name))
             for node, value in zip(placeholders, example_inputs)]
    with rec:
        result = graph_module(*fakes)
    leaves, spec = pytree.tree_flatten(result)
    tensors: list[torch.Tensor] = []
    output_leaves: list[Any] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            output_leaves.append(_OutputIndex(len(tensors)))
            tensors.append(leaf)
        elif isinstance(leaf, _SYMBOLIC):
            raise NotImplementedError(
                f"output leaf {i} of the GraphModule is a symbolic value ({leaf}): dynamic "
                f"shapes are not supported by Ember yet ({DYNAMIC_SHAPES_ISSUE})")
        else:
            output_leaves.append(leaf)
    program = rec.finish(tensors)
    for tensor, input_spec in rec.lifted:
        assert input_spec.target is not None
        program.tensors[input_spec.target] = tensor.detach()
    verify(program, "aten")
    return FxImport(program, tuple(tensor for tensor, _ in rec.lifted), spec,
                    tuple(output_leaves))


def is_symbolic(value: Any) -> bool:
    """A symbolic number, or a tensor with a symbolic size, stride or offset."""
    if isinstance(value, _SYMBOLIC):
        return True
    return isinstance(value, torch.Tensor) and any(
        isinstance(s, torch.SymInt)
        for s in (*value.shape, *value.stride(), value.storage_offset()))


def check_static(name: str, value: Any, example_value: Any = None) -> None:
    """Refuse symbolic example inputs (dynamic shapes) and other non-tensor inputs.

    Raises:
        NotImplementedError: naming the input and dynamic shapes (issue #15).
    """
    hint = (f"dynamic shapes are not supported by Ember yet ({DYNAMIC_SHAPES_ISSUE}); "
            "with torch.compile pass dynamic=False (each new shape then compiles anew)")
    if isinstance(value, _SYMBOLIC) or isinstance(example_value, _SYMBOLIC):
        raise NotImplementedError(f"graph input {name!r} is a symbolic size ({value}): "
                                  + hint)
    if not isinstance(value, torch.Tensor):
        raise NotImplementedError(
            f"graph input {name!r} is a {type(value).__name__}, not a tensor: only tensor "
            "inputs are supported (a Python number would be baked into the program)")
    if is_symbolic(value):
        raise NotImplementedError(
            f"graph input {name!r} has symbolic sizes {tuple(value.shape)}: " + hint)


def _own_fake(rec: GraphRecorder, value: torch.Tensor) -> torch.Tensor:
    """``value`` itself when real; for a fake tensor of any mode, a fake tensor of the
    recorder's mode with the same metadata (fake tensors of two modes cannot meet)."""
    if not is_fake(value):
        return value
    with rec.fake_mode:
        base = torch.empty_strided(tuple(value.shape), tuple(value.stride()),
                                   dtype=value.dtype, device=value.device)
    if value.requires_grad:
        base.requires_grad_(True)
    return base


def _attribute_inputs(
    graph_module: torch.fx.GraphModule,
) -> dict[int, tuple[torch.Tensor, InputKind, str]]:
    """id(tensor) -> (tensor, kind, qualified name) for every tensor the GraphModule
    holds: its parameters and buffers (also those of submodules) and the tensors its
    ``get_attr`` nodes read."""
    found: dict[int, tuple[torch.Tensor, InputKind, str]] = {}
    for name, param in graph_module.named_parameters():
        found.setdefault(id(param), (param, InputKind.PARAMETER, name))
    for name, buffer in graph_module.named_buffers():
        found.setdefault(id(buffer), (buffer, InputKind.BUFFER, name))
    for node in graph_module.graph.nodes:
        if node.op != "get_attr":
            continue
        value: Any = graph_module
        for part in str(node.target).split("."):
            value = getattr(value, part)
        if isinstance(value, torch.Tensor) and id(value) not in found:
            kind = (InputKind.PARAMETER if isinstance(value, torch.nn.Parameter)
                    else InputKind.CONSTANT)
            found[id(value)] = (value, kind, str(node.target))
    return found


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _fresh_name(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name
