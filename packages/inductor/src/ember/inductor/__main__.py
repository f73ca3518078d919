"""``python -m ember.inductor IN.ember -o OUT.ember [--device cpu|cuda]``.

Errors (a file that does not load or verify, a program the stage refuses, a path that
cannot be written) are reported as one line on stderr, with exit status 1.
"""

from __future__ import annotations

import argparse
import sys

from ember.inductor.stage import InductorStage
from ember.runtime.ir import IRError, Program, load, save
from ember.runtime.ir.contracts import CompileReport
from ember.runtime.ir.effects import check_may_run


def _check_declared_metadata(program: Program) -> None:
    """ember-runtime's check of a file's node metadata against its operators (the
    stage compiles from that metadata); none with an ember-runtime older than 0.4.2."""
    try:
        from ember.runtime.ir.metadata_checks import check_declared_metadata
    except ImportError:  # ember-runtime < 0.4.2
        return
    check_declared_metadata(program)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember.inductor",
        description="Compile a core-functional Ember program into a compiled artifact.")
    parser.add_argument("input", help="core-functional .ember file")
    parser.add_argument("-o", "--output", required=True, help="compiled .ember file")
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None,
                        help="target device (default: where the program's tensors are)")
    parser.add_argument("--trusted", action="store_true",
                        help="compile operators with effects outside the tensors (files, "
                             "printing, custom operators) that the input calls")
    args = parser.parse_args(argv)
    try:
        program = load(args.input, trusted=args.trusted)
        if program.untrusted_origin is not None:  # its node metadata vs its operators
            _check_declared_metadata(program)
        check_may_run(program)  # its code would run them: refuse them from untrusted files
        options = {"device": args.device} if args.device else {}
        compiled = InductorStage().run(program, options)
        save(compiled, args.output)
    except (IRError, OSError, ValueError, RuntimeError, NotImplementedError) as e:
        # (IRError covers a refused program: UntrustedProgramError, VerificationError)
        print(f"error: {e}", file=sys.stderr)
        return 1
    report = CompileReport.from_program(compiled)
    print(f"{args.output}: {report.kernels} kernels, "
          f"fallbacks {dict(report.fallbacks or {})}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
