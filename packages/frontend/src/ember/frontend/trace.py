"""Tracing capture: run the user's Python once on fake tensors under the recorder.

The escape-hatch frontend (non-strict mode). Whatever Python runs is baked in: control
flow takes the branch it took on the example inputs, globals and closures are read once.
What the graph depends on and can be checked cheaply is guarded (see
:mod:`ember.frontend.trace_guards`): argument structure, tensor metadata, non-tensor argument
values, grad mode, autocast and the default dtype, module training flags. Dimensions made
symbolic (:mod:`ember.frontend.dynamic`) are guarded by their ranges and relations
instead of their sizes (:mod:`ember.frontend.shape_guards`).

Graph inputs (placeholders), in order: the module's parameters (``p_<qualname>``,
labelled PARAMETER with ``target`` the qualified name), its buffers (``b_<qualname>``,
BUFFER), then, for each leaf of ``(args, kwargs)`` in order: a tensor is one USER_INPUT
named after the argument (``x``, ``batch_input_ids``); an ``nn.Module`` contributes its
parameters and buffers (``target`` ``<argument>.<qualname>``), read live at each call.
Other non-tensor arguments are constants of the graph. Last come tensors read from
closures or globals that require grad (``p_lifted``, PARAMETER; e.g. the parameters of
a ``model`` used inside a compiled ``train_step``); other closure tensors are constants.

A user Triton kernel launch (``kernel[grid](...)``) is recorded as one
``ember::triton_kernel`` node and ``aten::copy_`` of what it writes, as in strict capture
(:mod:`ember.frontend.trace_triton`); it never runs on the fake tensors.

Graph outputs: the tensor leaves of the result, in pytree order (a tensor returned twice
is two outputs). Non-tensor leaves (Python numbers, None, strings) are not graph outputs:
they are kept in :class:`OutputLayout` and put back when the result is rebuilt.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import torch
from ember.frontend._torch import data_dependent_output_types
from ember.frontend.autocast_cache import RealCastsUncached
from ember.frontend.custom_functions import custom_function_in
from ember.frontend.declined_sizes import symbolic_failure
from ember.frontend.dynamic import DynamicDim, DynamicPolicy, add_input, dims_of
from ember.frontend.error_kinds import with_kind
from ember.frontend.guard_model import Source
from ember.frontend.guards import GuardSet
from ember.frontend.inference_outputs import inference_outputs
from ember.frontend.module_state import ModuleLayout, callable_name, module_of
from ember.frontend.pytree import flatten, flatten_with_names, holds_size, sizes_restored, unflatten
from ember.frontend.shape_guards import SymbolicInput, install_shape_guards
from ember.frontend.symbolic_calls import symbolic_calls
from ember.frontend.tensor_subclasses import overriding_subclass
from ember.frontend.torch_substitutes import substitutes_installed
from ember.frontend.trace_grad import GradRegions, grad_mode_of_graph
from ember.frontend.trace_guards import (
    ArgumentSource,
    ModuleSlotSource,
    ObjectSource,
    StateSource,
    add_aliasing,
    add_call_guards,
    add_tensor,
    add_training,
    add_value,
)
from ember.frontend.trace_refusals import (DataDependentResult, RefuseAutograd, SymbolicText,
                                           constant_result_leaf, constant_write, symbol_names)
from ember.frontend.trace_watch import (PythonWatch, module_attributes, restore_fake_attributes,
                                        warn_rebound_attributes, watched_python)
from ember.runtime.checked_calls import CheckedCalls
from ember.runtime.ir import InputKind, InputSpec, Program
from ember.runtime.logs import log
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_errors import RecordingError
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
    sized: bool = field(init=False, repr=False, compare=False)  # holds a torch.Size

    def __post_init__(self) -> None:  # (once: hashing or walking the spec costs ~10 us)
        self.sized = holds_size(self.spec)

    def rebuild(self, outputs: list[Any]) -> Any:
        leaves = [outputs[s] if s is not None else c
                  for s, c in zip(self.sources, self.constants)]
        tree = unflatten(leaves, self.spec)
        return sizes_restored(tree, self.spec) if self.sized else tree


@dataclass
class ArgumentInputs:
    """Where the graph inputs that come from the arguments are found at each call, in
    placeholder order (after the compiled module's own parameters and buffers):
    ``("tensor", i)`` is tensor leaf ``i`` of ``(args, kwargs)``; ``("module", i)`` are
    the parameters and buffers of module leaf ``i`` (read live through ``layouts[i]``);
    after them come the ``lifted`` closure tensors that require grad."""

    sources: list[tuple[str, int]]
    layouts: dict[int, ModuleLayout]
    lifted: list[torch.Tensor] = field(default_factory=list)

    def gather(self, leaves: list[Any]) -> list[torch.Tensor]:
        """The input values for the argument leaves ``leaves`` of one call, then the
        lifted closure tensors."""
        values: list[torch.Tensor] = []
        for kind, i in self.sources:
            if kind == "tensor":
                values.append(leaves[i])
            else:
                values.extend(self.layouts[i].read())
        values.extend(self.lifted)
        return values


@dataclass
class TraceCapture:
    """A captured program and what it takes to call it again: its guards, where its
    argument inputs come from, and how to rebuild the result."""

    program: Program
    guards: GuardSet
    arguments: ArgumentInputs
    output: OutputLayout
    grad: bool  # the grad mode it is compiled and run under (trace_grad.py)
    inference: tuple[int, ...] = ()  # outputs made as inference tensors (inference_outputs)
    # the inputs given symbolic dimensions (for the stages' guards: install_stage_guards)
    symbolic_inputs: list[tuple[SymbolicInput, Mapping[int, DynamicDim]]] = field(
        default_factory=list)


def capture(fn: Callable[..., Any], *args: Any,
            dynamic_shapes: Mapping[str, Mapping[int, Any]] | None = None,
            **kwargs: Any) -> Program:
    """Trace ``fn(*args, **kwargs)`` into an ``aten``-dialect Program.

    ``fn`` may be an ``nn.Module`` (its parameters and buffers become PARAMETER/BUFFER
    inputs) or a bound method of one. The inputs themselves are not changed (the code
    runs on fake tensors).

    ``dynamic_shapes`` makes dimensions symbolic: input name (the argument's name, as
    the placeholder is named: ``x``, ``batch_input_ids``) -> {dim: range}, a range
    being ``None`` (``[2, inf)``), ``(min, max)`` (``max`` may be None) or
    ``(name, min, max)``, where dimensions given one name must have equal sizes (they
    share a symbol). E.g. ``capture(f, x, dynamic_shapes={"x": {0: (1, 64)}})``: the
    program has a symbol ``s0`` for ``x.size(0)`` with range ``[2, 64]`` (a minimum
    below 2 is raised to 2: sizes 0 and 1 specialise), saved with it to ``.ember``.
    Tensors marked with :func:`~ember.frontend.mark_dynamic` are symbolic too.

    Raises:
        CaptureError: when the code cannot be traced (data-dependent Python control
            flow, an op the fake tensors cannot run, a user Triton kernel launch that
            cannot be captured), naming the line.
        ValueError: ``dynamic_shapes`` names an unknown input or dimension, or a bad
            range.
        ember.frontend.dynamic.DynamicDimError: a dimension in ``dynamic_shapes`` was
            specialised by the program.
    """
    return trace_capture(fn, module_of(fn), args, kwargs, policy=DynamicPolicy(None),
                         dynamic_shapes=dynamic_shapes).program


def trace_capture(
    fn: Callable[..., Any],
    module: torch.nn.Module | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    layout: ModuleLayout | None = None,
    policy: DynamicPolicy | None = None,
    dynamic_shapes: Mapping[str, Mapping[int, Any]] | None = None,
    symbolic: bool = False,
) -> TraceCapture:
    """Trace ``fn(*args, **kwargs)``; ``module``'s state (read through ``layout``, built
    if None) becomes graph inputs. ``policy`` (the compiled function's) and
    ``dynamic_shapes`` (see :func:`capture`) say which dimensions are symbolic;
    ``symbolic`` records with symbolic shapes even without one (a retry after an op
    with a data-dependent size, which then gets an unbacked size). See the module
    docstring for the conventions.

    Raises:
        CaptureError: as :func:`capture`.
    """
    if module is not None and layout is None:
        layout = ModuleLayout(module)
    policy = policy if policy is not None else DynamicPolicy(False)
    leaves, spec = flatten((args, kwargs))
    names = _unique(flatten_with_names(args, _parameter_names(fn))
                    + flatten_with_names(kwargs))
    for leaf, name in zip(leaves, names):
        overrides = overriding_subclass(leaf) if isinstance(leaf, torch.Tensor) else None
        if overrides is not None:
            raise CaptureError(
                f"could not trace {callable_name(fn)}: argument {name} is a tensor whose "
                f"class overrides {overrides}; the trace runs on plain fake tensors and "
                "would skip it\n  hint: use the strict capture (the default), which runs "
                "the code reading it eagerly, or pass a plain tensor")
        if isinstance(leaf, torch.Tensor) and leaf.layout is not torch.strided:
            raise CaptureError(
                f"could not trace {callable_name(fn)}: argument {name} is a tensor of "
                f"layout {leaf.layout}; Ember's graphs hold strided tensors\n  hint: use "
                "the strict capture (the default), which runs such calls eagerly, or "
                "pass a dense tensor (.to_dense())")
    explicit = explicit_dims(dynamic_shapes, leaves, names)
    dims = Dims(
        {i: dims_of(ArgumentSource(i, names[i]), leaf, True, policy, explicit.get(i))
         for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)},
        [dims_of(StateSource(i, slot.qualname), value, False, policy)
         for i, (slot, value) in enumerate(zip(layout.slots, layout.read()))]
        if layout is not None else [])
    guards = GuardSet()
    add_call_guards(guards, spec)
    taken: set[str] = {"output"}  # (the IR's output node)
    lift = functools.partial(_lift_trainable, taken=taken)
    symbolic = symbolic or dims.any()
    rec = GraphRecorder(lift=lift, dynamic=True) if symbolic else GraphRecorder(lift=lift)
    fake_state = _state_inputs(rec, guards, module, layout, taken, dims)
    fake_leaves, arguments, swaps = _argument_inputs(rec, guards, leaves, names, taken, dims)
    if layout is not None:
        swaps.append((layout, fake_state))
    fake_args, fake_kwargs = unflatten(fake_leaves, spec)
    # NOTE: imported here: the bytecode package imports this module
    from ember.frontend import trace_triton
    from ember.frontend.bytecode import triton_launch

    watch = PythonWatch()
    attributes = module_attributes(module)  # self.step += 1: warned (trace_watch.py)
    regions = GradRegions(rec)  # no_grad / enable_grad blocks (trace_grad.py)
    try:
        with ExitStack() as stack:
            for module_layout, fakes in swaps:
                stack.enter_context(module_layout.swapped(fakes))
            # a user Triton kernel launch is recorded instead of running on fake tensors
            stack.enter_context(trace_triton.launches_recorded(rec))
            stack.enter_context(RefuseAutograd())  # a backward pass is not traced
            stack.enter_context(CheckedCalls())  # eager's value checks (one_hot) recorded
            # real closure tensors kept out of autocast's cache (autocast_cache.py)
            stack.enter_context(RealCastsUncached())
            stack.enter_context(regions)  # under the recorder
            stack.enter_context(rec)
            stack.enter_context(symbolic_calls(rec.shape_env))  # sizes stay symbolic
            stack.enter_context(substitutes_installed())  # torch_substitutes.py
            # disabled calls refused, rebound globals/nonlocals warned (trace_watch.py)
            watch = stack.enter_context(watched_python())
            result = fn(*fake_args, **fake_kwargs)
    except Exception as e:
        watch.restore()  # no fake tensor of a failed trace is left in Python state
        restore_fake_attributes(module, attributes)
        if watch.refused is not None and e is not watch.refused:
            raise _could_not_trace(fn, watch.refused, None) from watch.refused
        if (isinstance(e, data_dependent_output_types()) and not symbolic
                and policy.unbacked_allowed):
            return trace_capture(fn, module, args, kwargs, layout, policy, dynamic_shapes,
                                 symbolic=True)
        if not explicit and dims.any() and symbolic_failure(e) and (
                policy.refuse_symbolic_sizes(f"a call failed with symbolic sizes: {e}",
                                             callable_name(fn))):
            # sizes the recording cannot hold, made symbolic by dynamic=True or automatic
            # dynamic (a float computed from a size, interpolate's scale): static from
            # now on (declined_sizes)
            return trace_capture(fn, module, args, kwargs, layout, policy)
        # NOTE: Triton's own frames are not library code to the recorder; an error under
        # a launch (or any Triton call) names the user's line that made it
        raise _could_not_trace(fn, e, triton_launch.frames_before_triton(e.__traceback__)
                               ) from e
    if watch.refused is not None:  # the code caught the refusal
        raise _could_not_trace(fn, watch.refused, None) from watch.refused
    watch.restore()
    escaped = watch.fakes + restore_fake_attributes(module, attributes)
    if escaped:
        raise CaptureError(
            f"could not trace {callable_name(fn)}: it stores a tensor it computed in "
            f"{', '.join(escaped)}, outside the graph's result; the trace would leave a "
            "fake tensor there (put back to its value before the call)\n  hint: register "
            "it as a buffer and update it in place (self.cache.copy_(...)), return it, or "
            "use the strict capture (the default), which writes it back at every call")
    try:
        outputs, layout_of_result = _split_result(
            result, symbol_names(dict(zip(names, fake_leaves))) if symbolic else {})
    except SymbolicText as e:
        if policy.dynamic is not False and not explicit:  # automatic: traced again static
            log("dynamic", f"tracing {callable_name(fn)} again with static sizes: {e}")
            return trace_capture(fn, module, args, kwargs, layout, DynamicPolicy(False))
        raise CaptureError(f"could not trace {callable_name(fn)}: {e}") from None
    except DataDependentResult as e:
        raise CaptureError(f"could not trace {callable_name(fn)}: {e}\n  hint: return the "
                           "tensor, or use the strict capture (the default), which breaks "
                           "the graph there") from None
    function = custom_function_in(outputs)
    if function is not None:
        raise CaptureError(
            f"could not trace {callable_name(fn)}: its outputs are computed through the "
            f"custom autograd.Function {function}, whose backward is user code that a "
            "trace does not capture (the gradient would be derived from its forward's "
            "ops instead)\n  hint: use the strict capture (the default), which runs the "
            "Function eagerly at a graph break, or call it under torch.no_grad()")
    no_grad = regions.no_grad_nodes()
    program = rec.finish(outputs)
    grad = grad_mode_of_graph(program, no_grad, regions.grad_at_start)
    written = constant_write(program, fn, module)
    if written is not None:
        node, name = written
        at = f" at {node.source}: {node.source.text}" if node.source is not None else ""
        raise CaptureError(
            f"could not trace {callable_name(fn)}{at}\n  it writes in place into {name}, a "
            "tensor the trace holds as a constant of the graph: the write would change "
            "the graph's copy, not the tensor\n  hint: pass the tensor as an argument, "
            "register it as a buffer of the module, or use the strict capture (the "
            "default), which makes it a graph input and writes it back")
    if dims.symbolic_inputs:
        install_shape_guards(program.forward, dims.symbolic_inputs, guards.add,
                             rec.shape_env)
    state_specs = [s for s in program.signature.inputs["forward"]
                   if s.kind in (InputKind.PARAMETER, InputKind.BUFFER)]
    for state_spec, value in zip(state_specs, _state_values(layout, arguments, rec)):
        assert state_spec.target is not None
        program.tensors[state_spec.target] = value.detach()
    for tensor, spec_of_tensor in rec.lifted:
        add_tensor(guards, ObjectSource(tensor, spec_of_tensor.name), tensor)
        arguments.lifted.append(tensor)
    watch.warn()  # once the trace is kept (not for one traced again)
    warn_rebound_attributes(module, attributes)
    return TraceCapture(program, guards, arguments, layout_of_result, grad,
                        inference_outputs(outputs, torch.is_inference_mode_enabled()),
                        list(dims.symbolic_inputs))


@dataclass
class Dims:
    """The symbolic dimensions of one trace: per tensor argument leaf and per state slot
    of the compiled module; the inputs given some, with their dimensions."""

    leaves: dict[int, dict[int, DynamicDim]]
    state: list[dict[int, DynamicDim]]
    symbolic_inputs: list[tuple[SymbolicInput, dict[int, DynamicDim]]] = field(
        default_factory=list)

    def any(self) -> bool:
        return any(self.leaves.values()) or any(self.state)

    def add_input(self, rec: GraphRecorder, guards: GuardSet, value: torch.Tensor,
                  spec: InputSpec, source: Source, dims: dict[int, DynamicDim]
                  ) -> torch.Tensor:
        """A placeholder for ``value``: its exact ``tensor`` guard, or, with symbolic
        dimensions, guards made once the graph is known (shape_guards)."""
        fake = add_input(rec, value, spec, dims)
        if dims:
            self.symbolic_inputs.append(
                (SymbolicInput(spec.name, source, value, None, fake), dims))
        else:
            add_tensor(guards, source, value)
        return fake


def explicit_dims(dynamic_shapes: Mapping[str, Mapping[int, Any]] | None,
                  leaves: list[Any], names: list[str],
                  ) -> dict[int, dict[int, tuple[int, int | None]]]:
    """``capture``'s ``dynamic_shapes`` by leaf index: dim -> (min, max).

    Raises:
        ValueError: an unknown input name, a dimension out of range, a malformed range,
            or dimensions sharing a name with different sizes.
    """
    if not dynamic_shapes:
        return {}
    if not isinstance(dynamic_shapes, Mapping) or not all(
            isinstance(d, Mapping) for d in dynamic_shapes.values()):
        raise ValueError(f"dynamic_shapes={dynamic_shapes!r}: expected a mapping of input "
                         "names to mappings of dims to ranges ({'x': {0: (2, 64)}})")
    by_name = {n: i for i, n in enumerate(names) if isinstance(leaves[i], torch.Tensor)}
    out: dict[int, dict[int, tuple[int, int | None]]] = {}
    named: dict[str, tuple[str, int, int]] = {}
    for input_name, per_dim in dynamic_shapes.items():
        if input_name not in by_name:
            raise ValueError(f"dynamic_shapes: no tensor input named {input_name!r}; "
                             f"tensor inputs: {', '.join(by_name) or 'none'}")
        t = leaves[by_name[input_name]]
        for dim, spec in per_dim.items():
            if isinstance(dim, bool) or not isinstance(dim, int) or not -t.dim() <= dim < t.dim():
                raise ValueError(f"dynamic_shapes[{input_name!r}]: dim {dim!r} is not a "
                                 f"dimension of a tensor of rank {t.dim()}")
            dim %= t.dim()
            label, lower, upper = _range_spec(spec, f"dynamic_shapes[{input_name!r}][{dim}]")
            size = int(t.size(dim))
            if label is not None:
                first = named.setdefault(label, (input_name, dim, size))
                if first[2] != size:
                    raise ValueError(
                        f"dynamic_shapes: {input_name}.size({dim}) and {first[0]}.size("
                        f"{first[1]}) share the name {label!r} but have sizes {size} and "
                        f"{first[2]}")
            out.setdefault(by_name[input_name], {})[dim] = (lower, upper)
    return out


def _range_spec(spec: Any, where: str) -> tuple[str | None, int, int | None]:
    if spec is None:
        return None, 2, None
    if isinstance(spec, tuple) and len(spec) == 3 and isinstance(spec[0], str):
        label, lower, upper = spec
    elif isinstance(spec, tuple) and len(spec) == 2:
        label, (lower, upper) = None, spec
    else:
        raise ValueError(f"{where}: expected None, (min, max) or (name, min, max), "
                         f"got {spec!r}")
    if isinstance(lower, bool) or not isinstance(lower, int) or (
            upper is not None and (isinstance(upper, bool) or not isinstance(upper, int))):
        raise ValueError(f"{where}: min and max must be ints (max may be None), "
                         f"got {spec!r}")
    if upper is not None and lower > upper:
        raise ValueError(f"{where}: empty range [{lower}, {upper}]")
    return label, max(lower, 2), upper


def _lift_trainable(tensor: torch.Tensor, taken: set[str]) -> InputSpec | None:
    """A tensor read from a closure or a global (``model`` used inside a compiled
    ``train_step``) that requires grad becomes a PARAMETER input, so gradients reach it;
    other such tensors stay constants."""
    if not tensor.requires_grad:
        return None
    name = _take("p_lifted", taken)
    return InputSpec(name, InputKind.PARAMETER, name)


def _state_values(
    layout: ModuleLayout | None, arguments: ArgumentInputs, rec: GraphRecorder
) -> Iterator[torch.Tensor]:
    """Every parameter and buffer input's live value, in placeholder order (placeholders
    of tensor arguments skipped)."""
    if layout is not None:
        yield from layout.read()
    for kind, i in arguments.sources:
        if kind == "module":
            yield from arguments.layouts[i].read()
    for tensor, _ in rec.lifted:
        yield tensor


def _state_inputs(
    rec: GraphRecorder,
    guards: GuardSet,
    module: torch.nn.Module | None,
    layout: ModuleLayout | None,
    taken: set[str],
    dims: Dims,
) -> list[torch.Tensor]:
    """Placeholders and guards for the compiled module's parameters and buffers; their
    fakes."""
    if module is None or layout is None:
        return []
    add_training(guards, "self", module)
    sources: list[Source] = [StateSource(i, slot.qualname)
                             for i, slot in enumerate(layout.slots)]
    return _module_state_inputs(rec, guards, layout, "", taken, sources, dims, dims.state)


def _module_state_inputs(
    rec: GraphRecorder,
    guards: GuardSet,
    layout: ModuleLayout,
    prefix: str,
    taken: set[str],
    sources: list[Source],
    dims: Dims,
    slot_dims: list[dict[int, DynamicDim]] | None = None,
) -> list[torch.Tensor]:
    """Placeholders (``p_``/``b_`` + name, target ``prefix`` + qualified name) and tensor
    guards (on ``sources``) for the slots of ``layout``; their fakes."""
    fakes = []
    for i, (slot, value, source) in enumerate(zip(layout.slots, layout.read(), sources)):
        target = prefix + slot.qualname
        kind_prefix = "p_" if slot.kind is InputKind.PARAMETER else "b_"
        name = _take(kind_prefix + _identifier(target), taken)
        fakes.append(dims.add_input(rec, guards, value, InputSpec(name, slot.kind, target),
                                    source, slot_dims[i] if slot_dims else {}))
    return fakes


def _argument_inputs(
    rec: GraphRecorder, guards: GuardSet, leaves: list[Any], names: list[str],
    taken: set[str], dims: Dims,
) -> tuple[list[Any], ArgumentInputs, list[tuple[ModuleLayout, list[torch.Tensor]]]]:
    """Placeholders and guards for the argument leaves. Returns the leaves with tensors
    replaced by fakes, where the inputs come from, and the fakes to swap into module
    arguments while tracing."""
    fake_leaves: list[Any] = []
    arguments = ArgumentInputs([], {})
    swaps: list[tuple[ModuleLayout, list[torch.Tensor]]] = []
    tensor_leaves: list[int] = []
    for i, (leaf, name) in enumerate(zip(leaves, names)):
        if isinstance(leaf, torch.Tensor):
            fake_leaves.append(dims.add_input(rec, guards, leaf, InputSpec(_take(name, taken)),
                                              ArgumentSource(i, name), dims.leaves[i]))
            arguments.sources.append(("tensor", i))
            tensor_leaves.append(i)
            continue
        fake_leaves.append(leaf)
        add_value(guards, ArgumentSource(i, name), leaf)  # a module: identity and training
        if isinstance(leaf, torch.nn.Module):
            # NOTE: the parameters of a module argument are inputs read live, like the
            # compiled module's own (not constants baked into the graph).
            layout = ModuleLayout(leaf)
            sources: list[Source] = [ModuleSlotSource(layout, k, f"{name}.{slot.qualname}")
                                     for k, slot in enumerate(layout.slots)]
            fakes = _module_state_inputs(rec, guards, layout, f"{name}.", taken, sources, dims)
            arguments.sources.append(("module", i))
            arguments.layouts[i] = layout
            swaps.append((layout, fakes))
    if len(tensor_leaves) > 1:
        add_aliasing(guards, [ArgumentSource(i, names[i]) for i in tensor_leaves],
                     [leaves[i] for i in tensor_leaves])
    return fake_leaves, arguments, swaps


def _split_result(result: Any, symbols: dict[str, str]
                  ) -> tuple[list[torch.Tensor], OutputLayout]:
    """The result's tensor leaves (graph outputs) and how to rebuild the result; other
    leaves are constants (``trace_refusals.constant_result_leaf``: symbolic sizes
    specialised, text naming one of ``symbols`` refused)."""
    out_leaves, out_spec = flatten(result)
    outputs: list[torch.Tensor] = []
    sources: list[int | None] = []
    constants: list[Any] = []
    seen: dict[int, int] = {}  # `return y, y`: one output, the same object twice
    for leaf in out_leaves:
        if isinstance(leaf, torch.Tensor):
            sources.append(seen.setdefault(id(leaf), len(outputs)))
            constants.append(None)
            if sources[-1] == len(outputs):
                outputs.append(leaf)
        else:
            sources.append(None)
            constants.append(constant_result_leaf(leaf, symbols))
    return outputs, OutputLayout(out_spec, sources, constants)


def _could_not_trace(fn: Callable[..., Any], error: Exception,
                     tb: TracebackType | None) -> CaptureError:
    """The error of a failed trace, at the error's own location (a refused call's) or
    the innermost user frame of ``tb``."""
    where = getattr(error, "where", None) or user_source_location_of_traceback(tb)
    at = f" at {where}: {where.text}" if where is not None else ""
    return with_kind(CaptureError, error)(f"could not trace {callable_name(fn)}{at}\n  "
                                          f"{type(error).__name__}: {error}{_hint(error)}")


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
