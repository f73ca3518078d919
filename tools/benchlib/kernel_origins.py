"""Which ops each generated kernel of a compiled program came from, by the name a
profiler shows (``fwd_kernel3``, ``bwd_kernel10_partial``).

    python tools/benchlib/kernel_origins.py DEBUG_DIR [NAME ...]

``DEBUG_DIR`` holds the programs a run wrote with ``EMBER_DEBUG_DIR`` set (the
pipeline saves each stage's output there; the inductor stage's carries the wrappers).
Each wrapper says, above each kernel it calls, ``# kernel3: fused from mm_6, add_8``, or
``(runs kernel1: identical code)`` where the kernel calls another's code; the profiler
names the code by its entry, the kernel's name after its graph's tag
(``ember.inductor.compile.entry_name``). A kernel numbered alike in two programs (two
graphs of one model) lists both origins. Without names, every kernel is printed.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from pathlib import Path

_KERNEL = re.compile(r"^\s*# (kernel\d+): fused from (.*?)(?: \(runs (kernel\d+): "
                     r"identical code\))?$")


def kernel_origins(debug_dir: Path) -> dict[str, list[str]]:
    """Entry name -> the ``fused from`` lists of the kernels that run its code, over
    every compiled program in ``debug_dir``."""
    from ember.inductor.compile import entry_name
    from ember.runtime.ir import load

    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(debug_dir.rglob("*.ember")):
        program = load(path, trusted=True)  # written by this machine's run
        if program.dialect != "compiled":
            continue
        for file, data in sorted(program.files.items()):
            if not file.endswith("/wrapper.py"):
                continue
            graph = file.split("/")[0]
            for line in data.decode().splitlines():
                match = _KERNEL.match(line)
                if match:
                    kernel, ops, runs = match.groups()
                    found[entry_name(graph, runs or kernel)].append(ops)
    return dict(found)


def origin_of(name: str, origins: dict[str, list[str]]) -> str:
    """``name``'s origins as one line (a split reduction's partial kernel: its kernel's),
    or empty when ``name`` is no generated kernel of these programs."""
    lists = origins.get(name.removesuffix("_partial"), [])
    return " | ".join(lists)


def main() -> None:
    origins = kernel_origins(Path(sys.argv[1]))
    for name in sys.argv[2:] or sorted(origins):
        print(f"{name}: {origin_of(name, origins) or '-'}")


if __name__ == "__main__":
    main()
