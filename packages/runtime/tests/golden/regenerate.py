"""Rebuild the golden files from the sample programs of ``ir_samples``.

    python packages/runtime/tests/golden/regenerate.py

Writes ``<sample>.txt`` (the printed form; review the diff) and, for the current schema
version only, ``training_v<MAJOR>_<MINOR>.ember`` when it does not exist yet: the
container golden of a released schema is never rewritten, since the test that loads it
is what keeps old files readable.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from ember.runtime.ir import SCHEMA_VERSION, print_program, save
from ir_samples import SAMPLES


def main() -> None:
    for name, build in SAMPLES.items():
        (HERE / f"{name}.txt").write_text(print_program(build()), encoding="utf-8")
    container = HERE / f"training_v{SCHEMA_VERSION[0]}_{SCHEMA_VERSION[1]}.ember"
    if not container.exists():
        save(SAMPLES["training"](), container, producer=("ember-runtime", "golden"))
    print(f"wrote golden files in {HERE}")


if __name__ == "__main__":
    main()
