"""The autotuning progress bar: one line on stderr, redrawn in place, only when stderr
is a terminal (``autotuning mm 3/7 triton_mm_bm128_bn128_bk64_s3_w8``)."""

from __future__ import annotations

import sys
from typing import TextIO

BAR_WIDTH = 20
NAME_WIDTH = 40


class Progress:
    """Shows ``step(i, name)`` as ``autotuning KIND i+1/TOTAL [####    ] NAME``;
    :meth:`close` clears the line. Writes nothing unless ``stream`` (default: the
    current ``sys.stderr``) is a terminal."""

    def __init__(self, kind: str, total: int, stream: TextIO | None = None) -> None:
        self.kind = kind
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self._width = 0

    def step(self, index: int, name: str) -> None:
        """Show that candidate ``index`` (0-based), ``name``, is being timed."""
        if not self.enabled:
            return
        filled = BAR_WIDTH * index // max(self.total, 1)
        bar = "#" * filled + " " * (BAR_WIDTH - filled)
        line = (f"autotuning {self.kind} {index + 1}/{self.total} [{bar}] "
                f"{name[:NAME_WIDTH]}")
        self._write("\r" + line.ljust(self._width))
        self._width = len(line)

    def close(self) -> None:
        """Clear the line."""
        if self.enabled and self._width:
            self._write("\r" + " " * self._width + "\r")
            self._width = 0

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()
