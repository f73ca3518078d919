"""``python -m ember.aot IN.ember -o OUT.ember``: run the aot stage on a file.

Reads an ``aten`` program, writes the ``core-functional`` result. ``--option KEY=VALUE``
sets an ``aot.*`` option (:mod:`ember.aot.config`); values are read as Python literals
(``true``/``false`` also accepted). ``--print`` also prints the result's text form.
Errors are reported as one line on stderr, with exit status 1.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from ember.aot.stage import AotStage
from ember.runtime.ir import IRError, load, print_program, save


def _parse_option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep:
        raise ValueError(f"--option {text!r}: expected KEY=VALUE")
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return key.strip(), lowered == "true"
    try:
        return key.strip(), ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return key.strip(), raw


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m ember.aot",
                                     description="aten program -> core-functional program")
    parser.add_argument("input", help="an aten .ember file")
    parser.add_argument("-o", "--output", required=True, help="where to write the result")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an aot option, e.g. aot.save_everything=true")
    parser.add_argument("--print", action="store_true", help="print the result")
    args = parser.parse_args(argv)
    try:
        options = dict(_parse_option(o) for o in args.option)
        unknown = sorted(set(options) - set(AotStage.options))
        if unknown:
            raise ValueError(f"unknown aot option(s) {', '.join(map(repr, unknown))}; the "
                             f"options: {', '.join(sorted(AotStage.options))}")
        AotStage().check_options(options)
        program = load(args.input)
        result = AotStage().run(program, options)
        save(result, args.output, producer=("ember-aot", _version()))
    except (IRError, OSError, ValueError, RuntimeError, NotImplementedError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.print:
        print(print_program(result))
    return 0


def _version() -> str:
    try:
        return metadata.version("ember-aot")
    except metadata.PackageNotFoundError:
        return "0.0.0"


if __name__ == "__main__":
    sys.exit(main())
