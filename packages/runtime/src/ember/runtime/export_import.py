"""``import_exported``: a ``torch.export`` program -> an ``aten`` :class:`Program`.

The exported graph is re-run node by node on fake tensors under the runtime's
:class:`~ember.runtime.tracing.GraphRecorder`, so the result is exactly what Ember's own
capture records (ops after autograd and CompositeImplicit decompositions, in-place ops
kept in place for the aot stage to functionalize) and passes ``verify(p, "aten")``.
``torch.export`` is never imported: the ``ExportedProgram`` is read through its public
attributes (``graph_module``, ``graph_signature``, ``state_dict``, ``constants``,
``range_constraints``).

How the export signature maps to Ember's (one row per export kind):

=======================  =====================================================
export input kind        Ember placeholder (same name as the export placeholder)
=======================  =====================================================
``USER_INPUT``           ``USER_INPUT``; a non-tensor one (``torch.export`` bakes
                         its value into the graph) is no placeholder
``PARAMETER``            ``PARAMETER``, target the FQN, value from ``state_dict``
``BUFFER`` (persistent)  ``BUFFER``, value from ``state_dict``
``BUFFER`` (not)         ``BUFFER``, value from ``constants``
``CONSTANT_TENSOR``      ``CONSTANT``, value from ``constants``
``CUSTOM_OBJ``/``TOKEN`` refused (``NotImplementedError``)
=======================  =====================================================

=========================================  ============================================
export output kind                         Ember
=========================================  ============================================
``USER_OUTPUT``, ``LOSS_OUTPUT``           a ``USER_OUTPUT``; a non-tensor one (a
                                           constant of the export) is left out
``BUFFER_MUTATION``,                       ``aten::copy_`` of the new value into the
``PARAMETER_MUTATION``,                    placeholder (the aot stage turns it into a
``USER_INPUT_MUTATION``                    ``MUTATED_INPUT`` output, the runtime copies
                                           it back)
``GRADIENT_TO_*``, ``TOKEN``, others       refused (``NotImplementedError``)
=========================================  ============================================

Mutations that the export graph keeps in place (``torch.export.export``'s default IR:
``add_`` on a user input, ``batch_norm`` writing its running statistics) are recorded as
they are. Graph nodes the recorder runs: ``call_function`` of an ATen operator overload,
``operator.getitem``, Python arithmetic on sizes (:data:`_SIZE_FUNCTIONS`) and the
``wrap_with_set_grad_enabled`` region (its submodule runs under that grad mode); any
other node (another higher-order op, ``get_attr`` outside such a region) is a
``NotImplementedError`` naming the node, its target and its source line.

Dynamic shapes (``dynamic_shapes=`` with ``torch.export.Dim``): the export's symbols
become IR symbols ``s0, s1, ...`` (in the order they first appear as an input's size)
with the ranges the export was traced under (a ``Dim``'s ``min``/``max``; sizes 0 and 1
specialise, so a range starts at 2 at least) and the example sizes as hints
(:mod:`ember.runtime.foreign_shapes`); the graph is recorded with a symbolic recorder,
so the program is symbolic, ``sym_size`` and size arithmetic become ``sym(...)``
arguments, and the relations its ops rely on become its guards.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from ember.runtime._torch import is_op_overload
from ember.runtime.foreign_shapes import ForeignShapes, is_symbolic
from ember.runtime.ir import InputKind, InputSpec, Program, SourceLocation, verify
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_source import is_library_file

__all__ = ["import_exported"]

_REQUIRED_ATTRIBUTES = ("graph_module", "graph_signature", "state_dict", "constants")

# export input kind name -> (Ember kind, where its value lives: "state_dict",
# "constants", "buffer" (state_dict if persistent else constants) or None for user inputs)
_INPUT_KINDS: dict[str, tuple[InputKind, str | None]] = {
    "USER_INPUT": (InputKind.USER_INPUT, None),
    "PARAMETER": (InputKind.PARAMETER, "state_dict"),
    "BUFFER": (InputKind.BUFFER, "buffer"),
    "CONSTANT_TENSOR": (InputKind.CONSTANT, "constants"),
}
_USER_OUTPUT_KINDS = {"USER_OUTPUT", "LOSS_OUTPUT"}
_MUTATION_OUTPUT_KINDS = {"BUFFER_MUTATION", "PARAMETER_MUTATION", "USER_INPUT_MUTATION"}
_GRAD_REGION = "wrap_with_set_grad_enabled"

_SIZE_FUNCTIONS: frozenset[Callable[..., Any]] = frozenset({
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
    operator.truediv, operator.neg, operator.pow, operator.eq, operator.ne, operator.lt,
    operator.le, operator.gt, operator.ge, operator.and_, operator.or_, math.ceil,
    math.floor, torch.sym_max, torch.sym_min, torch.sym_not, torch.sym_float,
    torch.sym_int, torch.sym_ite,
})
"""Python functions on sizes a symbolic export graph calls (``sym_size * 2``); run on
the recorder's own sizes, they become ``sym(...)`` arguments of the ops that use them."""


def import_exported(ep: Any) -> Program:
    """Turn a ``torch.export.ExportedProgram`` into an ``aten``-dialect Program.

    Placeholders keep the export's names and order (parameters, buffers, constants, then
    user inputs) with their kinds and FQN targets; parameter, buffer and constant values
    go into ``program.tensors`` detached but not copied (they share memory with the
    ExportedProgram's, so running the program in memory updates its buffers as the
    exported module would); input mutations become in-place writes of the placeholders
    (see the module docstring's tables). The program's user inputs and outputs are the
    export's flat tensor inputs and outputs, in order: non-tensor arguments and results
    are constants ``torch.export`` baked into the graph, and are left out. The result goes on
    through the stages like a captured program: ``save(program, "m.ember")``, then
    ``python -m ember.aot`` and ``python -m ember.inductor``, then ``load_artifact``
    (which takes the user inputs positionally), or ``compile_program(program)``.

    Parameters keep ``requires_grad`` (user inputs have none), so the aot stage builds a
    joint forward/backward program under grad mode; pass the aot option
    ``aot.training=false`` for an inference program.

    The conversion runs in process on an ``ExportedProgram`` object. It never reads a
    ``.pt2`` file: those hold pickled weights, and unpickling runs code.

    Args:
        ep: the ``ExportedProgram`` (``torch.export.export(model, args)``), static or
            with ``dynamic_shapes`` (the program is then symbolic).

    Raises:
        TypeError: ``ep`` is a path or lacks an ``ExportedProgram`` attribute (the
            message names what is missing).
        NotImplementedError: an input or output kind Ember has no counterpart for, or a
            graph node that is not an ATen operator (the message names the node); a
            ``SymbolicImportError`` for a symbolic size outside the IR's grammar.
        RecordingError: an op the recorder cannot represent.
    """
    _check_exported(ep)
    graph_module = ep.graph_module
    graph = graph_module.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    input_specs = list(ep.graph_signature.input_specs)
    if [_arg_name(s.arg) for s in input_specs] != [n.name for n in placeholders]:
        raise ValueError("the ExportedProgram's graph_signature.input_specs do not name the "
                         "graph's placeholders in order; is the ExportedProgram consistent?")
    examples = [n.meta.get("val") for n in placeholders]
    shapes = None
    if any(is_symbolic(v) for v in examples):
        shapes = ForeignShapes([(n.name, v, v) for n, v in zip(placeholders, examples)])
    rec = GraphRecorder(dynamic=shapes is not None)
    env: dict[str, Any] = {}
    state: dict[str, torch.Tensor] = {}  # target -> real value, for program.tensors
    for spec, node, example in zip(input_specs, placeholders, examples):
        if spec.kind.name == "USER_INPUT" and not isinstance(example, torch.Tensor):
            env[node.name] = example  # NOTE: export specialized it; the graph holds it
            continue
        kind, value = _input_value(ep, spec, node)
        target = None if kind is InputKind.USER_INPUT else str(spec.target)
        input_spec = InputSpec(node.name, kind, target)
        if shapes is not None and is_symbolic(example):
            meta = shapes.meta(node.name, example)
            env[node.name] = rec.add_meta_input(meta, input_spec, shapes.symbols_of(meta))
        else:
            env[node.name] = rec.add_input(value, input_spec)
        if target is not None:
            state[target] = value
    output_node = next(n for n in graph.nodes if n.op == "output")
    with rec:
        _run_nodes(graph.nodes, env, rec, graph_module)
        outputs = _outputs(ep, output_node, env, input_specs)
    program = rec.finish(outputs)
    for target, value in state.items():
        program.tensors[target] = value.detach()
    verify(program, "aten")
    return program


def _check_exported(ep: Any) -> None:
    if isinstance(ep, (str, bytes)) or hasattr(ep, "__fspath__"):
        raise TypeError(
            f"import_exported takes an ExportedProgram object, not the path {ep!r}: it "
            "never loads .pt2 files (their weights are pickled, and unpickling runs code); "
            "export the model in this process with torch.export.export(model, args)")
    missing = [a for a in _REQUIRED_ATTRIBUTES if not hasattr(ep, a)]
    signature = getattr(ep, "graph_signature", None)
    if signature is not None:
        missing += [f"graph_signature.{a}" for a in ("input_specs", "output_specs")
                    if not hasattr(signature, a)]
    if hasattr(ep, "graph_module") and not hasattr(ep.graph_module, "graph"):
        missing.append("graph_module.graph")
    if missing:
        raise TypeError(
            f"import_exported needs a torch.export.ExportedProgram; the "
            f"{type(ep).__name__} passed has no {', '.join(missing)}")


def _arg_name(arg: Any) -> str | None:
    name = getattr(arg, "name", None)
    return name if isinstance(name, str) else None


def _input_value(ep: Any, spec: Any, node: Any) -> tuple[InputKind, torch.Tensor]:
    """The Ember kind and a real tensor standing for export input ``spec``."""
    kind_name = spec.kind.name
    entry = _INPUT_KINDS.get(kind_name)
    if entry is None:
        raise NotImplementedError(
            f"export input {node.name!r} is a {kind_name} input; Ember programs take "
            "tensors only (user inputs, parameters, buffers, constant tensors)")
    kind, source = entry
    if source is None:
        example = node.meta.get("val")
        assert isinstance(example, torch.Tensor)  # non-tensor user inputs are skipped
        if is_symbolic(example):
            return kind, example  # NOTE: recorded from its metadata (add_meta_input)
        # NOTE: the export's fake value belongs to another fake mode; the recorder needs a
        # real tensor (or its own fake) of the same sizes, strides, dtype and device. Its
        # requires_grad is not the argument's (an in-place write of a value that requires
        # grad sets it on the placeholder's value): user inputs take none.
        return kind, torch.empty_strided(tuple(example.shape), tuple(example.stride()),
                                         dtype=example.dtype, device=example.device)
    if source == "buffer":
        source = "state_dict" if getattr(spec, "persistent", True) else "constants"
    table: Mapping[str, Any] = getattr(ep, source)
    stored = table.get(spec.target)
    if not isinstance(stored, torch.Tensor):
        raise ValueError(f"export input {node.name!r} ({kind_name} {spec.target!r}) has "
                         f"no tensor in the ExportedProgram's {source}")
    return kind, stored


def _run_nodes(nodes: Iterable[Any], env: dict[str, Any], rec: GraphRecorder,
               owner: Any) -> None:
    """Run the call nodes of an FX graph on the fakes of ``env`` (inside the recorder)."""
    for node in nodes:
        if node.op in ("placeholder", "output"):
            continue
        rec.set_source(_source_of(node))
        if node.op == "get_attr":
            env[node.name] = _attribute(owner, node)
            continue
        target = node.target
        if node.op != "call_function":
            raise _unsupported(node, "only call_function nodes are supported")
        args = _load(node.args, env)
        kwargs = _load(node.kwargs, env)
        if target is operator.getitem:
            env[node.name] = args[0][args[1]]
        elif is_op_overload(target) or target in _SIZE_FUNCTIONS:
            env[node.name] = target(*args, **kwargs)
        elif getattr(target, "__name__", None) == _GRAD_REGION:
            env[node.name] = _run_grad_region(node, args, rec)
        else:
            raise _unsupported(node, "not an ATen operator overload or arithmetic on sizes")
    rec.set_source(None)


def _run_grad_region(node: Any, args: Any, rec: GraphRecorder) -> Any:
    """``wrap_with_set_grad_enabled(enabled, submodule, *inputs)``: the submodule's graph
    under that grad mode."""
    enabled, submodule, *inputs = args
    graph = getattr(submodule, "graph", None)
    if not isinstance(enabled, bool) or graph is None:
        raise _unsupported(node, "a grad-mode region without a submodule")
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(inputs):
        raise _unsupported(node, f"its submodule takes {len(placeholders)} inputs, "
                                 f"{len(inputs)} given")
    env = {p.name: v for p, v in zip(placeholders, inputs)}
    with torch.set_grad_enabled(enabled):
        _run_nodes(graph.nodes, env, rec, submodule)
    output = next(n for n in graph.nodes if n.op == "output")
    result = _load(output.args[0], env)
    return result


def _attribute(owner: Any, node: Any) -> Any:
    value = owner
    for part in str(node.target).split("."):
        value = getattr(value, part, None)
    if not isinstance(value, torch.nn.Module):
        raise _unsupported(node, "get_attr of something other than a region's submodule "
                                 "(tensors should be lifted to inputs by torch.export)")
    return value


def _outputs(ep: Any, output_node: Any, env: dict[str, Any],
             input_specs: list[Any]) -> list[torch.Tensor]:
    """The user outputs; mutation outputs are written into their placeholders here."""
    values = list(output_node.args[0])
    specs = list(ep.graph_signature.output_specs)
    if len(specs) != len(values):
        raise ValueError(f"the ExportedProgram's signature labels {len(specs)} outputs but "
                         f"its graph returns {len(values)}")
    placeholder_of = _mutation_targets(input_specs)
    outputs: list[torch.Tensor] = []
    for i, (spec, value) in enumerate(zip(specs, values)):
        kind_name = spec.kind.name
        loaded = _load(value, env)
        if kind_name in _USER_OUTPUT_KINDS:
            if isinstance(loaded, torch.Tensor):
                outputs.append(loaded)  # NOTE: anything else is a constant of the export
        elif kind_name in _MUTATION_OUTPUT_KINDS:
            name = placeholder_of.get((kind_name, str(spec.target)))
            if name is None:
                raise ValueError(f"output {i} of the export mutates {spec.target!r}, "
                                 "which is no input of the ExportedProgram")
            env[name].copy_(loaded)
        else:
            raise NotImplementedError(
                f"output {i} of the export is a {kind_name} output; Ember imports forward "
                "programs (user outputs and input mutations) only")
    return outputs


def _mutation_targets(input_specs: list[Any]) -> dict[tuple[str, str], str]:
    """(mutation output kind, its target) -> the placeholder it writes."""
    result: dict[tuple[str, str], str] = {}
    for spec in input_specs:
        name = _arg_name(spec.arg)
        if name is None:
            continue
        kind = spec.kind.name
        if kind == "BUFFER":
            result[("BUFFER_MUTATION", str(spec.target))] = name
        elif kind == "PARAMETER":
            result[("PARAMETER_MUTATION", str(spec.target))] = name
        elif kind == "USER_INPUT":
            result[("USER_INPUT_MUTATION", name)] = name
    return result


def _load(value: Any, env: dict[str, Any]) -> Any:
    """``value`` (an FX argument) with each graph node replaced by what it computed."""
    if isinstance(value, torch.fx.Node):
        return env[value.name]
    if isinstance(value, (list, tuple)):
        return type(value)(_load(v, env) for v in value)
    if isinstance(value, dict):
        return {k: _load(v, env) for k, v in value.items()}
    return value


_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


def _source_of(node: Any) -> SourceLocation | None:
    """The innermost user frame (outside torch/Ember/stdlib and generated code, else the
    innermost frame) of the node's ``stack_trace``, as Ember's capture would record it."""
    trace = node.meta.get("stack_trace")
    if not isinstance(trace, str):
        return None
    lines = trace.strip().splitlines()
    user: SourceLocation | None = None
    innermost: SourceLocation | None = None
    for i, line in enumerate(lines):
        match = _FRAME.search(line)
        if match is None:
            continue
        text = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if _FRAME.search(text) is not None:
            text = ""  # a frame without its source line
        innermost = SourceLocation(match["file"], int(match["line"]), match["function"], text)
        # NOTE: "<eval_with_key>" frames are code torch generated (graph modules)
        if not is_library_file(innermost.file) and not innermost.file.startswith("<"):
            user = innermost
    return user if user is not None else innermost


def _unsupported(node: Any, why: str) -> NotImplementedError:
    target: Callable[..., Any] | str = node.target
    name = getattr(target, "__name__", None) or str(target)
    where = _source_of(node)
    at = f" (from {where}: {where.text})" if where is not None else ""
    return NotImplementedError(
        f"cannot import export node {node.name!r} ({node.op} {name}){at}: {why}")
