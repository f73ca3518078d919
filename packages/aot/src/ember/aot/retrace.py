"""Re-tracing: run a program on fake tensors under Ember's recorder to get a new one.

Used twice by the stage: to decompose a program to Core ATen (a dispatch mode applies
torch's decomposition table before each op reaches the recorder), and to build the joint
forward/backward graph (the forward runs under torch's autograd on fake inputs that
require grad, then ``torch.autograd.grad`` runs the backward; the recorder sees the ATen
ops of both, after autograd, at the dispatcher level).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from ember.aot._torch import (
    DATA_DEPENDENT_ERRORS,
    TorchDispatchMode,
    current_autograd_node,
    has_composite_implicit_kernel,
)
from ember.aot.hidden_writes import HIDDEN_WRITE, record_hidden_write
from ember.aot.non_differentiable import non_differentiable_outputs
from ember.aot.retrace_inputs import (
    add_inputs,
    add_tangent,
    carry_shape_facts,
    input_metas,
    new_recorder,
)
from ember.aot.strided_scatter_grad import AS_STRIDED_SCATTER, record_as_strided_scatter
from ember.aot.symbolic_sizes import (
    bind_plain_sizes,
    evaluate_symbolic,
    narrow_unbacked_symbols,
)
from ember.runtime.interpreter import Interpreter
from ember.runtime.saved_hooks import hooks_kept_out
from ember.runtime.ir import (
    Argument,
    Graph,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    SourceLocation,
    TensorMeta,
    ValueRef,
)
from ember.runtime.ir.graph import SymExpr
from ember.runtime.tracing import GraphRecorder

# The key under which a forward node's source location rides on its autograd node.
_SOURCE_KEY = "ember_source"


class _Undecomposable(Exception):
    """A decomposition reached an op that cannot appear in a core-functional program
    (a ``prims`` op): the op being decomposed stays whole instead."""


# Views that reinterpret the dtype: a decomposition that writes through one (torch's
# ``complex``: an empty complex tensor filled through ``view_as_real``) cannot be
# functionalized, so the op it decomposes stays whole.
_REINTERPRETING_VIEWS = frozenset({
    torch.ops.aten.view_as_real.default,
    torch.ops.aten.view_as_complex.default,
    torch.ops.aten.view.dtype,
    torch.ops.aten.real.default,
    torch.ops.aten.imag.default,
})


_DECOMPOSITION_GIVES_UP: tuple[type[Exception], ...] = (_Undecomposable, *DATA_DEPENDENT_ERRORS)


class DecomposingMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Replaces each op that has an entry in ``table`` by its decomposition (applied
    again, recursively, to the ops the decomposition calls).

    A decomposition that needs data (``torch.tensor`` of a number in torch's
    ``bucketize``: fake tensors cannot compute it) keeps its op whole. Some of torch's
    decompositions are written with ``prims`` ops (``torch._refs``),
    which the core-functional dialect refuses, and some write through a view that
    reinterprets the dtype, which functionalization cannot express; on symbolic shapes
    some compute with a symbolic *float* (batch norm's ``n / (n - 1)``), which the IR
    cannot hold (its symbolic values are ints): when such an op reaches the mode inside
    a decomposition, the innermost op being decomposed is kept whole (the ops its
    decomposition recorded so far are dead code, dropped by the clean-up)."""

    def __init__(self, table: Mapping[Any, Callable[..., Any]]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.table = table
        self.depth = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if self.depth and (func.namespace == "prims" or func in _REINTERPRETING_VIEWS
                           or _has_symbolic_float(args, kwargs)):
            raise _Undecomposable(func)
        decomposition = self.table.get(func)
        if decomposition is not None:
            result = self._decompose(decomposition, args, kwargs)
            if result is not NotImplemented:
                return result
        if has_composite_implicit_kernel(func):
            # NOTE: ops called from inside a decomposition (below autograd) reach the
            # mode even when torch would have decomposed them above it.
            result = self._decompose(func.decompose, args, kwargs)
            if result is not NotImplemented:
                return result
        return func(*args, **kwargs)

    def _decompose(self, decomposition: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """``decomposition(*args, **kwargs)`` under this mode, or NotImplemented when it
        reaches a ``prims`` op."""
        self.depth += 1
        try:
            with self:
                return decomposition(*args, **kwargs)
        except _DECOMPOSITION_GIVES_UP:
            return NotImplemented
        finally:
            self.depth -= 1


def _has_symbolic_float(args: Any, kwargs: Mapping[str, Any]) -> bool:
    """Whether an argument is a symbolic float or bool (the IR's symbolic values are
    ints only)."""
    values = [*args, *kwargs.values()]
    while values:
        value = values.pop()
        if isinstance(value, (torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(value, (list, tuple)):
            values.extend(value)
    return False


def _detach_where_captured_without_grad(result: Any, meta: Any) -> Any:
    """Detach the results the capture saw without autograd history (computed under
    ``torch.no_grad()`` or from detached values) so the joint graph keeps eager's
    gradient flow."""
    if isinstance(result, torch.Tensor):
        if isinstance(meta, TensorMeta) and not meta.requires_grad and result.requires_grad:
            return result.detach()
        return result
    if isinstance(result, (tuple, list)) and isinstance(meta, tuple):
        return type(result)(_detach_where_captured_without_grad(r, m)
                            for r, m in zip(result, meta))
    return result


def _tag_autograd_nodes(result: Any, source: SourceLocation | None) -> None:
    """Remember on the autograd nodes of ``result`` which user line made them, so the
    backward ops they run are recorded with that line (see :class:`_BackwardSourceMode`)."""
    values = result if isinstance(result, (tuple, list)) else (result,)
    for value in values:
        grad_fn = getattr(value, "grad_fn", None) if isinstance(value, torch.Tensor) else None
        if grad_fn is not None and source is not None:
            grad_fn.metadata.setdefault(_SOURCE_KEY, source)


class _BackwardSourceMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """While ``torch.autograd.grad`` runs, tells the recorder the source line of the
    forward op whose backward is running."""

    def __init__(self, recorder: GraphRecorder) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        node = current_autograd_node()
        self.recorder.set_source(node.metadata.get(_SOURCE_KEY) if node is not None else None)
        return func(*args, **(kwargs or {}))


_RESHAPING_VIEWS = frozenset({"aten::view.default", "aten::_unsafe_view.default"})
_FUNCTIONAL_COPY = "aten::copy.default"


class _SourceKeepingInterpreter(Interpreter):
    """An interpreter that tells the recorder which node each recorded op comes from,
    so the new graph keeps the user's source locations."""

    def __init__(self, program: Program, graph: str, recorder: GraphRecorder,
                 keep_no_grad: bool = False) -> None:
        # NOTE: the interpreter binds a symbolic graph's symbols by reading input sizes
        # as ints and checks ranges and guards: on fake tensors that would specialise
        # every symbol. It runs the graph without its symbol table instead; this class
        # binds the symbols itself, to torch's symbolic ints.
        self.symbol_ranges = program.graphs[graph].symbols  # unbacked ones: see run_node
        unchecked = dataclasses.replace(program.graphs[graph], symbols={}, guards=[])
        super().__init__(dataclasses.replace(program, graphs={**program.graphs,
                                                               graph: unchecked}), graph)
        self.recorder = recorder
        self.keep_no_grad = keep_no_grad
        # IR symbol -> torch's symbolic int for it, bound as the symbol binder does: from
        # the first placeholder (or, for an unbacked symbol, node) that has it as a plain
        # size. ``SymExpr`` arguments are computed from these.
        self.symbol_values: dict[str, Any] = {}
        self._narrowed: set[str] = set()

    def run_node(self, node: Node) -> Any:
        self.recorder.set_source(node.source)
        value = super().run_node(node)
        if node.op != "output":
            bind_plain_sizes(node.meta, value, self.symbol_values)
            narrow_unbacked_symbols(node.meta, self.symbol_values, self.symbol_ranges,
                                    self._narrowed)
        return value

    def load(self, arg: Argument) -> Any:
        if isinstance(arg, SymExpr):
            return evaluate_symbolic(arg.expr, self.symbol_values)
        if isinstance(arg, tuple):
            return [self.load(a) for a in arg]
        return super().load(arg)

    def call(self, node: Node) -> Any:
        if node.target in _RESHAPING_VIEWS:
            # NOTE: the program is functional by now, so a view may become a copy: after
            # decomposition a value can have other strides than when it was captured
            # (a fused kernel's output layout), and a plain view of it would fail.
            args = [self.load(a) for a in node.args]
            result = torch.ops.aten.reshape.default(args[0], args[1])
        elif node.target == HIDDEN_WRITE:
            old, new = (self.load(a) for a in node.args[:2])
            result = record_hidden_write(old, new)
        elif node.target == AS_STRIDED_SCATTER and not node.kwargs:
            result = record_as_strided_scatter([self.load(a) for a in node.args])
        elif node.target == _FUNCTIONAL_COPY and self.keep_no_grad:
            # NOTE: torch's autograd has no formula for the functional copy that
            # functionalization makes of copy_: in the joint graph it is ``src``
            # converted and broadcast to ``self``'s dtype and shape. When ``self``
            # requires grad, eager's result does too (its gradient to ``self`` is zero):
            # a ``where`` on an all-true mask keeps that link and the values.
            target, source = (self.load(a) for a in node.args[:2])
            copied = torch.ops.aten.expand.default(
                torch.ops.aten._to_copy.default(source, dtype=target.dtype,
                                                device=target.device),
                list(target.shape))
            if target.requires_grad:
                everywhere = torch.ops.aten.full.default(
                    list(target.shape), True, dtype=torch.bool, device=target.device)
                result = torch.ops.aten.where.self(everywhere, copied, target)
            else:
                result = torch.ops.aten.clone.default(copied)
        else:
            result = super().call(node)
        if self.keep_no_grad:
            result = _detach_where_captured_without_grad(result, node.meta)
            _tag_autograd_nodes(result, node.source)
        return result


@dataclass
class JointGraph:
    """A joint forward/backward graph and what its inputs and outputs are.

    Placeholders: the forward inputs, then ``tangents`` (one per differentiable output).
    Outputs: the ``n_forward_outputs`` forward outputs, then one gradient per name in
    ``grad_targets`` (the forward placeholders that get a gradient).
    """

    program: Program
    n_forward_outputs: int
    differentiable_outputs: list[int]
    tangents: list[str]
    grad_targets: list[str]


def retrace(program: Program, table: Mapping[Any, Callable[..., Any]],
            graph_name: str = "forward") -> Program:
    """Run graph ``graph_name`` on fake inputs with decompositions ``table`` applied and
    record it again (no autograd). Signature and metadata are kept."""
    graph = program.graphs[graph_name]
    recorder = new_recorder(graph)
    fakes = add_inputs(recorder, program, graph_name, [False] * len(graph.placeholders))
    interpreter = _SourceKeepingInterpreter(program, graph_name, recorder)
    with torch.no_grad(), recorder, DecomposingMode(table):
        outputs = interpreter.run(*fakes)
    specs = program.signature.outputs.get(graph_name)
    traced = recorder.finish(outputs, specs, graph_name)
    carry_shape_facts(graph, traced, graph_name)
    return _with_program_data(traced, program)


def trace_joint(program: Program, table: Mapping[Any, Callable[..., Any]],
                symbolic: bool = False) -> JointGraph:
    """Record the joint forward/backward graph of ``program``'s functional forward graph.

    The differentiable outputs are the USER_OUTPUTs that require grad (aliased outputs and
    mutated inputs are rebuilt or copied by the runtime and get no tangent); gradients are
    taken for the placeholders whose metadata requires grad. ``symbolic``: record under
    a shape environment even for a static graph, so that a backward op whose result's
    size depends on the data (``nonzero`` in ``x[mask] = v``'s backward) gets a symbol.
    """
    graph = program.forward
    recorder = new_recorder(graph, symbolic)
    grad_wanted = [m.requires_grad and (m.dtype.is_floating_point or m.dtype.is_complex)
                   for m in input_metas(graph)]
    fakes = add_inputs(recorder, program, "forward", grad_wanted)
    out_specs = program.signature.outputs.get("forward") or [OutputSpec()] * len(
        graph.output_values)
    interpreter = _SourceKeepingInterpreter(program, "forward", recorder, keep_no_grad=True)
    # (the caller's saved-tensor hooks apply to the compiled program's saved values at
    # run time, once, as eager applies them: ember.runtime.saved_hooks)
    with torch.enable_grad(), hooks_kept_out():
        with recorder, DecomposingMode(table):
            outputs = interpreter.run(*fakes)
        # NOTE: a written input that requires grad (a non-leaf activation) gets a
        # tangent too: the runtime's copy-back then carries autograd history, as eager's
        # in-place op does.
        # NOTE: an output the capture saw requiring grad stays differentiable even when
        # its re-traced value does not (eager's ``copy_`` into a tensor that requires
        # grad: the result's gradient does not reach that tensor): it takes a tangent
        # that contributes nothing, so the caller still gets a differentiable result.
        # NOTE: an output an op defines as non-differentiable (BatchNorm's new running
        # statistics, which the decomposition computes from the batch's statistics)
        # takes no tangent: eager's autograd gives it none, and its tangent would be
        # zeros the backward adds up for nothing (non_differentiable.py)
        captured = _captured_requires_grad(graph)
        never = non_differentiable_outputs(graph)
        differentiable = [
            i for i, (o, s) in enumerate(zip(outputs, out_specs))
            if s.kind in (OutputKind.USER_OUTPUT, OutputKind.MUTATED_INPUT)
            and isinstance(o, torch.Tensor) and i not in never
            and (o.requires_grad or (captured[i] and (o.dtype.is_floating_point
                                                      or o.dtype.is_complex)))
        ]
        tangent_names = [f"tangent_{k}" for k in range(len(differentiable))]
        tangents = [add_tangent(recorder, graph, outputs[i], name)
                    for i, name in zip(differentiable, tangent_names)]
        wrt = [(p.name, f) for p, f, g in zip(graph.placeholders, fakes, grad_wanted) if g]
        grads: tuple[torch.Tensor | None, ...] = ()
        connected = [(outputs[i], t) for i, t in zip(differentiable, tangents)
                     if outputs[i].requires_grad]
        if connected and wrt:
            # NOTE: the autograd engine checks gradient sizes between ops (guards on
            # symbolic shapes); before the first backward op those belong to the output
            # whose backward starts the walk.
            recorder.set_source(_output_source(
                graph, [i for i in differentiable if outputs[i].requires_grad]))
            with recorder, DecomposingMode(table), _BackwardSourceMode(recorder):
                grads = torch.autograd.grad(
                    [o for o, _ in connected], [f for _, f in wrt], [t for _, t in connected],
                    allow_unused=True)
    grad_targets = [name for (name, _), g in zip(wrt, grads) if g is not None]
    grad_values = [g for g in grads if g is not None]
    all_outputs = list(outputs) + grad_values
    specs = list(out_specs) + [OutputSpec(OutputKind.GRADIENT, t) for t in grad_targets]
    traced = recorder.finish(all_outputs, specs, "forward")
    carry_shape_facts(graph, traced, "forward")
    _placeholders_first(traced.forward)
    return JointGraph(_with_program_data(traced, program), len(outputs), differentiable,
                      tangent_names, grad_targets)


def _output_source(graph: Graph, outputs: list[int]) -> SourceLocation | None:
    """The source line of the node that computes the first of ``outputs``."""
    by_name = {n.name: n for n in graph.nodes}
    for i in outputs:
        value = graph.output_values[i]
        if isinstance(value, ValueRef) and value.node in by_name:
            return by_name[value.node].source
    return None


def _captured_requires_grad(graph: Graph) -> list[bool]:
    """For each output of ``graph``: whether its captured metadata requires grad."""
    by_name = {n.name: n for n in graph.nodes}
    flags = []
    for value in graph.output_values:
        meta = None
        if isinstance(value, ValueRef) and value.node in by_name:
            meta = by_name[value.node].meta
            if isinstance(meta, tuple):
                meta = meta[value.index or 0]
        flags.append(isinstance(meta, TensorMeta) and meta.requires_grad)
    return flags


def _placeholders_first(graph: Graph) -> None:
    """Move placeholders (tangents are added after the forward ran) to the front."""
    graph.nodes = ([n for n in graph.nodes if n.op == "placeholder"]
                   + [n for n in graph.nodes if n.op != "placeholder"])


def _with_program_data(traced: Program, original: Program) -> Program:
    tensors = dict(original.tensors)
    tensors.update(traced.tensors)
    traced.tensors = tensors
    traced.metadata = dict(original.metadata)
    return traced
