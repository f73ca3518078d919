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
``dynamic=True``              symbolic inputs: ``NotImplementedError`` (issue #15)
============================  =====================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from ember.runtime.callable import ProgramCallable
from ember.runtime.fx_import import FxImport, record_fx
from ember.runtime.pipeline import BACKENDS, check_mode, compile_program
from ember.runtime.stages import load_stage

__all__ = ["DEFAULT_BACKEND", "DynamoCompiled", "checked_options", "ember"]

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


def ember(
    graph_module: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> DynamoCompiled:
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
        NotImplementedError: a ``torch.compile`` mode Ember does not implement, or a
            symbolic input (``dynamic=True``; dynamic shapes are issue #15).
        ember.runtime.stages.StageNotInstalledError: a stage of the backend (by default
            ``ember-aot`` and ``ember-inductor``) is not installed.
    """
    check_mode(None if mode == "default" else mode)
    backend, stage_options = checked_options(options)
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
    accepted: dict[str, tuple[type, ...]] = {}
    undeclared = False
    for name in BACKENDS[backend]:
        declared = load_stage(name).options  # StageNotInstalledError before any work
        if declared is None:
            undeclared = True
        else:
            accepted.update(declared)
    for key, value in stage_options.items():
        types = accepted.get(key)
        if types is None:
            if undeclared:
                continue
            valid = ", ".join(sorted([BACKEND_OPTION, *accepted]))
            raise ValueError(f"unknown option {key!r} for torch.compile(backend='ember') "
                             f"with Ember backend {backend!r}; valid options: {valid}")
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            names = " or ".join("None" if t is type(None) else t.__name__ for t in types)
            raise ValueError(f"option {key!r}={value!r}: expected {names}")
    return backend, stage_options
