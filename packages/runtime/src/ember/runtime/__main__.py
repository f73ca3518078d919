"""``python -m ember.runtime``: look at, check and run ``.ember`` files.

Commands::

    python -m ember.runtime show FILE                 print the program's text form
    python -m ember.runtime verify FILE [--dialect D] "ok" (exit 0) or the error (exit 1)
    python -m ember.runtime run FILE --inputs IN.safetensors --out OUT.safetensors
                                     [--graph forward] [--trusted]

``verify`` also says when the file holds executable code (a ``compiled`` artifact: a
Python wrapper and C++/Triton kernel sources) or calls operators with effects outside
its tensors (``ember.runtime.ir.effects``). ``run`` refuses both unless ``--trusted``
(or, for compiled artifacts, ``EMBER_TRUST_ARTIFACTS=1``): only pass it for files
whose source you trust as you would a Python module's.

``run`` binds each placeholder of the graph, in order, to the tensor in ``IN`` stored
under the placeholder's name, or else under ``argI`` (``I`` its position among all the
placeholders, from 0). A placeholder labelled parameter/buffer/constant that has neither
key takes its value from the program's own tensors. A placeholder of a Python number
(ScalarMeta) reads a 0-dim tensor. Every key of ``IN`` must be used. The user-visible
outputs are saved in ``OUT`` as ``out0``, ``out1``, ... (numbers as 0-dim tensors);
inputs the program mutates are updated before ``OUT`` is written but not saved.

Errors are reported as one line on stderr, with exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import torch
from ember.runtime.ir import (
    DIALECTS,
    InputKind,
    IRError,
    Program,
    ScalarMeta,
    load,
    print_program,
    verify,
)
from ember.runtime.ir.effects import effectful_calls

_DEFAULTED = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = _parser().parse_args(argv)
    try:
        status: int = args.command(args)
        return status
    except (IRError, OSError, ValueError, KeyError, RuntimeError) as e:
        message = str(e) if not isinstance(e, KeyError) else str(e.args[0])
        print(f"error: {message}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ember.runtime", description="Look at, check and run .ember files."
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    show = commands.add_parser("show", help="print a program's text form")
    show.add_argument("file")
    show.set_defaults(command=_show)

    check = commands.add_parser(
        "verify", help="check a program against its dialect; say whether it holds "
                       "executable code (compiled artifacts do) or calls operators with "
                       "effects outside its tensors")
    check.add_argument("file")
    check.add_argument("--dialect", choices=DIALECTS,
                       help="the dialect to check (default: the program's own)")
    check.set_defaults(command=_verify)

    run = commands.add_parser(
        "run", help="run a program on inputs from a safetensors file",
        description="Run a program on inputs from a safetensors file. A compiled artifact "
                    "is executable code (Python wrapper, C++/Triton kernels) and runs only "
                    "with --trusted or EMBER_TRUST_ARTIFACTS=1; operators with effects "
                    "outside the tensors (files, printing, custom operators) run only with "
                    "--trusted.")
    run.add_argument("file")
    run.add_argument("--inputs", required=True, help="safetensors file of inputs")
    run.add_argument("--out", required=True, help="safetensors file to write outputs to")
    run.add_argument("--graph", default="forward", help="graph to run (default: forward)")
    run.add_argument("--trusted", action="store_true",
                     help="the file's source is trusted: run its code (compiled artifacts) "
                          "and operators with effects outside the tensors")
    run.set_defaults(command=_run)
    return parser


def _show(args: argparse.Namespace) -> int:
    print(print_program(load(args.file)))
    return 0


def _verify(args: argparse.Namespace) -> int:
    program = load(args.file)
    verify(program, args.dialect)
    print("ok")
    if program.dialect == "compiled":
        print("note: this file holds executable code (a Python wrapper and C++/Triton "
              "kernel sources) that `run` executes with your permissions; run it only if "
              "you trust its source (run --trusted, or EMBER_TRUST_ARTIFACTS=1)")
    for call in effectful_calls(program):
        print(f"note: {call.describe()}; `run` refuses it without --trusted")
    return 0


def _run(args: argparse.Namespace) -> int:
    import safetensors.torch
    from ember.runtime.callable import ProgramCallable
    from ember.runtime.executor import make_executor

    program = load(args.file, trusted=args.trusted)
    given = safetensors.torch.load_file(args.inputs)
    inputs = bind_named_inputs(program, args.graph, given)
    if args.graph == "forward":
        outputs = ProgramCallable(program)(inputs)
    else:
        outputs = make_executor(program, args.graph)(inputs)
    safetensors.torch.save_file(
        {f"out{i}": _as_tensor(v) for i, v in enumerate(outputs)}, args.out
    )
    return 0


def bind_named_inputs(
    program: Program, graph_name: str, given: dict[str, torch.Tensor]
) -> list[Any]:
    """One value per placeholder of ``graph_name``, looked up in ``given`` by placeholder
    name, then by ``argI``; see the module docstring.

    Raises:
        KeyError: no such graph.
        ValueError: a placeholder without a value, or a key of ``given`` not used.
    """
    if graph_name not in program.graphs:
        raise KeyError(f"the program has no graph {graph_name!r}; graphs: "
                       f"{', '.join(sorted(program.graphs))}")
    specs = {s.name: s for s in program.signature.inputs.get(graph_name, [])}
    used: set[str] = set()
    bound: list[Any] = []
    for i, node in enumerate(program.graphs[graph_name].placeholders):
        key = next((k for k in (node.name, f"arg{i}") if k in given), None)
        spec = specs.get(node.name)
        if key is not None:
            used.add(key)
            value: Any = given[key]
            if isinstance(node.meta, ScalarMeta):
                value = value.item()
        elif spec is not None and spec.kind in _DEFAULTED and spec.target in program.tensors:
            value = program.tensors[spec.target]
        else:
            raise ValueError(f"no input for placeholder {node.name!r}: expected the key "
                             f"{node.name!r} or 'arg{i}' in the inputs file")
        bound.append(value)
    unused = sorted(set(given) - used)
    if unused:
        raise ValueError(f"inputs file has key(s) {', '.join(unused)} that match no placeholder")
    return bound


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().contiguous().clone()
    return torch.tensor(value)


if __name__ == "__main__":
    sys.exit(main())
