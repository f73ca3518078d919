"""Executors: how one graph of a program is run, chosen by the program's dialect.

An executor is a callable taking the graph's full input list (one value per placeholder,
in order) and returning its output values in order. ``aten`` and ``core-functional``
programs run on the reference interpreter; ``compiled`` programs run the generated code
through :mod:`ember.runtime.compiled` (which needs no compiler stage installed).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Protocol

from ember.runtime.interpreter import Interpreter
from ember.runtime.ir import Program

Executor = Callable[[list[Any]], list[Any]]


class ExecutorFactory(Protocol):
    """Builds the executor of one graph: ``factory(program, graph_name)``."""

    def __call__(self, program: Program, graph_name: str) -> Executor: ...


def make_executor(program: Program, graph_name: str = "forward") -> Executor:
    """The executor for graph ``graph_name`` of ``program``.

    Raises:
        KeyError: no such graph.
        ValueError: the program's dialect is not one Ember knows.
        RuntimeError: a ``compiled`` program, but this ``ember-runtime`` has no loader for
            compiled artifacts.
    """
    if program.dialect in ("aten", "core-functional"):
        interpreter = Interpreter(program, graph_name)

        def interpret(inputs: list[Any]) -> list[Any]:
            return interpreter.run(*inputs)

        return interpret
    if program.dialect == "compiled":
        load_executor = _compiled_loader()
        executor: Executor = load_executor(program, graph_name)
        return executor
    raise ValueError(f"cannot execute a program in dialect {program.dialect!r}")


def _compiled_loader() -> Callable[[Program, str], Executor]:
    """``ember.runtime.compiled.load_executor``, imported on first use (it pulls in the
    code that loads generated kernels). Imported from the loader module itself: the
    package also holds ``load_artifact``, which builds a callable on top of this module."""
    missing = RuntimeError(
        "this ember-runtime cannot run 'compiled' programs: "
        "ember.runtime.compiled.load_executor is missing (upgrade ember-runtime)"
    )
    try:
        compiled = importlib.import_module("ember.runtime.compiled.loader")
    except ModuleNotFoundError as e:
        if e.name not in ("ember.runtime.compiled", "ember.runtime.compiled.loader"):
            raise
        raise missing from e
    loader = getattr(compiled, "load_executor", None)
    if loader is None:
        raise missing
    return loader  # type: ignore[no-any-return]
