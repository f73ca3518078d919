"""The reference interpreter: runs a graph node by node with eager torch ops.

It is the executor of the ``eager`` and ``aot_eager`` backends and the oracle that
compiled code is tested against. One method per opcode, dispatched by name::

    outputs = Interpreter(program).run(x, y)
    outputs = run_program(program, [x, y], graph="forward")

Inputs bind to the graph's placeholders in order (see :func:`bind_inputs` for the
parameters a caller may leave out). A value is dropped as soon as its last reader has run,
so peak memory follows the graph's live ranges, not its length.

A graph with size symbols (``graph.symbols``) runs for any input sizes its symbols'
ranges and guards allow: each run binds the symbols from the inputs
(:class:`~ember.runtime.ir.symbolic.SymbolBinder`, a ``ShapeError`` naming the input, dim
and range or guard otherwise), evaluates ``SymExpr`` arguments over them, and binds each
unbacked symbol (``u0``, a data-dependent size) from the result of the node that defines
it when that node has run. A static graph pays none of this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from ember.runtime.ir import (
    Argument,
    Graph,
    InputKind,
    IRFormatError,
    Node,
    Program,
    TensorMeta,
    ValueRef,
    resolve_op,
)
from ember.runtime.custom_ops import check_results, is_custom_operator
from ember.runtime.ir.effects import check_may_run
from ember.runtime.ir.graph import SymExpr
from ember.runtime.ir.symbolic import SymbolBinder, UnbackedSite, UnboundSymbolError, evaluate

_DEFAULTED_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT)


class InterpreterError(RuntimeError):
    """An operator failed while interpreting a graph; the message names the node, its
    operator and the user source line it came from."""


def bind_inputs(
    program: Program,
    graph_name: str,
    user_inputs: Sequence[Any],
    extra: Mapping[str, Any] | None = None,
) -> list[Any]:
    """The full input list of graph ``graph_name``, one value per placeholder, in order.

    If ``user_inputs`` already has one value per placeholder it is returned as a list
    unchanged. Otherwise it holds only the inputs of the placeholders that are *not*
    labelled PARAMETER, BUFFER or CONSTANT in ``program.signature.inputs[graph_name]``,
    in placeholder order; each labelled placeholder takes ``extra[spec.target]`` when
    given (e.g. a module's live parameters), else ``program.tensors[spec.target]``.

    Raises:
        ValueError: the number of inputs matches neither form, or a labelled input has
            no value in ``extra`` nor in ``program.tensors``.
    """
    graph = program.graphs[graph_name]
    placeholders = graph.placeholders
    if len(user_inputs) == len(placeholders):
        return list(user_inputs)
    specs = {s.name: s for s in program.signature.inputs.get(graph_name, [])}
    defaulted = [
        p for p in placeholders if p.name in specs and specs[p.name].kind in _DEFAULTED_KINDS
    ]
    expected_user = len(placeholders) - len(defaulted)
    if len(user_inputs) != expected_user:
        raise ValueError(
            f"graph {graph_name!r} takes {len(placeholders)} inputs "
            f"({expected_user} without its parameters/buffers/constants), "
            f"got {len(user_inputs)}"
        )
    given = iter(user_inputs)
    bound: list[Any] = []
    for p in placeholders:
        spec = specs.get(p.name)
        if spec is None or spec.kind not in _DEFAULTED_KINDS:
            bound.append(next(given))
            continue
        key = spec.target if spec.target is not None else p.name
        if extra is not None and key in extra:
            bound.append(extra[key])
        elif key in program.tensors:
            bound.append(program.tensors[key])
        else:
            raise ValueError(
                f"graph {graph_name!r}: no value for {spec.kind.value} input {p.name!r} "
                f"(target {key!r} is not in program.tensors)"
            )
    return bound


class SizeBinding:
    """Binds the size symbols of a symbolic graph from each call's inputs, looking only
    at the placeholders with symbolic sizes (a model's static parameters cost nothing
    per call; the interpreter's ops and the compiled wrapper see their sizes anyway).

    Attributes:
        binder: the :class:`SymbolBinder` of those placeholders and every other node
            (for unbacked symbols), with the graph's symbols and guards.
        positions: their positions among the graph's placeholders.
    """

    def __init__(self, graph: Graph) -> None:
        placeholders = graph.placeholders
        self.positions = tuple(
            i for i, p in enumerate(placeholders)
            if isinstance(p.meta, TensorMeta) and not (
                p.meta.is_static and all(isinstance(s, int) for s in p.meta.strides)))
        others = [n for n in graph.nodes if n.op != "placeholder"]
        self.binder = SymbolBinder(Graph([*(placeholders[i] for i in self.positions),
                                          *others], graph.symbols, graph.guards))

    def bind(self, inputs: Sequence[Any]) -> dict[str, int]:
        """The value of every backed symbol, from ``inputs`` (one per placeholder).

        Raises:
            ShapeError: as :meth:`SymbolBinder.bind`.
        """
        return self.binder.bind([inputs[i] for i in self.positions])


class Interpreter:
    """Runs one graph of a program with eager torch operators.

    Subclasses may override an opcode method (``placeholder``, ``call``, ``constant``,
    ``get_attr``, ``output``) or :meth:`run_node`; each opcode method takes the node and
    returns its value.

    A program read from a file (``program.untrusted_origin`` set) runs only operators
    that compute on tensors: one with effects outside them (files, printing, custom
    operators; the tables of :mod:`ember.runtime.ir.effects`) is refused here, before
    anything runs, unless ``allow_effects=True`` or the file was loaded with
    ``trusted=True``.

    Attributes:
        symbols: during a run of a symbolic graph, the value of each size symbol bound
            so far (empty for a static graph).

    Raises (at construction):
        KeyError: the program has no graph ``graph``.
        IRFormatError: a ``call`` node names an operator torch does not know.
        UntrustedProgramError: a loaded program calls an operator with effects outside
            its tensors and ``allow_effects`` is False (names the node and the opt-ins).
    """

    def __init__(self, program: Program, graph: str = "forward", *,
                 allow_effects: bool = False) -> None:
        if graph not in program.graphs:
            raise KeyError(f"program has no graph {graph!r}; graphs: {sorted(program.graphs)}")
        check_may_run(program, graph, allow_effects=allow_effects)
        self.program = program
        self.graph_name = graph
        self.graph: Graph = program.graphs[graph]
        self.env: dict[str, Any] = {}
        self._ops = {n.name: resolve_op(n.target) for n in self.graph.nodes if n.op == "call"}
        self._free_after = _last_uses(self.graph)
        self._unchecked_custom = {n.name for n in self.graph.nodes
                                  if n.op == "call" and is_custom_operator(n.target)}
        self._tensors_on_device: dict[str, torch.Tensor] = {}
        self._pending_inputs: list[Any] = []
        self.symbols: dict[str, int] = {}
        self._sizes: SizeBinding | None = None
        self._unbacked: dict[str, list[UnbackedSite]] = {}
        if self.graph.symbols or self.graph.guards:
            self._sizes = SizeBinding(self.graph)
            for site in self._sizes.binder.unbacked.values():
                self._unbacked.setdefault(site.node, []).append(site)

    # -- driving ---------------------------------------------------------------------

    def run(self, *inputs: Any, extra: Mapping[str, Any] | None = None) -> list[Any]:
        """Run the graph on ``inputs`` (bound by :func:`bind_inputs`); return the output
        values in order.

        Raises:
            ValueError: wrong number of inputs.
            ShapeError: (a ``ValueError``) the input sizes break a symbol's range or a
                guard of a symbolic graph, or an unbacked size computed from the data
                breaks its range (names the input or node, dim, symbol and range or
                guard).
            InterpreterError: an operator failed (names node and source line).
        """
        self._pending_inputs = bind_inputs(self.program, self.graph_name, inputs, extra)
        self.symbols = {} if self._sizes is None else self._sizes.bind(self._pending_inputs)
        self._pending_inputs.reverse()  # pop() from the end in placeholder order
        self.env = {}
        result: list[Any] = []
        try:
            for node in self.graph.nodes:
                value = self.run_node(node)
                if node.op == "output":
                    result = value
                    break
                self.env[node.name] = value
                if node.name in self._unbacked:
                    self._bind_unbacked(node, value)
                for name in self._free_after.get(node.name, ()):
                    del self.env[name]
        finally:
            self.env = {}
            self._pending_inputs = []
        return result

    def _bind_unbacked(self, node: Node, value: Any) -> None:
        """Read the unbacked symbols ``node`` defines off its result ``value``."""
        assert self._sizes is not None
        for index in sorted({site.index for site in self._unbacked[node.name]},
                            key=lambda i: -1 if i is None else i):
            result = value if index is None else value[index]
            sizes = tuple(result.shape) if isinstance(result, torch.Tensor) else (
                int(result),)  # an int result (.item()) is its symbol's value
            self._sizes.binder.bind_unbacked(self.symbols, node.name, index, sizes)

    def run_node(self, node: Node) -> Any:
        """Evaluate one node through the method named after its opcode."""
        method = getattr(self, node.op, None)
        if method is None:
            raise IRFormatError(f"node %{node.name}: unknown opcode {node.op!r}")
        return method(node)

    # -- opcodes ---------------------------------------------------------------------

    def placeholder(self, node: Node) -> Any:
        return self._pending_inputs.pop()

    def call(self, node: Node) -> Any:
        op = self._ops[node.name]
        where = f" (from {node.source})" if node.source is not None else ""
        try:
            args = [self.load(a) for a in node.args]
            kwargs = {k: self.load(v) for k, v in node.kwargs.items()}
        except UnboundSymbolError as e:
            raise InterpreterError(
                f"graph {self.graph_name!r}, node %{node.name} = {node.target}{where}: "
                f"{e}; no input and no earlier node's result has it as a size"
            ) from e
        try:
            result = op(*args, **kwargs)
        except Exception as e:
            raise InterpreterError(
                f"graph {self.graph_name!r}, node %{node.name} = {node.target}{where} "
                f"failed: {type(e).__name__}: {e}"
            ) from e
        if node.name in self._unchecked_custom:  # its first run: the fake kernel's word
            self._unchecked_custom.discard(node.name)
            check_results(node, result)
        return result

    def constant(self, node: Node) -> Any:
        return self._stored_tensor(node)

    def get_attr(self, node: Node) -> Any:
        return self._stored_tensor(node)

    def output(self, node: Node) -> list[Any]:
        values = node.args[0]
        if not isinstance(values, tuple):
            raise IRFormatError(f"output node %{node.name}: args[0] must be a tuple")
        return [self.load(v) for v in values]

    # -- values ----------------------------------------------------------------------

    def load(self, arg: Argument) -> Any:
        """The runtime value of a node argument: ValueRefs are looked up, symbolic ints
        (``SymExpr``) evaluated over the bound :attr:`symbols`, tuples become lists (what
        torch operators take for ``int[]`` and ``Tensor[]``)."""
        if isinstance(arg, ValueRef):
            value = self.env[arg.node]
            return value if arg.index is None else value[arg.index]
        if isinstance(arg, tuple):
            return [self.load(a) for a in arg]
        if isinstance(arg, SymExpr):
            return evaluate(arg.expr, self.symbols)
        return arg

    def _stored_tensor(self, node: Node) -> torch.Tensor:
        cached = self._tensors_on_device.get(node.target)
        if cached is not None:
            return cached
        if node.target not in self.program.tensors:
            raise IRFormatError(
                f"node %{node.name}: {node.op} target {node.target!r} is not in program.tensors"
            )
        tensor = self.program.tensors[node.target]
        # NOTE: tensors are stored on CPU in files; the node's metadata says where the
        # graph expects them. Move once and keep the copy for later runs.
        if isinstance(node.meta, TensorMeta) and node.meta.device != tensor.device:
            tensor = tensor.to(node.meta.device)
            self._tensors_on_device[node.target] = tensor
        return tensor


def _last_uses(graph: Graph) -> dict[str, list[str]]:
    """node name -> values that are dead once that node has run (read for the last time
    there, or never read at all)."""
    last_reader: dict[str, str] = {}
    for node in graph.nodes:
        for ref in node.inputs():
            last_reader[ref.node] = node.name
    free_after: dict[str, list[str]] = {}
    for node in graph.nodes:
        if node.op == "output":
            continue
        reader = last_reader.get(node.name, node.name)
        free_after.setdefault(reader, []).append(node.name)
    return free_after


def run_program(
    program: Program, inputs: Sequence[Any], graph: str = "forward", *,
    allow_effects: bool = False,
) -> list[Any]:
    """Run graph ``graph`` of ``program`` on ``inputs`` with the reference interpreter.

    ``inputs``: one value per placeholder, or only the user inputs (see
    :func:`bind_inputs`). ``allow_effects``: see :class:`Interpreter`. Returns the
    graph's output values in order.
    """
    return Interpreter(program, graph, allow_effects=allow_effects).run(*inputs)
