"""The autograd glue: a compiled forward/backward pair as one ``torch.autograd.Function``.

A ``core-functional`` (or compiled) training program has a ``forward`` graph whose outputs
are the user outputs, the mutated inputs and then the SAVED_TENSOR values, and a
``backward`` graph taking the saved values and one tangent per differentiable output and
returning one gradient per input labelled in its GRADIENT specs (see the aot stage's
README). :class:`TrainingRunner` holds the two executors; the backward one is built on
the first backward call, so a program only ever used under ``torch.no_grad()`` never
compiles its backward graph.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.executor import Executor, ExecutorFactory
from ember.runtime.ir import Graph, OutputKind, OutputSpec, Program, ValueRef
from ember.runtime.ir.contracts import AotMetadata


class TrainingRunner:
    """The forward executor, the (lazy) backward executor and the bookkeeping that joins
    them for one program.

    Args:
        program: a program with ``forward`` and ``backward`` graphs.
        forward: the forward graph's executor.
        executor_factory: builds the backward executor on first use.

    Raises:
        ValueError: the backward graph's signature does not match the forward graph's.
    """

    def __init__(self, program: Program, forward: Executor,
                 executor_factory: ExecutorFactory) -> None:
        self.program = program
        self.forward = forward
        self._factory = executor_factory
        self._backward: Executor | None = None
        # run_backward's release of the saved values and executor, resolved on first use
        self._backward_call: tuple[Callable[[Any], None], Executor] | None = None
        self._tangent_deps: list[frozenset[int]] | None = None
        # the outputs of the last forward that left the Function as their base:
        # (position, size, stride, offset) of the view run() takes of it
        self.reviews: list[tuple[int, Any, Any, int]] = []
        # NOTE: a graph without a signature entry returns user outputs only (ir-contract)
        specs = (program.signature.outputs.get("forward")
                 or [OutputSpec()] * len(program.forward.output_values))
        self.n_saved = sum(1 for s in specs if s.kind == OutputKind.SAVED_TENSOR)
        self.n_outputs = len(specs) - self.n_saved
        aot = AotMetadata.from_program(program)
        self.differentiable: list[int] = list(aot.differentiable_outputs) if aot else []
        positions = {p.name: i for i, p in enumerate(program.forward.placeholders)}
        self.n_inputs = len(positions)
        # inputs the caller's copy-back overwrites after the forward graph ran
        self.written_inputs = sorted({positions[s.target] for s in specs
                                      if s.kind == OutputKind.MUTATED_INPUT
                                      and s.target in positions})
        self.grad_positions: list[int] = []
        for spec in program.signature.outputs.get("backward", []):
            if spec.kind != OutputKind.GRADIENT or spec.target not in positions:
                raise ValueError(f"backward output {spec} is not the gradient of a forward "
                                 "placeholder")
            self.grad_positions.append(positions[spec.target])
        # for each forward input, the index of its gradient among the backward's outputs
        # (len(grad_positions): none), so that the backward's result is one C-level map
        self.gradient_of_input = [len(self.grad_positions)] * self.n_inputs
        for k, position in enumerate(self.grad_positions):
            self.gradient_of_input[position] = k
        n_backward_inputs = len(program.graphs["backward"].placeholders)
        if n_backward_inputs != self.n_saved + len(self.differentiable):
            raise ValueError(
                f"backward graph takes {n_backward_inputs} inputs, but the forward graph "
                f"saves {self.n_saved} values and has {len(self.differentiable)} "
                "differentiable outputs"
            )

    @property
    def tangent_dependencies(self) -> list[frozenset[int]]:
        """For each backward output (an input's gradient), the tangents it reads
        (positions among the differentiable outputs), through the backward graph;
        computed on first use."""
        if self._tangent_deps is None:
            self._tangent_deps = _tangent_dependencies(self.program.graphs["backward"],
                                                       self.n_saved)
        return self._tangent_deps

    @property
    def backward(self) -> Executor:
        """The backward graph's executor, built on first use."""
        if self._backward is None:
            self._backward = self._factory(self.program, "backward")
        return self._backward

    def run_backward(self, ctx: Any, args: list[Any]) -> list[Any]:
        """Run the backward graph on ``args`` (the saved values, then the tangents), the
        only references the caller holds to the saved values: ``ctx``'s node lets them
        go first, and a compiled executor takes the list over (its ``consume``), so each
        saved activation is freed at its last use, not at the backward's end."""
        if self._backward_call is None:
            # imported here: ember.runtime.compiled imports this module
            from ember.runtime.compiled._torch import release_saved_tensors
            from ember.runtime.compiled.loader import CONSUME

            executor = self.backward
            self._backward_call = (release_saved_tensors, getattr(executor, CONSUME, executor))
        release, execute = self._backward_call
        release(ctx)
        return execute(args)

    def run(self, inputs: list[Any]) -> list[Any]:
        """Run the forward graph through :class:`CompiledFunction` (recording the backward
        for autograd); return the forward outputs without the saved values."""
        self.reviews = []
        outputs = list(CompiledFunction.apply(self, *inputs))  # type: ignore[no-untyped-call]
        for i, size, stride, offset in self.reviews:
            outputs[i] = outputs[i].as_strided(size, stride, offset)
        return outputs


class CompiledFunction(torch.autograd.Function):
    """forward: run the forward executor, keep the saved values; backward: run the
    backward executor on them and the incoming gradients."""

    @staticmethod
    def forward(ctx: Any, runner: TrainingRunner, *inputs: Any) -> tuple[Any, ...]:
        results = runner.forward(list(inputs))
        outputs, saved = results[: runner.n_outputs], results[runner.n_outputs:]
        if runner.written_inputs:
            written = {inputs[i].untyped_storage().data_ptr() for i in runner.written_inputs
                       if isinstance(inputs[i], torch.Tensor)}
            written.discard(0)
            saved = [_keep_from_copy_back(s, written) for s in saved]
        # NOTE: non-tensor saved values (sizes, Python numbers) travel on ctx; a step
        # saves hundreds of values, most often all tensors: then one C-level pass over
        # their types decides it (layout None: all tensors)
        if _TENSOR_TYPES.issuperset(map(type, saved)):
            ctx.save_for_backward(*saved)
            ctx.saved_layout = None
        else:
            ctx.save_for_backward(*[s for s in saved if isinstance(s, torch.Tensor)])
            ctx.saved_layout = [isinstance(s, torch.Tensor) for s in saved]
            ctx.saved_others = [s for s in saved if not isinstance(s, torch.Tensor)]
        ctx.runner = runner
        # NOTE: with CUDA graphs, what the backward must check before reading ``saved``
        # (a replay's saved tensors: ember.runtime.cudagraphs_pool.SavedHold)
        ctx.cuda_graph_hold = getattr(runner.forward, "last_hold", None)
        differentiable = set(runner.differentiable)
        # (the ids of every input: an output tensor is never a live non-tensor input)
        input_ids = set(map(id, inputs))
        visible: list[Any] = []
        hidden_bases = _hidden_view_bases(outputs, input_ids, differentiable)
        for i, out in enumerate(outputs):
            if isinstance(out, torch.Tensor) and id(out) in input_ids:
                out = out.detach()  # an input returned as is: autograd needs a new object
            elif i in hidden_bases:
                # NOTE: a view made inside an autograd.Function may not be written in
                # place once the write makes it require grad (torch forbids it), which
                # eager allows (`zeros_like(h)` recorded with a detach, then index_add_ of
                # a gradient-carrying value after a break): its base leaves the Function
                # and run() takes the same view of it outside
                runner.reviews.append((i, out.size(), out.stride(), out.storage_offset()))
                out = hidden_bases[i]
            visible.append(out)
        undiff = [i for i, o in enumerate(visible)
                  if i not in differentiable and isinstance(o, torch.Tensor)]
        if undiff:
            # NOTE: one tensor both a differentiable output and a non-differentiable one
            # (the kernels return one buffer for `y` and `y.detach()`): the latter is a
            # detached view, or marking it would take `y`'s gradient away
            carried = {id(visible[i]) for i in differentiable if i < len(visible)}
            for i in undiff:
                if id(visible[i]) in carried:
                    visible[i] = visible[i].detach()
            ctx.mark_non_differentiable(*[visible[i] for i in undiff])
        # NOTE: an output no gradient reaches arrives as None (not a zero tensor), so an
        # input whose gradient reads only such outputs gets None, as in eager (a pooler
        # the loss does not use: eager leaves its weights' .grad None, and an optimizer
        # skips them, where a zero gradient would still decay them)
        ctx.set_materialize_grads(False)
        ctx.tangent_meta = [(o.shape, o.dtype, o.device) if isinstance(o, torch.Tensor)
                            else None for o in (visible[i] for i in runner.differentiable)]
        return tuple(visible)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        return _backward(ctx, *grads)


def _backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
    """:meth:`CompiledFunction.backward`."""
    with torch.no_grad():
        result = _run_backward(ctx, grads)
    if not torch.is_grad_enabled():
        return result
    # NOTE: backward(create_graph=True): the backward graph ran as compiled code, so
    # its gradients carry no graph back to the inputs. Returned bare, they would be
    # constants and a gradient penalty built on them would silently get no gradient
    # (torch's once_differentiable only marks them when an incoming gradient
    # requires grad); a node that raises when differentiated makes that an error.
    return _first_order_only(ctx, result)


def keep_backward_from_dynamo() -> None:
    """Run :class:`CompiledFunction`'s backward outside Dynamo's frame evaluation.

    A step compiled with ``torch.compile(backend="ember")`` that calls
    ``loss.backward()`` runs the backward while Dynamo's frame hook is set on the
    thread (the CPU's backward runs on the caller's thread), and Dynamo would trace
    Ember's own backward code and the backward graph's compile: dozens of warnings and
    graphs of Ember's internals. ``torch.compiler.disable`` runs it as plain Python.
    The Dynamo backend calls this when Dynamo first hands it a graph: Dynamo is loaded
    by then, and a process that never uses it does not pay for importing it."""
    global _outside_dynamo
    if not _outside_dynamo:
        outside: Any = torch.compiler.disable(_backward)  # type: ignore[no-untyped-call]
        CompiledFunction.backward = staticmethod(outside)  # type: ignore[method-assign]
        _outside_dynamo = True


_outside_dynamo = False


_TENSOR_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
"""Exact types of saved values that are plain tensors (a subclass takes the general path)."""


def _saved_values(ctx: Any) -> list[Any]:
    """The values the forward saved, tensors and others, in the backward graph's order."""
    if ctx.saved_layout is None:  # all tensors
        return list(ctx.saved_tensors)
    tensors = iter(ctx.saved_tensors)
    others = iter(ctx.saved_others)
    return [next(tensors) if is_tensor else next(others) for is_tensor in ctx.saved_layout]


def _run_backward(ctx: Any, grads: tuple[Any, ...]) -> tuple[Any, ...]:
    """Run the backward executor on the saved values and the incoming gradients."""
    runner: TrainingRunner = ctx.runner
    if ctx.cuda_graph_hold is not None:
        ctx.cuda_graph_hold.check()
    incoming = [grads[i] for i in runner.differentiable]
    missing = {j for j, g in enumerate(incoming) if g is None}
    if len(missing) == len(incoming):
        # NOTE: no gradient reached any output: every input's is None, as in eager. The
        # engine still calls this node when a later graph took one of its outputs (a
        # loss kept across a second micro-batch's backward), whose saved values the
        # first backward freed: reading them would raise
        return (None, *[None] * len(runner.gradient_of_input))
    args = _saved_values(ctx)  # from here the only references this frame holds
    args += [_contiguous_like_forward(g) if g is not None
             else _zeros(ctx.tangent_meta[j]) for j, g in enumerate(incoming)]
    with _autocast_off():
        grad_values = runner.run_backward(ctx, args)
    n = len(runner.grad_positions)
    values = [*grad_values[:n], *[None] * (n - len(grad_values)), None]  # [n]: no gradient
    if missing:
        for k, reads in enumerate(runner.tangent_dependencies):
            if reads and reads <= missing:
                values[k] = None  # only outputs no gradient reached: None, as eager
    return (None, *map(values.__getitem__, runner.gradient_of_input))


DOUBLE_BACKWARD_MESSAGE = (
    "double backward through an Ember-compiled graph is not supported: its gradients "
    "were computed with backward(create_graph=True) (or torch.autograd.grad(..., "
    "create_graph=True)), but the compiled backward graph is not differentiable, so "
    "they do not depend on the graph's inputs. Run the model that a second-order "
    "gradient (a gradient penalty, a Hessian-vector product) differentiates eagerly, "
    "e.g. under ember.frontend.disable."
)


class _FirstOrderOnly(torch.autograd.Function):
    """Passes gradients through; differentiating them raises ``DOUBLE_BACKWARD_MESSAGE``."""

    @staticmethod
    def forward(ctx: Any, n_grads: int, *tensors: torch.Tensor) -> tuple[Any, ...]:
        # NOTE: ``tensors`` is the gradients, then the leaves (only edges for autograd)
        return tuple(g.detach() for g in tensors[:n_grads])

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        raise RuntimeError(DOUBLE_BACKWARD_MESSAGE)


def _first_order_only(ctx: Any, result: tuple[Any, ...]) -> tuple[Any, ...]:
    """``result`` with its tensors replaced by ones whose ``grad_fn`` raises when a
    second backward reaches it.

    Their ``grad_fn`` also points at the leaves that the compiled function's inputs
    come from (``ctx`` is its backward node), so that ``torch.autograd.grad(penalty,
    inputs=x)`` reaches it (and raises) rather than find ``x`` unused."""
    where = [i for i, g in enumerate(result) if isinstance(g, torch.Tensor)]
    if not where:
        return result
    leaves = _reachable_leaves(ctx)
    if not leaves:  # NOTE: gives the outputs the raising grad_fn all the same
        leaves = [torch.empty(0, requires_grad=True)]
    marked = _FirstOrderOnly.apply(len(where), *(result[i] for i in where), *leaves)  # type: ignore[no-untyped-call]
    out = list(result)
    for i, g in zip(where, marked):
        out[i] = g
    return tuple(out)


def _reachable_leaves(node: Any) -> list[torch.Tensor]:
    """The leaf tensors (``AccumulateGrad`` nodes' variables) behind an autograd node."""
    leaves: list[torch.Tensor] = []
    seen: set[int] = set()
    todo = [node]
    while todo:
        for nxt, _ in todo.pop().next_functions:
            if nxt is None or id(nxt) in seen:
                continue
            seen.add(id(nxt))
            variable = getattr(nxt, "variable", None)
            if isinstance(variable, torch.Tensor):
                leaves.append(variable)
            else:
                todo.append(nxt)
    return leaves


def _autocast_off() -> contextlib.AbstractContextManager[Any]:
    """Autocast off for CPU and CUDA inside (a no-op when it is off already): the
    backward graph's dtypes are fixed, so a ``backward()`` called inside an autocast
    block must not cast its ops again (a float32 matmul of a forward region with
    autocast off would write bfloat16 where compiled code reads float32)."""
    on = [d for d in ("cpu", "cuda") if torch.is_autocast_enabled(d)]
    if not on:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for device in on:
        stack.enter_context(torch.autocast(device, enabled=False))
    return stack


def _hidden_view_bases(outputs: list[Any], input_ids: set[int],
                       differentiable: set[int]) -> dict[int, torch.Tensor]:
    """The non-differentiable outputs that are views of a value the graph made and does
    not return otherwise, each with that base (a base two outputs share stays hidden:
    one tensor may not leave the Function twice)."""
    candidates = [(i, o) for i, o in enumerate(outputs)
                  if i not in differentiable and isinstance(o, torch.Tensor)]
    if not candidates:  # NOTE: every training step asks; most have none
        return {}
    # NOTE: imported here: ember.runtime.compiled imports the callable, which imports
    # this module
    from ember.runtime.compiled._torch import view_base

    output_ids = {id(o) for o in outputs if isinstance(o, torch.Tensor)}
    found: dict[int, torch.Tensor] = {}
    for i, out in candidates:
        base = view_base(out)
        if base is not None and id(base) not in input_ids and id(base) not in output_ids:
            found[i] = base
    bases = [id(b) for b in found.values()]
    return {i: b for i, b in found.items() if bases.count(id(b)) == 1}


def _zeros(meta: tuple[torch.Size, torch.dtype, torch.device] | None) -> Any:
    """The zero tangent of an output no gradient reached (None for a non-tensor)."""
    if meta is None:
        return None
    shape, dtype, device = meta
    return torch.zeros(shape, dtype=dtype, device=device)


def _tangent_dependencies(graph: Graph, n_saved: int) -> list[frozenset[int]]:
    """For each of ``graph``'s outputs, the tangent placeholders (those after the first
    ``n_saved``, numbered from 0) it is computed from."""
    reads: dict[str, frozenset[int]] = {}
    for i, p in enumerate(graph.placeholders):
        reads[p.name] = frozenset({i - n_saved}) if i >= n_saved else frozenset()
    none: frozenset[int] = frozenset()
    for node in graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        reads[node.name] = none.union(*(reads.get(r.node, none) for r in node.inputs()))
    return [reads.get(v.node, none) if isinstance(v, ValueRef) else none
            for v in graph.output_values]


def _keep_from_copy_back(value: Any, written: set[int]) -> Any:
    """``value``, or a copy of it if it shares memory with an input the caller will
    overwrite (``written``: those inputs' storage addresses; the backward graph needs
    the value from before the write)."""
    if not isinstance(value, torch.Tensor) or not written:
        return value
    if value.untyped_storage().data_ptr() in written:
        return value.detach().clone()
    return value


def _contiguous_like_forward(grad: Any) -> Any:
    # NOTE: the backward graph was traced with dense tangents; an expanded zero gradient
    # or a transposed one from the caller is made dense before it reaches compiled code.
    if isinstance(grad, torch.Tensor) and not grad.is_contiguous():
        return grad.contiguous()
    return grad
