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
``requires_grad``.

Symbolic graphs (Dynamo's with dynamic shapes, ``make_fx(..., tracing_mode="symbolic")``)
record as symbolic programs: a placeholder is symbolic when its example input, or the
fake value in its ``meta`` (``example_value``, ``val``), has symbolic sizes or is a
``SymInt``. The foreign symbols become IR symbols ``s0, s1, ...`` with the foreign
``ShapeEnv``'s ranges (:mod:`ember.runtime.foreign_shapes`), and the graph is recorded
with a symbolic recorder (``GraphRecorder(dynamic=True)``): ``aten.sym_size`` and Python
arithmetic on sizes (``operator.mul``, ``//``, ``sym_max``) become ``sym(...)``
arguments, the relations the ops rely on become the graph's guards. ``SymInt`` inputs
get no placeholder: :meth:`FxImport.program_inputs` checks each against the tensor size
it stands for and drops it. A ``SymInt`` input that is no tensor's size (a Python number
Dynamo made symbolic) is a :class:`~ember.runtime.foreign_shapes.SymbolicImportError`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from ember.runtime._torch import is_fake, pytree
from ember.runtime.checked_calls import CheckedCalls
from ember.runtime.foreign_shapes import (
    ForeignShapes,
    SizeSite,
    SymbolicImportError,
    is_symbolic,
)
from ember.runtime.ir import InputKind, InputSpec, Program, SymInt, verify
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.tracing import GraphRecorder

__all__ = ["BakedScalar", "BakedValueChanged", "FxImport", "SizeInput", "import_fx",
           "is_symbolic", "record_fx"]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)
_META_KEYS = ("example_value", "val")  # Dynamo's and make_fx's/export's fake values


@dataclass(frozen=True)
class SizeInput:
    """A ``SymInt`` input of a symbolic GraphModule: input ``position`` (named
    ``name``) is ``expr``, dim ``site.dim`` of input ``site.position`` when ``expr`` is
    a plain symbol (None for a constant)."""

    position: int
    name: str
    expr: SymInt
    site: SizeSite | None


class BakedValueChanged(ValueError):
    """A baked scalar's value differs from the one the program was compiled for (the
    Dynamo backend compiles the graph again for the new value)."""


@dataclass(frozen=True)
class BakedScalar:
    """Input ``position`` (named ``name``) is a 0-dim float tensor the GraphModule only
    reads with ``.item()`` (Dynamo passes float attributes, a dropout probability or a
    norm's eps, so under ``dynamic=True``): its value at import, ``value``, is baked
    into the program (the recorder's fakes hold no data to read it from)."""

    position: int
    name: str
    value: float


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
        size_inputs: the GraphModule's ``SymInt`` inputs (symbolic graphs), which the
            program has no placeholder for; positions among the inputs left after
            ``baked_scalars``.
        baked_scalars: inputs whose value is baked into the program (no placeholder).
    """

    program: Program
    attributes: tuple[torch.Tensor, ...]
    output_spec: Any
    output_leaves: tuple[Any, ...]
    size_inputs: tuple[SizeInput, ...] = ()
    baked_scalars: tuple[BakedScalar, ...] = ()

    @property
    def drops_inputs(self) -> bool:
        """Whether :meth:`program_inputs` leaves inputs out (size or baked inputs)."""
        return bool(self.size_inputs or self.baked_scalars)

    def program_inputs(self, inputs: Sequence[Any]) -> list[Any]:
        """The GraphModule's ``inputs`` without its baked scalars and ``SymInt``
        inputs, each checked to be the value or size it stands for (a copy of
        ``inputs`` for a graph without them).

        Raises:
            BakedValueChanged: a baked scalar's value changed (a ``ValueError`` naming
                the input and values).
            ShapeError: a size input differs from the tensor size it stands for (names
                both).
        """
        if self.baked_scalars:
            for baked in self.baked_scalars:
                value = inputs[baked.position]
                now = float(value.item()) if isinstance(value, torch.Tensor) else value
                if now != baked.value:
                    raise BakedValueChanged(
                        f"graph input {baked.name!r} was {baked.value} when the graph was "
                        f"compiled and is {now} now: Ember bakes the float attributes "
                        "Dynamo passes as tensors into the program")
            skipped = {baked.position for baked in self.baked_scalars}
            inputs = [v for i, v in enumerate(inputs) if i not in skipped]
        if not self.size_inputs:
            return list(inputs)
        for size in self.size_inputs:
            value = inputs[size.position]
            if size.site is None:
                actual = size.expr
            else:
                actual = int(inputs[size.site.position].shape[size.site.dim])
            if value != actual:
                where = ("" if size.site is None else
                         f" (dim {size.site.dim} of input {size.site.position})")
                raise ShapeError(f"graph input {size.name!r} is {value}, but it stands for "
                                 f"the size {size.expr} = {actual}{where}")
        dropped = {size.position for size in self.size_inputs}
        return [v for i, v in enumerate(inputs) if i not in dropped]

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
            and ``requires_grad``; ``SymInt`` sizes of a symbolic graph.

    Returns:
        The program (see the module docstring for how inputs and outputs map), verified
        as ``aten``; symbolic when the graph is.

    Raises:
        NotImplementedError: a non-tensor example input (other than a ``SymInt`` size
            of a symbolic graph).
        ember.runtime.foreign_shapes.SymbolicImportError: (a ``NotImplementedError``)
            a symbolic input that is no size of a tensor input, or a size outside the
            IR's grammar.
        ValueError: the number of example inputs is not the number of placeholders.
        ember.runtime.tracing.RecordingError: an op or value the IR cannot hold.
        ember.runtime.ir.VerificationError: the recorded program breaks the ``aten``
            rules (a bug).
    """
    return record_fx(graph_module, example_inputs).program


def record_fx(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> FxImport:
    """:func:`import_fx`, also returning the attribute tensors, the output structure and
    the size inputs (:class:`FxImport`). Raises what :func:`import_fx` raises."""
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise ValueError(f"the GraphModule has {len(placeholders)} placeholders but "
                         f"{len(example_inputs)} example inputs were given")
    graph_module, example_inputs, baked = _bake_scalars(graph_module, placeholders,
                                                        example_inputs)
    if baked:
        placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    described = [_described(node, value) for node, value in zip(placeholders, example_inputs)]
    dynamic = any(is_symbolic(d) for d in described)
    for node, value, d in zip(placeholders, example_inputs, described):
        if not isinstance(d, (torch.Tensor, torch.SymInt)) or not dynamic:
            check_static(node.name, value, d)
    attributes = _attribute_inputs(graph_module)
    taken = {n.name for n in placeholders}

    def lift(tensor: torch.Tensor) -> InputSpec | None:
        known = attributes.get(id(tensor))
        if known is None or known[0] is not tensor:
            return None  # a tensor made outside the GraphModule: a constant node
        _, kind, target = known
        prefix = {InputKind.PARAMETER: "p_", InputKind.BUFFER: "b_"}.get(kind, "c_")
        return InputSpec(_fresh_name(prefix + _identifier(target), taken), kind, target)

    size_inputs: tuple[SizeInput, ...] = ()
    if dynamic:
        rec = GraphRecorder(lift=lift, dynamic=True)
        fakes, size_inputs = _symbolic_inputs(rec, placeholders, example_inputs, described)
    else:
        rec = GraphRecorder(lift=lift)
        fakes = [rec.add_input(_own_fake(rec, value), InputSpec(node.name))
                 for node, value in zip(placeholders, example_inputs)]
    with rec, CheckedCalls():  # eager's value checks (one_hot's classes) recorded
        result = graph_module(*fakes)
    leaves, spec = pytree.tree_flatten(result)
    tensors: list[torch.Tensor] = []
    output_leaves: list[Any] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            output_leaves.append(_OutputIndex(len(tensors)))
            tensors.append(leaf)
        elif isinstance(leaf, _SYMBOLIC):
            raise SymbolicImportError(
                f"output leaf {i} of the GraphModule is a symbolic value ({leaf}): Ember "
                "programs return tensors only")
        else:
            output_leaves.append(leaf)
    program = rec.finish(tensors)
    for tensor, input_spec in rec.lifted:
        assert input_spec.target is not None
        program.tensors[input_spec.target] = tensor.detach()
    verify(program, "aten")
    return FxImport(program, tuple(tensor for tensor, _ in rec.lifted), spec,
                    tuple(output_leaves), size_inputs, baked)


def _bake_scalars(
    graph_module: torch.fx.GraphModule, placeholders: list[torch.fx.Node],
    example_inputs: Sequence[Any],
) -> tuple[torch.fx.GraphModule, Sequence[Any], tuple[BakedScalar, ...]]:
    """``graph_module`` without the inputs :class:`BakedScalar` describes (each
    ``.item()`` of one replaced by its example's value), the example inputs left, and
    those inputs; ``graph_module`` itself when there are none."""
    found = tuple(
        BakedScalar(i, node.name, float(value.item()))
        for i, (node, value) in enumerate(zip(placeholders, example_inputs))
        if isinstance(value, torch.Tensor) and not is_fake(value) and value.dim() == 0
        and value.dtype.is_floating_point and not value.requires_grad and node.users
        and all(u.op == "call_method" and u.target == "item" for u in node.users))
    if not found:
        return graph_module, example_inputs, ()
    graph = copy.deepcopy(graph_module.graph)
    copied = [n for n in graph.nodes if n.op == "placeholder"]
    for baked in found:
        node = copied[baked.position]
        for item in list(node.users):
            for user in list(item.users):
                user.args = torch.fx.node.map_arg(
                    user.args, lambda a, n=item, v=baked.value: v if a is n else a)  # type: ignore[misc]
                user.kwargs = torch.fx.node.map_arg(
                    user.kwargs, lambda a, n=item, v=baked.value: v if a is n else a)  # type: ignore[misc]
            graph.erase_node(item)
        graph.erase_node(node)
    skipped = {baked.position for baked in found}
    return (torch.fx.GraphModule(graph_module, graph),
            [v for i, v in enumerate(example_inputs) if i not in skipped], found)


def _described(node: torch.fx.Node, value: Any) -> Any:
    """What describes placeholder ``node``: its example input when that is symbolic,
    else its fake value in ``node.meta`` when that is, else the example input."""
    if is_symbolic(value):
        return value
    for key in _META_KEYS:
        if is_symbolic(node.meta.get(key)):
            return node.meta[key]
    return value


def _symbolic_inputs(
    rec: GraphRecorder, placeholders: list[torch.fx.Node], example_inputs: Sequence[Any],
    described: list[Any],
) -> tuple[list[Any], tuple[SizeInput, ...]]:
    """The recorder's fakes for a symbolic GraphModule's inputs (its ``SymInt`` inputs:
    the recorder's sizes they stand for) and the size inputs."""
    shapes = ForeignShapes([(node.name, d, value) for node, d, value
                            in zip(placeholders, described, example_inputs)])
    fakes: list[Any] = []
    sizes: list[SizeInput] = []
    for position, (node, d) in enumerate(zip(placeholders, described)):
        if isinstance(d, torch.Tensor):
            meta = shapes.meta(node.name, d)
            fakes.append(rec.add_meta_input(meta, InputSpec(node.name),
                                            shapes.symbols_of(meta)))
            continue
        expr = shapes.text(d, f"graph input {node.name!r}")
        site = shapes.sites.get(expr) if isinstance(expr, str) else None
        sizes.append(SizeInput(position, node.name, expr, site))
        fakes.append(None)
    for size in sizes:
        fakes[size.position] = shapes.size_value(size.expr, fakes,
                                                 f"graph input {size.name!r}")
    return fakes, tuple(sizes)


def check_static(name: str, value: Any, example_value: Any = None) -> None:
    """Refuse non-tensor inputs of a static graph (a symbolic number in a graph
    without symbolic tensors, a Python number).

    Raises:
        NotImplementedError: naming the input.
    """
    if isinstance(value, _SYMBOLIC) or isinstance(example_value, _SYMBOLIC):
        raise NotImplementedError(
            f"graph input {name!r} is a symbolic number ({value}) that is no size of a "
            "symbolic tensor input: only tensor inputs are supported")
    if not isinstance(value, torch.Tensor):
        raise NotImplementedError(
            f"graph input {name!r} is a {type(value).__name__}, not a tensor: only tensor "
            "inputs are supported (a Python number would be baked into the program)")


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
