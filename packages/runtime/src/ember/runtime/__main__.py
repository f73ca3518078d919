"""``python -m ember.runtime``: look at, check and run ``.ember`` files.

Commands::

    python -m ember.runtime show FILE                 print the program's text form
    python -m ember.runtime verify FILE [--dialect D] "ok" (exit 0) or the error (exit 1)
    python -m ember.runtime run FILE [--inputs IN.safetensors] [--shape NAME=D0,D1,...]
                                     --out OUT.safetensors [--graph forward] [--trusted]
                                     [--seed N]
    python -m ember.runtime cache info                the whole-program cache: where,
                                                      entries, bytes, remote server
    python -m ember.runtime cache clear [--remote]    remove its entries

``verify`` also says when the file holds executable code (a ``compiled`` artifact: a
Python wrapper and C++/Triton kernel sources) or calls operators with effects outside
its tensors (``ember.runtime.ir.effects``). ``run`` refuses both unless ``--trusted``
(or, for compiled artifacts, ``EMBER_TRUST_ARTIFACTS=1``): only pass it for files
whose source you trust as you would a Python module's.

``run`` binds each placeholder of the graph, in order, to the tensor in ``IN`` stored
under the placeholder's name, or else under ``argI`` (``I`` its position among all the
placeholders, from 0). A placeholder labelled parameter/buffer/constant that has neither
key takes its value from the program's own tensors. A placeholder of a Python number
(ScalarMeta) reads a 0-dim tensor. Every key of ``IN`` must be used.
``--shape x=8,3,32`` (repeatable; the placeholder's name or ``argI``) makes a random
input of those sizes instead, with the placeholder's dtype and device (``randn`` for
floating point, ``randint(0, 2)`` for integers and bools; ``--seed``, default 0). A
program with symbolic sizes runs for any sizes inside its symbols' ranges and guards
(``show`` prints them); other sizes are refused with the message naming the input,
dim, symbol and the range or guard (and its source line). The user-visible
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
from ember.runtime.cache.cli import add_commands as add_cache_commands
from ember.runtime.ir import (
    DIALECTS,
    InputKind,
    IRError,
    Program,
    ScalarMeta,
    TensorMeta,
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
    except (IRError, OSError, ValueError, KeyError, RuntimeError, ArithmeticError,
            AssertionError) as e:
        # (ArithmeticError: a symbolic divisor that is 0 at these sizes, an index too
        # large for C; AssertionError: torch's "not compiled with CUDA" for a cuda input)
        message = str(e) if not isinstance(e, KeyError) else str(e.args[0])
        message = message or type(e).__name__
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
    run.add_argument("--inputs", help="safetensors file of inputs")
    run.add_argument("--shape", action="append", default=[], metavar="NAME=D0,D1,...",
                     help="a random input of these sizes for placeholder NAME (its name "
                          "or argI); repeatable")
    run.add_argument("--seed", type=int, default=0, help="seed of --shape inputs (default 0)")
    run.add_argument("--out", required=True, help="safetensors file to write outputs to")
    run.add_argument("--graph", default="forward", help="graph to run (default: forward)")
    run.add_argument("--trusted", action="store_true",
                     help="the file's source is trusted: run its code (compiled artifacts) "
                          "and operators with effects outside the tensors")
    run.set_defaults(command=_run)

    add_cache_commands(commands)
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
    verify(program, program.dialect)  # (an unverified program ran: a result index -1)
    given = _read_inputs(args.inputs) if args.inputs is not None else {}
    shapes = parse_shapes(args.shape)
    given.update(random_inputs(program, args.graph, shapes, given, args.seed))
    inputs = bind_named_inputs(program, args.graph, given)
    if args.graph == "forward":
        outputs = ProgramCallable(program)(inputs)
    else:
        outputs = make_executor(program, args.graph)(inputs)
    try:
        safetensors.torch.save_file(
            {f"out{i}": _as_tensor(v) for i, v in enumerate(outputs)}, args.out
        )
    except Exception as e:  # noqa: BLE001 - safetensors' own errors are no OSError
        raise OSError(f"--out {args.out}: cannot be written ({type(e).__name__}: {e})"
                      ) from None
    return 0


def parse_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """``["x=8,3,32", "y="]`` -> ``{"x": (8, 3, 32), "y": ()}`` (``y=`` is 0-dim).

    Raises:
        ValueError: a spec without ``=``, a size that is not a non-negative integer, or
            a name given twice (the message quotes the spec).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, eq, dims = spec.partition("=")
        name = name.strip()
        try:
            sizes = tuple(int(d) for d in dims.split(",")) if dims.strip() else ()
        except ValueError:
            sizes = (-1,)
        if not eq or not name or any(d < 0 for d in sizes):
            raise ValueError(f"--shape {spec!r}: expected NAME=D0,D1,... with non-negative "
                             "integer sizes (e.g. x=8,3,32)")
        if name in shapes:
            raise ValueError(f"--shape {spec!r}: {name!r} is given twice")
        shapes[name] = sizes
    return shapes


def random_inputs(program: Program, graph_name: str, shapes: dict[str, tuple[int, ...]],
                  given: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """A random tensor for each ``--shape`` entry, keyed as given (placeholder name or
    ``argI``), with that placeholder's dtype and device.

    Raises:
        KeyError: no such graph.
        ValueError: a name that is no tensor placeholder of the graph, or one that
            ``given`` (the inputs file) holds too.
    """
    if graph_name not in program.graphs:
        raise KeyError(f"the program has no graph {graph_name!r}; graphs: "
                       f"{', '.join(sorted(program.graphs))}")
    placeholders = program.graphs[graph_name].placeholders
    metas = {key: node.meta for i, node in enumerate(placeholders)
             for key in (node.name, f"arg{i}")}
    generator = torch.Generator().manual_seed(seed)
    made: dict[str, torch.Tensor] = {}
    for name, sizes in shapes.items():
        meta = metas.get(name)
        if not isinstance(meta, TensorMeta):
            # NOTE: a bad command line is a ValueError (one line, exit 1), as every other
            raise ValueError(  # noqa: TRY004
                f"--shape {name}=...: the graph {graph_name!r} has no tensor placeholder "
                f"{name!r}; placeholders: {', '.join(n.name for n in placeholders)}")
        if name in given:
            raise ValueError(f"--shape {name}=...: the inputs file has {name!r} too")
        if meta.dtype.is_floating_point or meta.dtype.is_complex:
            value = torch.randn(sizes, generator=generator, dtype=meta.dtype)
        else:
            value = torch.randint(0, 2, sizes, generator=generator).to(meta.dtype)
        made[name] = value.to(meta.device)
    return made


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
            elif isinstance(node.meta, TensorMeta):
                _check_input(node.name, key, node.meta, value)
        elif spec is not None and spec.kind in _DEFAULTED and spec.target in program.tensors:
            value = program.tensors[spec.target]
        else:
            raise ValueError(f"no input for placeholder {node.name!r}: expected the key "
                             f"{node.name!r} or 'arg{i}' in the inputs file, or "
                             f"--shape {node.name}=D0,D1,...")
        bound.append(value)
    unused = sorted(set(given) - used)
    if unused:
        raise ValueError(f"inputs file has key(s) {', '.join(unused)} that match no placeholder")
    return bound


def _read_inputs(path: str) -> dict[str, torch.Tensor]:
    """The tensors of the safetensors file ``path``.

    Raises:
        ValueError: the file cannot be read as safetensors (the message names it).
    """
    import safetensors.torch

    try:
        return safetensors.torch.load_file(path)
    except Exception as e:  # noqa: BLE001 - safetensors' own errors are no ValueError
        raise ValueError(f"--inputs {path}: not a readable safetensors file "
                         f"({type(e).__name__}: {e})") from None


def _check_input(name: str, key: str, meta: TensorMeta, value: torch.Tensor) -> None:
    """Raise ValueError when ``value`` (the inputs file's ``key``) is not a tensor of
    placeholder ``name``'s dtype and, for a static placeholder, sizes (a symbolic one's
    sizes are checked by the program when it binds them, against its ranges)."""
    sizes = tuple(meta.sizes)
    static = all(isinstance(n, int) for n in sizes)
    if value.dtype != meta.dtype or (static and tuple(value.shape) != sizes):
        shown = ", ".join(str(n) for n in sizes)
        raise ValueError(f"input {key!r} for placeholder {name!r} is "
                         f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}; "
                         f"the program takes {str(meta.dtype).removeprefix('torch.')}"
                         f"[{shown}]")


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().contiguous().clone()
    return torch.tensor(value)


if __name__ == "__main__":
    sys.exit(main())
