"""``torch.compile(model, backend="ember")``: Ember as a Dynamo backend.

The runtime's ``pyproject.toml`` registers :func:`ember` in torch's
``torch_dynamo_backends`` entry-point group, so torch finds the name ``"ember"`` without
the user importing anything from Ember (and this module imports no Dynamo: torch calls
it). It needs only ``ember-runtime`` and the stages of the chosen Ember backend
(``ember-aot`` and ``ember-inductor`` by default), never ``ember-frontend``.

For each graph Dynamo captures, :func:`ember` records the GraphModule to an ``aten``
program (:func:`ember.runtime.fx_import.record_fx`), compiles it with the runtime's
pipeline and returns a callable that Dynamo calls with the graph's flat tensor inputs and
that returns what the GraphModule returns. A graph whose inputs require grad gets the
backward graph the aot stage derives (the callable's outputs carry autograd).

``torch.compile`` passes through:

============================  =====================================================
``mode=``                     ``None``/``"default"`` or a mode whose features Ember
                              implements (:func:`~ember.runtime.pipeline.check_mode`;
                              ``reduce-overhead``: CUDA graphs)
``options={"backend": B}``    the Ember backend: ``"inductor"`` (default),
                              ``"aot_eager"`` or ``"eager"``
``options={...}``             any key a stage of that backend declares
                              (``Stage.options``: inductor's ``device``,
                              ``precompile``, ``precompile_triton``, ``strict``,
                              ``eager_random``, ``emulate_precision_casts``,
                              ``attention_dropout``; aot's ``aot.*``); another
                              key is a ``ValueError``
``dynamic=True`` / automatic  symbolic inputs: the graph compiles once, as a
dynamic                       symbolic program, for every size its ranges and guards
                              allow
============================  =====================================================

Dynamo hands symbolic sizes over after an input's shape changes (its default
"automatic dynamic"), or from the start with ``dynamic=True``. Such a graph is recorded
as a symbolic program (:func:`~ember.runtime.fx_import.record_fx`) and compiled once
through the same pipeline; its ``SymInt`` inputs are checked against the sizes they
stand for and dropped. Where Ember cannot keep the graph symbolic, it is compiled for
each concrete input shape instead (:class:`ShapeSpecialized`, up to
``recompile_limit`` shapes, then eagerly), with a :class:`ShapeSpecializationWarning`
and a line under ``EMBER_LOGS=fallbacks`` giving the reason, counted in
:data:`per_shape_fallbacks`:

=========================================  =========================================
why                                        reason counted
=========================================  =========================================
a stage declines the symbolic program      ``stage declined: <the stage's reason>``
(:class:`~ember.runtime.stages.StageDeclined`)
the graph cannot be recorded symbolically  ``import: <the importer's reason>``
(a Python number Dynamo made symbolic,
:class:`~ember.runtime.foreign_shapes.SymbolicImportError`; a
symbolic float, ``x.shape[-1] ** -0.5``,
:class:`~ember.runtime.tracing_errors.RecordingError`)
the recording fixed a size Dynamo left      ``import: the recording specialised
symbolic (a guard of an op specialised it)  input NAME dim D (= SIZE)``
=========================================  =========================================

A graph that turns grad mode on inside (``with torch.enable_grad():``, which Dynamo
writes as ``torch._C._set_grad_enabled(True)``) while it is compiled under
``torch.no_grad()`` runs as Dynamo captured it, eagerly: an Ember program is wholly an
inference or a training program, and this one would be both. So does a graph that
registers a gradient hook on one of its values (``h.register_hook(fn)``, Dynamo's
``higher_order.register_hook``): Ember's backward would not call it; and one that applies
a custom ``torch.autograd.Function`` (``higher_order.autograd_function_apply``: Ember
would differentiate its forward instead of running its backward) or calls another
higher-order operator Ember does not record (``torch.cond``, ``while_loop``, ``scan``,
``flex_attention``; :data:`RECORDED_HIGHER_ORDER_OPS` are recorded). Each warns
(:class:`EagerGraphWarning`), logs under ``EMBER_LOGS=fallbacks`` and counts in
:data:`eager_graphs`.
"""

from __future__ import annotations

import collections
import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from ember.runtime._torch import (
    fixed_by_its_shape_env,
    higher_order_name,
    is_grad_mode_switch,
)
from ember.runtime.autograd import keep_backward_from_dynamo
from ember.runtime.callable import InputAliasingError, ProgramCallable
from ember.runtime.config import config
from ember.runtime.foreign_shapes import SymbolicImportError
from ember.runtime.fx_import import BakedValueChanged, FxImport, is_symbolic, record_fx
from ember.runtime.ir import TensorMeta
from ember.runtime.ir.symbolic import ShapeError
from ember.runtime.logs import log
from ember.runtime.pipeline import BACKENDS, check_mode, check_options, compile_program
from ember.runtime.saved_hooks import hooks_kept_out
from ember.runtime.stages import StageDeclined
from ember.runtime.tracing_errors import RecordingError

__all__ = ["DEFAULT_BACKEND", "DynamoCompiled", "EagerGraphWarning",
           "ShapeSpecializationWarning", "ShapeSpecialized", "checked_options", "eager_graphs",
           "ember", "per_shape_fallbacks"]

per_shape_fallbacks: collections.Counter[str] = collections.Counter()
"""Symbolic Dynamo graphs compiled per shape instead, by reason (``"stage declined:
..."``, ``"import: ..."``); one count per graph."""

eager_graphs: collections.Counter[str] = collections.Counter()
"""Dynamo graphs Ember runs eagerly, by reason; one count per graph."""

DEFAULT_BACKEND = "inductor"
"""The Ember backend ``torch.compile(backend="ember")`` uses unless
``options={"backend": ...}`` names another."""

BACKEND_OPTION = "backend"


class DynamoCompiled:
    """A compiled Dynamo graph: ``fn(*inputs)`` with the GraphModule's flat inputs
    returns what the GraphModule returns.

    Dynamo does not guard on how distinct tensor inputs share memory; the program does
    (:class:`~ember.runtime.callable.InputAliasingError`: inputs captured as views of one
    another, or an input it writes, that share memory otherwise in a call). Given the
    GraphModule (``recompile``), such a call compiles it again for its own inputs, kept
    by their sharing pattern (:func:`_sharing`, up to ``recompile_limit`` patterns, then
    the error stands); logged under ``recompiles``.

    Attributes:
        imported: the recorded GraphModule (program, attribute tensors, output spec).
        compiled: the pipeline's :class:`ProgramCallable` of the program.
    """

    def __init__(self, imported: FxImport, compiled: ProgramCallable,
                 recompile: Callable[[Sequence[Any]], DynamoCompiled] | None = None,
                 eager: Callable[..., Any] | None = None,
                 per_shape: Callable[[str], ShapeSpecialized] | None = None) -> None:
        self.imported = imported
        self.compiled = compiled
        self._recompile = recompile
        self._eager = eager  # the GraphModule's forward, past the limit of values
        self._eager_noted = False
        self._writes_checked = False  # _refuse_inference_writes: on the first call
        self.by_sharing: dict[tuple[Any, ...], DynamoCompiled] = {}
        self.for_sharing = False  # compiled for the sharing of the inputs that refused
        self.by_value: dict[tuple[float, ...], DynamoCompiled] = {}
        self._per_shape = per_shape  # a symbolic graph's: made on its first use
        self.specialized: ShapeSpecialized | None = None

    def __call__(self, *inputs: Any) -> Any:
        # NOTE: the GraphModule's own tensors are passed live (not the program's
        # detached copies): gradients reach its parameters, buffer writes reach it.
        # A symbolic graph's SymInt inputs are checked and dropped.
        try:
            flat = tuple(self.imported.program_inputs(inputs)) \
                if self.imported.drops_inputs else inputs
        except BakedValueChanged as e:  # a learning rate a scheduler changed
            if self._per_shape is not None:
                return self._specialize(inputs, f"a baked float input changed: {e}")
            return self._other_values(inputs, e)
        if not self._writes_checked:
            _refuse_inference_writes([*flat, *self.imported.attributes],
                                     self.compiled.mutated_inputs)
            self._writes_checked = True
        try:
            outputs = self.compiled([*flat, *self.imported.attributes])
        except InputAliasingError as e:  # raised before the program runs
            if self.for_sharing:  # compiled for this very sharing: the error stands
                raise
            return self._shared_otherwise(inputs, e)
        except ShapeError as e:  # raised before the program runs, by a guard
            if self._per_shape is None:
                raise
            return self._specialize(inputs, f"a guard of Ember's failed: {e}")
        return self.imported.rebuild(outputs)

    def _specialize(self, inputs: tuple[Any, ...], reason: str) -> Any:
        """Run ``inputs`` of a symbolic graph that its program refused through programs
        compiled for their shapes (and values). The program's guards are Ember's, some
        of which Dynamo does not have (a size its recording specialised: a strided
        convolution's output length of 1), and the values it bakes are fixed; Dynamo
        calls the graph for every input its own guards pass."""
        assert self._per_shape is not None
        if self.specialized is None:
            self.specialized = self._per_shape(reason)
        return self.specialized(*inputs)

    def _other_values(self, inputs: tuple[Any, ...], error: BakedValueChanged) -> Any:
        """Run ``inputs``, whose baked scalars (float attributes Dynamo passes as
        tensors: an optimizer's learning rate) differ from :attr:`compiled`'s, through
        the variant compiled for their values. Past ``recompile_limit`` values the
        GraphModule runs eagerly (warned and counted once: :func:`_note_eager`)."""
        key = tuple(float(inputs[b.position]) for b in self.imported.baked_scalars)
        variant = self._variant(self.by_value, key, inputs, error, "for new values")
        if variant is not None:
            return variant(*inputs)
        if self._eager is None:
            raise error
        if not self._eager_noted:
            self._eager_noted = True
            _note_eager(f"its float inputs took more than recompile_limit "
                        f"({config.recompile_limit}) values ({error})")
        return self._eager(*inputs)

    def _shared_otherwise(self, inputs: tuple[Any, ...], error: InputAliasingError) -> Any:
        """Run ``inputs``, which :attr:`compiled` refused, through the variant compiled
        for their sharing pattern; ``error`` stands at the limit."""
        variant = self._variant(self.by_sharing, _sharing(inputs), inputs, error,
                                "for inputs that share memory otherwise")
        if variant is None:
            raise error
        variant.for_sharing = True
        return variant(*inputs)

    def _variant(self, table: dict[Any, DynamoCompiled], key: Any, inputs: tuple[Any, ...],
                 error: Exception, why: str) -> DynamoCompiled | None:
        """The variant of ``table`` for ``key``, compiled now for ``inputs`` if new
        (logged under ``recompiles``); None past ``recompile_limit`` variants or without
        the GraphModule."""
        variant = table.get(key)
        if variant is None:
            if self._recompile is None or len(table) + 1 >= config.recompile_limit:
                return None
            log("recompiles", f"compiling a Dynamo graph again {why} ({error})")
            variant = table[key] = self._recompile(inputs)
        return variant


def _refuse_inference_writes(inputs: Sequence[Any], written: list[int]) -> None:
    """Raise, as eager does, when the graph writes an inference tensor outside inference
    mode (Dynamo's recording does not). Checked on a graph's first call only: Dynamo's
    guards on each tensor's dispatch keys and on the inference mode keep later calls
    alike."""
    if torch.is_inference_mode_enabled():
        return
    for i in written:
        t = inputs[i] if i < len(inputs) else None
        if isinstance(t, torch.Tensor) and t.is_inference():
            raise RuntimeError("Inplace update to inference tensor outside InferenceMode is "
                               f"not allowed (input {i} of the graph); clone it first")


def _sharing(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """How ``inputs``' tensors share storage: for each, the position of the first tensor
    over the same storage, its storage offset and strides (other values: None)."""
    first: dict[int, int] = {}
    return tuple((first.setdefault(v.untyped_storage().data_ptr(), i), v.storage_offset(),
                  v.stride()) if isinstance(v, torch.Tensor) else None
                 for i, v in enumerate(inputs))


class EagerGraphWarning(UserWarning):
    """A Dynamo graph runs eagerly, as Dynamo captured it (the message says why)."""


class ShapeSpecializationWarning(UserWarning):
    """A Dynamo graph with symbolic sizes is compiled once per concrete input shape,
    because Ember could not keep it symbolic (the message says why)."""


class ShapeSpecialized:
    """A Dynamo graph with symbolic inputs, compiled for each concrete input signature
    it is called with: tensor shapes, strides, dtypes, devices and ``requires_grad``,
    and the values of integer inputs (baked into that shape's program).

    After ``recompile_limit`` signatures a new one runs the GraphModule eagerly, with a
    warning, counted in :attr:`eager_calls`.
    """

    def __init__(self, graph_module: torch.fx.GraphModule, backend: str,
                 options: dict[str, Any], mode: str | None, reason: str) -> None:
        self.graph_module = graph_module
        self.backend, self.options, self.mode = backend, options, mode
        self.reason = reason
        self.compiled: dict[tuple[Any, ...], DynamoCompiled] = {}
        self.eager_calls = 0
        self._warned_limit = False
        per_shape_fallbacks[reason] += 1
        message = (f"torch.compile(backend='ember') got a graph with symbolic sizes that "
                   f"Ember cannot compile symbolically ({reason}); it is compiled once per "
                   "input shape")
        warnings.warn(message, ShapeSpecializationWarning, stacklevel=3)
        log("fallbacks", message)

    def __call__(self, *inputs: Any) -> Any:
        key = tuple(_signature(v) for v in inputs)
        compiled = self.compiled.get(key)
        if compiled is None:
            limit = config.recompile_limit
            if len(self.compiled) >= limit:
                self.eager_calls += 1
                if not self._warned_limit:
                    self._warned_limit = True
                    warnings.warn(
                        f"a symbolic Dynamo graph met more than {limit} input shapes "
                        "(recompile_limit): new shapes run the graph eagerly",
                        ShapeSpecializationWarning, stacklevel=2)
                log("recompiles", f"shape limit ({limit}) hit: runs eagerly for {key}")
                return self.graph_module(*inputs)
            log("recompiles", f"compiling a symbolic Dynamo graph for the input shapes "
                              f"{key} (shape {len(self.compiled) + 1})")
            compiled = self._compile(inputs)
            self.compiled[key] = compiled
        return compiled(*[v for v in inputs if isinstance(v, torch.Tensor)])

    def _compile(self, inputs: Sequence[Any]) -> DynamoCompiled:
        gm = _with_scalars_baked(self.graph_module, inputs)
        tensors = [v for v in inputs if isinstance(v, torch.Tensor)]
        imported = record_fx(gm, tensors)

        def with_values(new: Sequence[Any]) -> DynamoCompiled:
            # the same shape with other values of the floats it bakes (by_value)
            swapped = iter(new)
            return self._compile([next(swapped) if isinstance(v, torch.Tensor) else v
                                  for v in inputs])

        return DynamoCompiled(imported, compile_program(imported.program, self.backend,
                                                        self.options, self.mode),
                              with_values, self.graph_module.forward)


def _signature(value: Any) -> tuple[Any, ...]:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.storage_offset(), value.dtype,
                value.device, value.requires_grad)
    return (type(value), value)


def _with_scalars_baked(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose non-tensor inputs (sizes Dynamo made symbolic) are replaced
    by the values of this call, and whose placeholders no longer carry Dynamo's symbolic
    fake values (the copy records as a static program)."""
    graph = copy.deepcopy(gm.graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        for key in ("example_value", "val"):
            node.meta.pop(key, None)
    if len(placeholders) != len(inputs):
        raise ValueError(f"the Dynamo graph takes {len(placeholders)} inputs, got "
                         f"{len(inputs)}")
    for node, value in zip(placeholders, inputs):
        if isinstance(value, torch.Tensor):
            continue
        for user in list(node.users):
            user.args = torch.fx.node.map_arg(
                user.args, lambda a, n=node, v=value: v if a is n else a)  # type: ignore[misc]
            user.kwargs = torch.fx.node.map_arg(
                user.kwargs, lambda a, n=node, v=value: v if a is n else a)  # type: ignore[misc]
        graph.erase_node(node)
    return torch.fx.GraphModule(gm, graph)


def ember(
    graph_module: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> DynamoCompiled | ShapeSpecialized | Callable[..., Any]:
    """The Dynamo backend: compile ``graph_module`` with Ember.

    Args:
        graph_module: the FX graph Dynamo captured (torch-level).
        example_inputs: its example inputs, one per placeholder (real or fake tensors).
        mode: ``torch.compile``'s ``mode`` (None or ``"default"``).
        options: ``torch.compile``'s ``options``: ``"backend"`` picks the Ember backend
            (default ``"inductor"``); every other key must be one a stage of that
            backend declares.

    Returns:
        A :class:`DynamoCompiled` taking the flat inputs and returning the
        GraphModule's (tuple or list) result (a symbolic program for a symbolic graph),
        or a :class:`ShapeSpecialized` for a symbolic graph Ember cannot keep symbolic,
        or the graph's own ``forward`` where it runs eagerly (module doc).

    Raises:
        ValueError: an unknown Ember backend, an option no stage reads, or an option
            value of the wrong type (the message lists the valid ones).
        NotImplementedError: a ``torch.compile`` mode Ember does not implement.
        ember.runtime.stages.StageNotInstalledError: a stage of the backend (by default
            ``ember-aot`` and ``ember-inductor``) is not installed.
    """
    # NOTE: under torch.utils.checkpoint (non-reentrant) the compile runs inside the
    # first forward, whose saved-tensor hooks would count the tensors the recording
    # saves (the recomputation, which compiles nothing, then saves fewer)
    with hooks_kept_out():
        backend, stage_options = checked_options(options)
        check_mode(None if mode == "default" else mode, backend)
        keep_backward_from_dynamo()
        reason = _eager_reason(graph_module)
        if reason is not None:
            _note_eager(reason)
            forward: Callable[..., Any] = graph_module.forward
            return forward
        if not _is_symbolic_graph(graph_module, example_inputs):
            def compiled_for(inputs: Sequence[Any]) -> DynamoCompiled:
                imported = record_fx(graph_module, inputs)
                compiled = compile_program(imported.program, backend, stage_options, mode)
                return DynamoCompiled(imported, compiled, compiled_for, graph_module.forward)

            return compiled_for(example_inputs)

        def per_shape(reason: str) -> ShapeSpecialized:
            return ShapeSpecialized(graph_module, backend, stage_options, mode, reason)

        try:
            imported = record_fx(graph_module, example_inputs)
        except (SymbolicImportError, RecordingError) as e:  # RecordingError: a SymFloat
            return per_shape(f"import: {e}")
        except RuntimeError as e:  # torch's kernel asked for a concrete size of a SymInt
            return per_shape(f"import: {type(e).__name__}: {str(e).splitlines()[-1]}")
        fixed = _specialised_dim(graph_module, example_inputs, imported)
        if fixed is not None:  # the program takes that size only; Dynamo's guards take any
            return per_shape(f"import: the recording specialised {fixed}")
        try:
            compiled = compile_program(imported.program, backend, stage_options, mode,
                                       eager_on_decline=False)
        except StageDeclined as e:
            return per_shape(f"stage declined: {e}")
        log("recompiles", f"compiled a symbolic Dynamo graph once for the sizes "
                          f"{_ranges_text(imported)}")
        return DynamoCompiled(imported, compiled, per_shape=per_shape)


def _eager_reason(graph_module: torch.fx.GraphModule) -> str | None:
    """Why the graph runs eagerly (module doc), or None: it turns grad mode on
    (Dynamo's ``_set_grad_enabled(True)``) while compiled under ``no_grad``, or it calls
    a higher-order operator Ember does not record (:data:`EAGER_HIGHER_ORDER_OPS`)."""
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        if (is_grad_mode_switch(node.target) and node.args and node.args[0] is True
                and not torch.is_grad_enabled()):
            return ("it turns grad mode on inside (torch.enable_grad()) while compiled "
                    "under torch.no_grad()")
        name = higher_order_name(node.target)
        if name is not None and name not in RECORDED_HIGHER_ORDER_OPS:
            return EAGER_HIGHER_ORDER_OPS.get(name, _OTHER_HIGHER_ORDER_OP).format(name)
    return None


RECORDED_HIGHER_ORDER_OPS = frozenset({
    "tag_activation_checkpoint",  # checkpoint(): its function's ops, recomputed or not
    "triton_kernel_wrapper_mutation", "triton_kernel_wrapper_functional",  # user kernels
})
"""Higher-order operators in a Dynamo graph that Ember records like other calls."""

EAGER_HIGHER_ORDER_OPS: dict[str, str] = {
    "register_hook": "it registers a gradient hook on one of its values "
                     "(Tensor.register_hook), which Ember's backward would not call",
    "autograd_function_apply": "it applies a custom torch.autograd.Function, whose "
                               "backward Ember would not run (it would differentiate "
                               "the forward instead)",
}
"""Why a graph calling one of these higher-order operators runs eagerly."""

_OTHER_HIGHER_ORDER_OP = ("it calls torch.ops.higher_order.{}, a higher-order operator "
                          "Ember does not compile")


def _note_eager(reason: str) -> None:
    """Warn, log under ``fallbacks`` and count in :data:`eager_graphs` that a graph runs
    eagerly for ``reason``."""
    eager_graphs[reason] += 1
    message = f"torch.compile(backend='ember') runs a graph eagerly: {reason}"
    warnings.warn(message, EagerGraphWarning, stacklevel=3)
    log("fallbacks", message)


def _specialised_dim(graph_module: torch.fx.GraphModule, example_inputs: Sequence[Any],
                     imported: FxImport) -> str | None:
    """The first input dim that Dynamo left symbolic and the recorded program fixed to
    one size (a guard of the recording specialised its symbol: ``F.interpolate`` with a
    float ``scale_factor``), as ``"input NAME dim D (= SIZE)"``; None when none was. A
    dim Dynamo's own tracing fixed (its guards check it) does not count."""
    metas = {p.name: p.meta for p in imported.program.forward.placeholders}
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs):
        fake = value if is_symbolic(value) else node.meta.get("example_value")
        meta = metas.get(node.name)
        if not isinstance(fake, torch.Tensor) or not isinstance(meta, TensorMeta):
            continue
        for dim, (size, kept) in enumerate(zip(fake.shape, meta.sizes)):
            if (isinstance(size, torch.SymInt) and type(kept) is int
                    and not fixed_by_its_shape_env(size)):
                return f"input {node.name} dim {dim} (= {kept})"
    return None


def _is_symbolic_graph(graph_module: torch.fx.GraphModule,
                       example_inputs: Sequence[Any]) -> bool:
    """Whether Dynamo handed over symbolic sizes: ``SymInt`` example inputs, or
    placeholders whose fake values have symbolic sizes."""
    if any(is_symbolic(v) for v in example_inputs):
        return True
    return any(is_symbolic(n.meta.get("example_value"))
               for n in graph_module.graph.nodes if n.op == "placeholder")


def _ranges_text(imported: FxImport) -> str:
    symbols = imported.program.forward.symbols
    return ", ".join(f"{s} in {r}" for s, r in symbols.items()) or "(all specialised)"


def checked_options(options: Mapping[str, Any] | None) -> tuple[str, dict[str, Any]]:
    """The Ember backend ``options`` name and the options for its stages, each key
    checked against the stages' declared ``options`` (``Stage.options``).

    Raises:
        ValueError: ``options`` is not a mapping, names an unknown backend or a key no
            stage of the backend reads, or gives a value of the wrong type.
        ember.runtime.stages.StageNotInstalledError: a stage of the backend is not
            installed.
    """
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        # NOTE: a bad setting is a ValueError, whatever is wrong with it (as the frontend)
        raise ValueError(f"options={options!r}: expected a dict or None")  # noqa: TRY004
    stage_options = dict(options)
    backend = stage_options.pop(BACKEND_OPTION, DEFAULT_BACKEND)
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"option 'backend'={backend!r}: unknown Ember backend; "
                         f"backends: {', '.join(BACKENDS)}")
    check_options(backend, stage_options,
                  where=f"torch.compile(backend='ember') with Ember backend {backend!r}",
                  also_valid=(BACKEND_OPTION,))
    return backend, stage_options
