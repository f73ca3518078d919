"""Loading a ``compiled``-dialect program: wrappers + kernels -> executors.

See README.md in this folder for the artifact layout.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.compiled.wrapper_support import make_namespace
from ember.runtime.ir import IRFormatError, Program

# Kernel languages and the launcher module for each (``load_kernel(entry, files)``).
LAUNCHERS = {"cpp": "ember.runtime.compiled.cpp_launcher",
             "triton": "ember.runtime.compiled.triton_launcher"}

Executor = Callable[[list[Any]], list[Any]]


def graph_entry(program: Program, graph_name: str) -> dict[str, Any]:
    """``program.metadata["compiled"]["graphs"][graph_name]``, checked.

    Raises:
        IRFormatError: naming the missing or malformed part.
    """
    if program.dialect != "compiled":
        raise IRFormatError(f"expected a 'compiled' program, got dialect {program.dialect!r}")
    compiled = program.metadata.get("compiled")
    if not isinstance(compiled, dict) or not isinstance(compiled.get("graphs"), dict):
        raise IRFormatError("compiled program has no metadata['compiled']['graphs']")
    entry = compiled["graphs"].get(graph_name)
    if not isinstance(entry, dict):
        raise IRFormatError(f"compiled program has no code for graph {graph_name!r}")
    for key, kind in (("wrapper", str), ("kernels", list), ("constants", dict)):
        if not isinstance(entry.get(key), kind):
            raise IRFormatError(f"compiled graph {graph_name!r}: {key!r} missing or malformed")
    if entry["wrapper"] not in program.files:
        raise IRFormatError(f"compiled graph {graph_name!r}: wrapper file "
                            f"{entry['wrapper']!r} is not in the program's files")
    return entry


def load_kernels(program: Program, entry: dict[str, Any]) -> dict[str, Callable[..., None]]:
    """The callables of a graph's kernels, by name."""
    kernels: dict[str, Callable[..., None]] = {}
    for k in entry["kernels"]:
        if not isinstance(k, dict):
            raise IRFormatError(f"malformed kernel entry {k!r}")
        lang = k.get("lang")
        if lang not in LAUNCHERS:
            raise IRFormatError(f"kernel {k.get('name')!r}: unknown language {lang!r}; "
                                f"known: {sorted(LAUNCHERS)}")
        launcher = importlib.import_module(LAUNCHERS[lang])
        kernels[str(k["name"])] = launcher.load_kernel(k, program.files)
    return kernels


def load_executor(program: Program, graph_name: str = "forward") -> Executor:
    """The executor of graph ``graph_name`` of a compiled program: a callable taking the
    graph's inputs (one per placeholder, in order) and returning its outputs.

    The graph's wrapper source is executed in a fresh namespace (no pickle, no imports
    beyond torch); its kernels are compiled or fetched from the on-disk cache.

    Raises:
        IRFormatError: the program's compiled metadata or files are malformed.
    """
    entry = graph_entry(program, graph_name)
    kernels = load_kernels(program, entry)
    constants: dict[str, torch.Tensor] = {}
    for var, target in entry["constants"].items():
        if target not in program.tensors:
            raise IRFormatError(f"compiled graph {graph_name!r}: constant {target!r} "
                                "is not among the program's tensors")
        constants[var] = program.tensors[target]
    namespace = make_namespace(kernels, constants)
    source = program.files[entry["wrapper"]].decode()
    code = compile(source, f"<ember wrapper {graph_name}>", "exec")
    exec(code, namespace)  # noqa: S102 - generated wrapper, see README.md
    call = namespace.get("call")
    if not callable(call):
        raise IRFormatError(f"compiled graph {graph_name!r}: wrapper defines no call()")

    def run(inputs: list[Any]) -> list[Any]:
        # NOTE: generated kernels are opaque to autograd; a compiled graph is never
        # differentiated itself (training runs its backward graph, ember.runtime.autograd),
        # so extern calls must not record a partial autograd graph either.
        with torch.no_grad():
            return list(call(list(inputs)))

    return run


def load_artifact(path: Any) -> Callable[..., list[Any]]:
    """Load a compiled ``.ember`` file; returns ``fn(*user_inputs) -> list of outputs``.

    Parameters and buffers come from the file's ``program.tensors`` unless the caller
    passes every placeholder's value positionally. Mutated inputs are copied back.

    Raises:
        IRFormatError: the file is not a valid compiled program.
    """
    from ember.runtime.callable import ProgramCallable
    from ember.runtime.ir import load

    program = load(path)
    graph_entry(program, "forward")
    fn = ProgramCallable(program, load_executor)

    def call(*inputs: Any) -> list[Any]:
        return fn(list(inputs))

    call.program = program  # type: ignore[attr-defined]
    return call
