"""The aot stage's passes, in order: ``aten`` program in, ``core-functional`` out.

Inference (grad mode off, or no input requires grad)::

    functionalize → decompose (re-trace) → functionalize → DCE → CSE

Training::

    functionalize → [decompose → the later stages' pre-grad passes, when one fires]
      → joint forward/backward (re-trace under autograd, decomposing)
      → functionalize → DCE → CSE → min-cut partition → forward, backward

Output signature conventions (see ``packages/aot/README.md``):

* ``forward`` inputs: the aten program's placeholders, in order, with their specs.
* ``forward`` outputs: user outputs (some labelled ALIASED_OUTPUT), then MUTATED_INPUT
  outputs, then SAVED_TENSOR outputs (target: the backward placeholder they feed).
* ``backward`` inputs: ``saved_*`` placeholders, then one ``tangent_*`` per
  differentiable user output (all USER_INPUT).
* ``backward`` outputs: one GRADIENT per forward input that gets a gradient (target: the
  forward placeholder's name).
* ``metadata["aot"]`` (:class:`ember.runtime.ir.contracts.AotMetadata`):
  ``aliased_outputs`` (how the runtime rebuilds views),
  ``differentiable_outputs`` (forward output indices that take a tangent), ``saved_bytes``
  and ``recomputed`` (the partitioner's choice), ``save_everything``, ``extern_ops``
  (non-Core ATen ops left whole because nothing decomposes them; backends run them as
  extern calls, see :mod:`ember.aot.extern_ops`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from ember.aot._torch import (
    DATA_DEPENDENT_ERRORS,
    SYMBOLIC_SHAPE_ERRORS,
    decomposition_table_for_core_aten,
    lacks_symbolic_kernel,
)
from ember.aot.config import AotConfig
from ember.aot.declines import SymbolicSizesDeclined
from ember.aot.decompositions import EMBER_DECOMPOSITIONS, late_decompositions
from ember.aot.extern_ops import declare_extern_ops
from ember.aot.functionalize import functionalize, functionalize_graph
from ember.aot.partition.mincut import partition, saved_name
from ember.aot.pre_grad import rewritten_before_grad
from ember.aot.retrace import JointGraph, retrace, trace_joint
from ember.aot.symbolic_decompositions import symbolic_decompositions
from ember.aot.symbolic_sizes import UnboundSizeSymbolError, graph_is_symbolic
from ember.runtime.interpreter import InterpreterError
from ember.runtime.ir import (
    Graph,
    InputSpec,
    OutputKind,
    OutputSpec,
    Program,
    TensorMeta,
    VerificationError,
    drop_unreferenced_tensors,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)
from ember.runtime.ir.contracts import AotMetadata, PartitionSummary
from ember.runtime.ir.verifier import CORE_FUNCTIONAL_EXTRA_OPS
from ember.runtime.phases import profiles_compile, timed
from ember.runtime.stages import StageDeclined
from ember.runtime.tracing import RecordingError


def needs_backward(program: Program, config: AotConfig) -> bool:
    """Whether to build a joint graph: ``config.training`` if set, else whether grad mode
    is on (frontends guard on it) and any floating-point or complex input requires grad
    (the inputs the joint graph differentiates)."""
    wanted = torch.is_grad_enabled() and any(
        isinstance(p.meta, TensorMeta) and p.meta.requires_grad
        and (p.meta.dtype.is_floating_point or p.meta.dtype.is_complex)
        for p in program.forward.placeholders)
    if config.training is False and wanted:
        # (a compiled backend's outputs then do not require grad; the interpreter's,
        # which runs under autograd, do: say so rather than leave backward to fail)
        warnings.warn("aot.training=False compiles an inference program although an "
                      "input requires grad and grad mode is on: the compiled outputs may "
                      "not require grad, and backward through them fails", stacklevel=2)
    return wanted if config.training is None else config.training


@profiles_compile  # run alone (not under the pipeline): its own stage profile
def aot_compile(program: Program, config: AotConfig | None = None) -> Program:
    """Turn an ``aten`` program into a ``core-functional`` one (see module docstring).

    Raises:
        IRFormatError: an op cannot be functionalized.
        VerificationError: re-tracing produced a mutation of a graph input.
    """
    config = config or AotConfig()
    # NOTE: ops the core-functional dialect accepts although they are not Core ATen (fused
    # attention, functional batch norm) stay whole: backends call them as extern kernels.
    table = decomposition_table_for_core_aten(CORE_FUNCTIONAL_EXTRA_OPS) if config.decompose else {}
    if config.decompose:
        table.update(EMBER_DECOMPOSITIONS)
        table.update(late_decompositions())
        if any(graph_is_symbolic(g) for g in program.graphs.values()):
            table.update(symbolic_decompositions(table))
    with _declining_symbolic_failures(program):
        functional = timed("functionalize")(functionalize)(program)
        if needs_backward(program, config):
            result = _training_program(functional, table, config)
        else:
            result = _inference_program(functional, table)
    result.dialect = "core-functional"
    result.files = {**program.files, **result.files}  # user Triton kernels' sources
    declare_extern_ops(result)
    return result


_SYMBOLIC_FAILURES: tuple[type[Exception], ...] = (
    RecordingError, UnboundSizeSymbolError, *SYMBOLIC_SHAPE_ERRORS)
# the interpreter wraps what an op raises (the cause says which)
_CAUGHT: tuple[type[Exception], ...] = (InterpreterError, *_SYMBOLIC_FAILURES)


def _symbolic_failure(e: BaseException) -> bool:
    """Whether ``e`` (or the op failure an interpreter error wraps) is one of
    :data:`_SYMBOLIC_FAILURES`."""
    return isinstance(e.__cause__ if isinstance(e, InterpreterError) else e,
                      _SYMBOLIC_FAILURES)


def _reason(e: BaseException) -> str:
    """The first line of ``e``'s message, without torch's own symbol names that follow
    it ("unhinted: ...")."""
    return str(e).split("\n", 1)[0].split(" (unhinted:", 1)[0].strip()


@contextlib.contextmanager
def _declining_symbolic_failures(program: Program) -> Iterator[None]:
    """Turn what stops a symbolic re-trace (an op that needs the value of a
    data-dependent size, a size the IR cannot write) into ``StageDeclined`` naming the
    node, its op and why: the graph then runs eagerly instead of failing. In a static
    program these are bugs and raise as they are."""
    try:
        yield
    except _CAUGHT as e:
        symbolic = any(graph_is_symbolic(g) for g in program.graphs.values())
        if not symbolic or not _symbolic_failure(e):
            raise
        raise SymbolicSizesDeclined(f"the aot stage cannot compile this graph for every "
                                    f"size its symbols allow: {_reason(e)}") from e
    except Exception as e:  # an op without a kernel for symbolic sizes
        if not (lacks_symbolic_kernel(e) and any(
                graph_is_symbolic(g) for g in program.graphs.values())):
            raise
        raise SymbolicSizesDeclined(
            f"the aot stage cannot compile this graph for symbolic sizes: an op has no "
            f"kernel for them ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''})") from e


def _clean(graph: Graph) -> Graph:
    """Functionalize what re-tracing brought back (decompositions and the autograd engine
    may write in place), then drop dead code and merge duplicates."""
    refunctional = functionalize_graph(graph)
    mutated = [s.target for s in refunctional.outputs if s.kind == OutputKind.MUTATED_INPUT]
    if mutated:
        raise VerificationError(
            f"re-tracing wrote into graph input(s) {', '.join(map(str, mutated))}; "
            "the functional program should not")
    n = len(graph.output_values)
    out = refunctional.graph
    out.nodes[-1].args = (out.output_values[:n],)
    return eliminate_common_subexpressions(eliminate_dead_code(out))


def _inference_program(functional: Program, table: dict[Any, Any]) -> Program:
    traced = timed("decompose")(retrace)(functional, table)
    traced.graphs["forward"] = timed("cleanup")(_clean)(traced.forward)
    traced.signature.outputs["forward"] = list(functional.signature.outputs["forward"])
    traced.signature.inputs["forward"] = list(functional.signature.inputs.get("forward", []))
    aot = AotMetadata.from_program(functional) or AotMetadata()
    dataclasses.replace(aot, differentiable_outputs=()).write_to(traced)
    return traced


def _symbolic_joint(functional: Program, table: dict[Any, Any]) -> JointGraph:
    """The joint graph recorded under a shape environment (see :func:`trace_joint`), or
    ``StageDeclined`` naming the op that still needs a size the data decides."""
    try:
        return timed("autograd")(trace_joint)(functional, table, symbolic=True)
    except (*DATA_DEPENDENT_ERRORS, *_CAUGHT) as e:
        # an op whose result torch cannot describe even so (data-dependent values), or a
        # later op that needs the value of the new symbol
        if isinstance(e, _CAUGHT) and not _symbolic_failure(e):
            raise
        raise StageDeclined(
            f"the backward calls an op whose output shape depends on the data, and the "
            f"autograd graph cannot be traced ahead of time: {_reason(e)}") from e


def _training_program(functional: Program, table: dict[Any, Any],
                      config: AotConfig) -> Program:
    functional = rewritten_before_grad(
        functional, config, lambda p: timed("decompose")(_inference_program)(p, table))
    try:
        joint = timed("autograd")(trace_joint)(functional, table)
    except DATA_DEPENDENT_ERRORS:
        # NOTE: the forward traced on fake tensors (capture did it), so the op is one an
        # autograd formula calls (``x[mask] = v``'s backward reads ``grad[mask]``): again
        # under a shape environment, where its size is an unbacked symbol
        joint = _symbolic_joint(functional, table)
    joint_graph = timed("cleanup")(_clean)(joint.program.forward)
    parts = timed("partition")(partition)(joint_graph, joint.n_forward_outputs,
                                          len(joint.tangents), config)
    forward_specs = list(functional.signature.outputs["forward"])
    forward_specs += [OutputSpec(OutputKind.SAVED_TENSOR, saved_name(r)) for r in parts.saved]
    out = Program(
        graphs={"forward": parts.forward, "backward": parts.backward},
        dialect="core-functional",
        tensors=dict(joint.program.tensors),
        metadata=dict(functional.metadata),
    )
    out.signature.inputs["forward"] = list(functional.signature.inputs.get("forward", [])) or [
        InputSpec(p.name) for p in parts.forward.placeholders]
    out.signature.outputs["forward"] = forward_specs
    out.signature.inputs["backward"] = [InputSpec(p.name) for p in parts.backward.placeholders]
    out.signature.outputs["backward"] = [OutputSpec(OutputKind.GRADIENT, t)
                                         for t in joint.grad_targets]
    aot = AotMetadata.from_program(functional) or AotMetadata()
    dataclasses.replace(
        aot, differentiable_outputs=tuple(joint.differentiable_outputs),
        partition=PartitionSummary(parts.saved_bytes, tuple(parts.recomputed),
                                   config.save_everything),
    ).write_to(out)
    return drop_unreferenced_tensors(out)

