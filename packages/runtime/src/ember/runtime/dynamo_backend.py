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
``mode=``                     ``None``/``"default"``; other torch modes raise
                              ``NotImplementedError`` (:func:`~ember.runtime.pipeline.check_mode`)
``options={"backend": B}``    the Ember backend: ``"inductor"`` (default),
                              ``"aot_eager"`` or ``"eager"``
``options={...}``             any key a stage of that backend declares
                              (``Stage.options``: inductor's ``strict``,
                              ``eager_random``, ``device``, ``precompile``; aot's
                              ``aot.*``); another key is a ``ValueError``
``dynamic=True`` / automatic  symbolic inputs: compiled once per concrete input
dynamic                       shape at call time (:class:`ShapeSpecialized`, with a
                              :class:`ShapeSpecializationWarning`) until Ember has
                              dynamic shapes (issue #15)
============================  =====================================================

Dynamo hands symbolic sizes over after an input's shape changes (its default
"automatic dynamic"), or from the start with ``dynamic=True``. Ember cannot compile a
symbolic program yet: such a graph is compiled for each concrete shape it is called
with (up to ``recompile_limit`` shapes, after which it runs the GraphModule eagerly),
each compile logged under ``EMBER_LOGS=recompiles``, never silently.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.config import config
from ember.runtime.fx_import import FxImport, is_symbolic, record_fx
from ember.runtime.logs import log
from ember.runtime.pipeline import BACKENDS, check_mode, check_options, compile_program

__all__ = ["DEFAULT_BACKEND", "DynamoCompiled", "ShapeSpecializationWarning",
           "ShapeSpecialized", "checked_options", "ember"]

DEFAULT_BACKEND = "inductor"
"""The Ember backend ``torch.compile(backend="ember")`` uses unless
``options={"backend": ...}`` names another."""

BACKEND_OPTION = "backend"


class DynamoCompiled:
    """A compiled Dynamo graph: ``fn(*inputs)`` with the GraphModule's flat inputs
    returns what the GraphModule returns.

    Attributes:
        imported: the recorded GraphModule (program, attribute tensors, output spec).
        compiled: the pipeline's :class:`ProgramCallable` of the program.
    """

    def __init__(self, imported: FxImport, compiled: ProgramCallable) -> None:
        self.imported = imported
        self.compiled = compiled

    def __call__(self, *inputs: Any) -> Any:
        # NOTE: the GraphModule's own tensors are passed live (not the program's
        # detached copies): gradients reach its parameters, buffer writes reach it.
        outputs = self.compiled([*inputs, *self.imported.attributes])
        return self.imported.rebuild(outputs)


class ShapeSpecializationWarning(UserWarning):
    """A Dynamo graph with symbolic sizes is compiled once per concrete input shape (Ember
    has no dynamic shapes yet, issue #15)."""


class ShapeSpecialized:
    """A Dynamo graph with symbolic inputs, compiled for each concrete input signature
    it is called with: tensor shapes, strides, dtypes, devices and ``requires_grad``,
    and the values of integer inputs (baked into that shape's program).

    After ``recompile_limit`` signatures a new one runs the GraphModule eagerly, with a
    warning, counted in :attr:`eager_calls`.
    """

    def __init__(self, graph_module: torch.fx.GraphModule, backend: str,
                 options: dict[str, Any], mode: str | None) -> None:
        self.graph_module = graph_module
        self.backend, self.options, self.mode = backend, options, mode
        self.compiled: dict[tuple[Any, ...], DynamoCompiled] = {}
        self.eager_calls = 0
        self._warned_limit = False
        warnings.warn(
            "torch.compile(backend='ember') got a graph with symbolic sizes (dynamic=True, "
            "or Dynamo's automatic dynamic shapes after a shape change); Ember has no "
            "dynamic shapes yet (issue #15) and compiles it once per input shape. Pass "
            "dynamic=False to keep Dynamo from making shapes symbolic.",
            ShapeSpecializationWarning, stacklevel=2)

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
        return DynamoCompiled(imported, compile_program(imported.program, self.backend,
                                                        self.options, self.mode))


def _signature(value: Any) -> tuple[Any, ...]:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.storage_offset(), value.dtype,
                value.device, value.requires_grad)
    return (type(value), value)


def _with_scalars_baked(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose non-tensor inputs (sizes Dynamo made symbolic) are replaced
    by the values of this call."""
    graph = copy.deepcopy(gm.graph)
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
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
) -> DynamoCompiled | ShapeSpecialized:
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
        GraphModule's (tuple or list) result.

    Raises:
        ValueError: an unknown Ember backend, an option no stage reads, or an option
            value of the wrong type (the message lists the valid ones).
        NotImplementedError: a ``torch.compile`` mode Ember does not implement.
        ember.runtime.stages.StageNotInstalledError: a stage of the backend (by default
            ``ember-aot`` and ``ember-inductor``) is not installed.
    """
    check_mode(None if mode == "default" else mode)
    backend, stage_options = checked_options(options)
    if any(is_symbolic(v) for v in example_inputs):
        return ShapeSpecialized(graph_module, backend, stage_options, mode)
    imported = record_fx(graph_module, example_inputs)
    compiled = compile_program(imported.program, backend, stage_options, mode)
    return DynamoCompiled(imported, compiled)


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
