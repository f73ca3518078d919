"""The strict capture's guards: the one guard model (:mod:`ember.frontend.guard_model`,
:mod:`ember.frontend.guards`) over the sources of :mod:`~.sources`.

:class:`~.capture.CaptureContext` installs them as the captured code reads outside
values; a segment compiles its :class:`GuardSet` into one matcher over the frame state
at its resume point (``S``) and the function's context (``C``).

What is guarded is what the program's result depends on, never how far a loop has got:
``nn.Module`` values are guarded by type (each attribute, parameter and submodule read
is guarded on its own, and parameters are graph inputs), so the layers of a model share
compiled code; an iterator resumed after a graph break is guarded on how many items it
still has relative to its position (``remaining`` guards, see
:class:`~.iteration.ResumedIterator`), not on the position itself.
"""

from __future__ import annotations

from ember.frontend.guard_model import Guard, tensor_guard
from ember.frontend.guards import GuardSet, compile_matcher

__all__ = ["Guard", "GuardSet", "compile_matcher", "tensor_guard"]
