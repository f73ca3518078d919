"""Rewrite integration_tests/expected_accuracy.csv from what Ember does today.

    python tools/update_accuracy.py [--models a,b] [--backends eager,aot_eager]

Runs Ember on every zoo model (test size, CPU, float32) with every backend (or the given
subset; other rows are kept), prints each change, and writes the table. Review the diff
before committing it: a row going from pass to a failure is a regression.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import accuracy_table, compilers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--backends", default=",".join(compilers.EMBER_BACKENDS))
    parser.add_argument("--csv", type=Path, default=accuracy_table.CSV_PATH)
    args = parser.parse_args(argv)
    backends = args.backends.split(",")
    wanted = [(m, b) for m, b in accuracy_table.expected_keys()
              if (not args.models or m in args.models.split(",")) and b in backends]
    table = accuracy_table.read(args.csv) if args.csv.exists() else {}
    known = set(accuracy_table.expected_keys())
    changes = 0
    for model, backend in wanted:
        observed = accuracy_table.observe(model, backend)
        before = table.get((model, backend))
        if before is None or not before.same_as(observed):
            changes += 1
            old = f"{before.result}/{before.graph_breaks or '-'}" if before else "(new)"
            print(f"{model:<20} {backend:<10} {old} -> {observed.result}/"
                  f"{observed.graph_breaks or '-'}  {observed.detail}")
        table[(model, backend)] = observed
    stale = [k for k in table if k not in known]
    for key in stale:
        print(f"{key[0]:<20} {key[1]:<10} removed (no such model/backend)")
        del table[key]
    accuracy_table.write(list(table.values()), args.csv)
    print(f"{changes} change(s), {len(stale)} removal(s); wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
