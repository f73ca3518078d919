"""Tests of the bench harness import ``zoo`` and ``benchlib`` from ``tools/``."""

import sys
from pathlib import Path

_TOOLS = str(Path(__file__).resolve().parent.parent)
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)
