"""The class of the aot stage's declines that symbolic sizes cause.

A program the stage cannot compile for every size its symbols allow (torch's backward
formula of an op needs a size as a constant; an op has no kernel for symbolic sizes)
is declined with ``SymbolicSizesDeclined``, which tells a frontend that the same program
with static sizes may compile (ember-frontend then compiles per size). Other declines
(a write the stage refuses, a data-dependent size the backward needs) are plain
``StageDeclined``. With an ember-runtime older than 0.4.2, which has no such class, every
decline is a plain ``StageDeclined``.
"""

from __future__ import annotations

try:
    from ember.runtime.stages import SymbolicSizesDeclined
except ImportError:  # ember-runtime < 0.4.2
    from ember.runtime.stages import (  # type: ignore[assignment]
        StageDeclined as SymbolicSizesDeclined,
    )

__all__ = ["SymbolicSizesDeclined"]
