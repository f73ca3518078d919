"""Rebuild the partitioner's golden files from the samples of ``test_partition_text``.

    python packages/aot/tests/golden/regenerate.py

Writes ``partition_<sample>.txt``; review the diff before committing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent))

from test_partition_text import SAMPLES, partition_text


def main() -> None:
    for name, build in SAMPLES.items():
        (HERE / f"partition_{name}.txt").write_text(partition_text(build()), encoding="utf-8")
    print(f"wrote golden files in {HERE}")


if __name__ == "__main__":
    main()
