"""Loading a ``compiled``-dialect program: wrappers + kernels -> executors.

See README.md in this folder for the artifact layout.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.compiled._torch import raw_current_device
from ember.runtime.compiled.code_cache import wrapper_code
from ember.runtime.compiled.wrapper_support import make_namespace
from ember.runtime.config import config
from ember.runtime.ir import IRFormatError, Program, VerificationError
from ember.runtime.ir.contracts import CompiledGraphEntry, CompiledMetadata
from ember.runtime.ir.effects import check_may_run_code
from ember.runtime.ir.program_checks import register_program_check
from ember.runtime.ir.symbolic import SymbolBinder

# Kernel languages (the contract's KERNEL_LANGS) and the launcher module for each
# (``load_kernel(entry: KernelEntry, files)``).
LAUNCHERS = {"cpp": "ember.runtime.compiled.cpp_launcher",
             "triton": "ember.runtime.compiled.triton_launcher"}

Executor = Callable[[list[Any]], list[Any]]


#: the attribute under which a compiled graph's executor offers a second callable that
#: runs the graph on a list it is handed, and empties: ``getattr(executor, CONSUME)(inputs)``
#: leaves ``inputs`` empty and holds the only references it had, so the wrapper frees
#: each input at its last use (a backward's saved activations: ``ember.runtime.autograd``).
#: The executor itself leaves its caller's list as it was.
CONSUME = "consume"


def graph_entry(program: Program, graph_name: str) -> CompiledGraphEntry:
    """``program.metadata["compiled"]["graphs"][graph_name]``, decoded and checked
    against the program's files.

    Raises:
        IRFormatError: naming the missing or malformed part (a
            :class:`~ember.runtime.ir.contracts.MetadataError` for the metadata itself).
    """
    if program.dialect != "compiled":
        raise IRFormatError(f"expected a 'compiled' program, got dialect {program.dialect!r}")
    entry = CompiledMetadata.from_program(program).graphs.get(graph_name)
    if entry is None:
        raise IRFormatError(f"compiled program has no code for graph {graph_name!r}")
    if entry.wrapper not in program.files:
        raise IRFormatError(f"compiled graph {graph_name!r}: wrapper file "
                            f"{entry.wrapper!r} is not in the program's files")
    return entry


def verify_compiled(program: Program) -> None:
    """The ``compiled`` dialect's rules (README.md here): every graph has its entry with
    a wrapper file in ``program.files``, and each kernel a known language and a source
    file. :func:`ember.runtime.ir.verify` runs it for ``dialect="compiled"``.

    Raises:
        VerificationError: naming the graph, kernel and missing or malformed part.
    """
    if program.dialect != "compiled":
        raise VerificationError(f"expected a compiled program, got dialect {program.dialect!r}")
    for name in program.graphs:
        try:
            entry = graph_entry(program, name)
        except IRFormatError as e:
            raise VerificationError(f"graph {name!r}: {e}") from None
        for kernel in entry.kernels:
            if kernel.source not in program.files:
                raise VerificationError(f"graph {name!r}, kernel {kernel.name!r}: source "
                                        f"file {kernel.source!r} is not in program.files")


register_program_check("compiled", verify_compiled)


def load_kernels(program: Program, entry: CompiledGraphEntry) -> dict[str, Callable[..., None]]:
    """The callables of a graph's kernels, by name."""
    kernels: dict[str, Callable[..., None]] = {}
    for k in entry.kernels:
        launcher = importlib.import_module(LAUNCHERS[k.lang])
        kernels[k.name] = launcher.load_kernel(k, program.files)
    return kernels


def load_executor(program: Program, graph_name: str = "forward") -> Executor:
    """The executor of graph ``graph_name`` of a compiled program: a callable taking the
    graph's inputs (one per placeholder, in order) and returning its outputs.

    The graph's wrapper source is executed in a fresh namespace (no pickle, no imports
    beyond torch), its code object compiled once a machine (:mod:`.code_cache`); its
    kernels are compiled or fetched from the on-disk cache. That is
    running code: a program read from a file (``program.untrusted_origin`` set) is
    refused unless ``EMBER_TRUST_ARTIFACTS=1`` (load trusted files with
    ``load(path, trusted=True)`` or ``ember.runtime.compiled.load_artifact(path, trusted=True)``).

    Raises:
        IRFormatError: the program's compiled metadata or files are malformed.
        UntrustedProgramError: the program came from a file nobody said to trust.
    """
    check_may_run_code(program, config.trust_artifacts)
    entry = graph_entry(program, graph_name)
    kernels = load_kernels(program, entry)
    constants: dict[str, torch.Tensor] = {}
    for var, target in entry.constants.items():
        if target not in program.tensors:
            raise IRFormatError(f"compiled graph {graph_name!r}: constant {target!r} "
                                "is not among the program's tensors")
        constants[var] = program.tensors[target]
    graph = program.graphs.get(graph_name)
    binder = SymbolBinder(graph) if graph is not None and graph.symbols else None
    namespace = make_namespace(kernels, constants, binder)
    source = program.files[entry.wrapper].decode()
    code = wrapper_code(source, f"<ember wrapper {graph_name}>")  # compiled once a machine
    exec(code, namespace)  # noqa: S102 - generated wrapper, see README.md
    call = namespace.get("call")
    if not callable(call):
        raise IRFormatError(f"compiled graph {graph_name!r}: wrapper defines no call()")

    def unknown_name(e: NameError) -> None:
        if e.name is not None and e.name not in namespace:
            # a wrapper naming what its program does not hold (an edited artifact)
            raise IRFormatError(
                f"compiled graph {graph_name!r}: its wrapper uses {e.name!r}, which the "
                "program does not define (a kernel or constant missing from its "
                "metadata)") from e

    def run(inputs: list[Any]) -> list[Any]:
        # NOTE: generated kernels are opaque to autograd; a compiled graph is never
        # differentiated itself (training runs its backward graph, ember.runtime.autograd),
        # so extern calls must not record a partial autograd graph either. (Inference
        # callers are already under no_grad: entering it again costs ~2 us a call.) The
        # wrapper empties the list it is given: the caller's stays as it was.
        try:
            if not torch.is_grad_enabled():
                return list(call(list(inputs)))
            with torch.no_grad():
                return list(call(list(inputs)))
        except NameError as e:
            unknown_name(e)
            raise

    def consume(inputs: list[Any]) -> list[Any]:
        # the caller hands its list over: the wrapper empties it and frees each input
        # after its last use (the backward's saved activations: ember.runtime.autograd).
        # (run's body again rather than run calling it: run is every forward call's path)
        try:
            if not torch.is_grad_enabled():  # the backward runs under no_grad
                return list(call(inputs))
            with torch.no_grad():
                return list(call(inputs))
        except NameError as e:
            unknown_name(e)
            raise

    executor = on_device(entry.device, run)
    setattr(executor, CONSUME, on_device(entry.device, consume))
    return executor


def on_device(device: torch.device, run: Callable[[list[Any]], list[Any]]
              ) -> Callable[[list[Any]], list[Any]]:
    """``run`` with ``device`` made the current CUDA device for its call where it is not
    (a model on ``cuda:1`` called while device 0 is current): Triton launches its
    kernels, and the wrapper allocates, on the current device. One C call a call to
    tell; ``run`` itself for any other device."""
    index = device.index if device.type == "cuda" else None
    current = raw_current_device() if index is not None else None
    if current is None:
        return run

    def guarded(inputs: list[Any]) -> list[Any]:
        if current() == index:
            return run(inputs)
        with torch.cuda.device(index):
            return run(inputs)

    return guarded
