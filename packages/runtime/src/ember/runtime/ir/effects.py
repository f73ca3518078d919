"""What a program read from a file may run without the caller's opt-in.

A program built in memory is the caller's own code. A program read from a file
(``Program.untrusted_origin`` set by :func:`~ember.runtime.ir.load` or
:func:`~ember.runtime.ir.parse_program`) is data from somewhere else; running it may
compute on its tensors, nothing more. The rule, as tables:

* a ``compiled`` program is code (a Python wrapper that is ``exec``'d, C++ built and
  loaded, Triton source); it runs only if the caller trusts it: ``trusted=True``
  (``load``, ``load_artifact``, ``run --trusted``) or ``EMBER_TRUST_ARTIFACTS=1``;
* an operator in a namespace outside :data:`PURE_NAMESPACES` is a custom operator that
  runs whatever code registered it (``c10d``: network, ``profiler``, ``debugprims``:
  files) and is refused;
* an operator of :data:`EFFECTFUL_OPS` is refused: its effects reach outside the tensors;
  so is a TorchScript builtin that ``torch.ops.aten`` also resolves but torch's
  dispatcher does not have (``aten::save``, ``aten::manual_seed``,
  ``aten::set_grad_enabled``).

The opt-ins: ``load(path, trusted=True)`` (the file is as trusted as your own code),
``Interpreter(program, allow_effects=True)``. The interpreter checks the whole graph
when it is built, so nothing runs before a refusal.
"""

from __future__ import annotations

from dataclasses import dataclass

from ember.runtime.ir._torch import is_dispatcher_op
from ember.runtime.ir.errors import UntrustedProgramError
from ember.runtime.ir.graph import Program

PURE_NAMESPACES: dict[str, str] = {
    "aten": "ATen operators: compute on tensors (except EFFECTFUL_OPS)",
    "prims": "torch primitives: compute on tensors",
}
"""Operator namespaces a loaded program may call without an opt-in."""

EFFECTFUL_OPS: dict[str, str] = {
    "aten::from_file": "reads a file by name (with shared=True, maps it for writing)",
    "aten::_print": "writes to the process's standard output",
}
"""``namespace::name`` (every overload) -> its effect outside the tensors. Add an
operator here when it reaches the OS (files, processes, network, printing)."""


@dataclass(frozen=True)
class EffectfulCall:
    """A ``call`` node that a loaded program may not run without an opt-in."""

    graph: str
    node: str
    target: str
    effect: str

    def describe(self) -> str:
        return f"graph {self.graph!r}, node %{self.node}: {self.target} {self.effect}"


def effect_of(target: str) -> str | None:
    """What operator ``target`` (``ns::name.overload``) does outside its tensors, or
    None if it only computes on them."""
    namespace, _, rest = target.partition("::")
    if namespace not in PURE_NAMESPACES:
        return (f"is a custom operator ({namespace!r} namespace): it runs whatever code "
                "registered it")
    if not is_dispatcher_op(target):
        return ("is a TorchScript builtin, not an operator of torch's dispatcher: such "
                "builtins act on the process (aten::save writes a file, "
                "aten::manual_seed reseeds, aten::set_grad_enabled switches grad mode)")
    return EFFECTFUL_OPS.get(f"{namespace}::{rest.partition('.')[0]}")


def effectful_calls(program: Program, graph: str | None = None) -> list[EffectfulCall]:
    """The calls of ``graph`` (default: every graph) with effects outside the tensors."""
    names = list(program.graphs) if graph is None else [graph]
    found = []
    for name in names:
        for node in program.graphs[name].nodes:
            if node.op != "call":
                continue
            effect = effect_of(node.target)
            if effect is not None:
                found.append(EffectfulCall(name, node.name, node.target, effect))
    return found


def check_may_run(program: Program, graph: str | None = None, *,
                  allow_effects: bool = False) -> None:
    """Refuse to run ``graph`` (default: all) of a program read from an untrusted file if
    it calls an operator with effects outside its tensors. Programs built in memory
    (``untrusted_origin`` None) always pass.

    Raises:
        UntrustedProgramError: naming the node, its operator, the effect and the opt-ins.
    """
    if program.untrusted_origin is None or allow_effects:
        return
    calls = effectful_calls(program, graph)
    if calls:
        raise UntrustedProgramError(
            f"{program.untrusted_origin}: {calls[0].describe()}; a program loaded from a "
            "file runs only operators that compute on tensors. If you trust the file, "
            "load it with load(path, trusted=True) (command line: run --trusted) or run "
            "it with Interpreter(program, allow_effects=True)")


def check_may_run_code(program: Program, trust_artifacts: bool = False) -> None:
    """Refuse to run the code of a ``compiled`` program read from an untrusted file.

    Raises:
        UntrustedProgramError: naming the file and the opt-ins.
    """
    if program.untrusted_origin is None or trust_artifacts:
        return
    raise UntrustedProgramError(
        f"{program.untrusted_origin} is a compiled artifact: it holds executable code (a "
        "Python wrapper, C++ and Triton kernel sources) that runs with your permissions. "
        "Load it only from a source you trust, with load_artifact(path, trusted=True), "
        "load(path, trusted=True), `run --trusted` on the command line, or "
        "EMBER_TRUST_ARTIFACTS=1")
