"""The writer of generated guard check functions (``match(S, C)``), shared by the full
check (:func:`ember.frontend.guards.compile_matcher`) and its fast path
(:mod:`ember.frontend.guard_fast`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember.frontend.guard_model import GUARD_KINDS, Guard, Source

__all__ = ["Matcher", "MatcherWriter", "matcher_text"]

Matcher = Callable[[Any, Any], "list[Any] | None"]
"""A generated check function ``match(S, C)``: None when a guard fails, else the
values of the requested inputs."""


class MatcherWriter:
    """Writes the body of a generated matcher: each source is fetched once, into a
    local, the first time a guard (or the input list) needs it; guards that share a
    prefix (``self.layers[0].attn`` and ``self.layers[0].mlp``) share its fetch.

    NOTE: the generated text holds only names this class makes up (``v3``, ``c7``),
    Python syntax and integers it formats itself. Every captured value — dict keys,
    attribute and variable names, expected values — is a constant of the function's
    namespace, referred to by its number: a key whose ``repr`` is code is never run, and
    keys are looked up as objects (an Enum, a tuple, a NaN float: the same object is the
    same key, as in a dict).
    """

    def __init__(self) -> None:
        self.names: dict[str, Any] = {"torch": torch, "Tensor": torch.Tensor,
                                      "Parameter": torch.nn.Parameter}
        self.lines: list[str] = []
        self._locals: dict[Source, str] = {}

    def const(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.names)}"
        self.names[name] = value
        return name

    def ref(self, source: Source) -> str:
        name = self._locals.get(source)
        if name is None:
            value = source.fetch_code(self)
            name = f"v{len(self._locals)}"
            # NOTE: the comment shows the source; str.__repr__ (not the object's own
            # repr) escapes every line break in it
            shown = str.__repr__(str(source.expr()))
            self.lines.append(f"{name} = {value}  # {shown}")
            self._locals[source] = name
        return name

    def guard(self, g: Guard) -> None:
        """Emit the check of ``g`` (its kind's condition)."""
        self.lines.append(f"if not ({GUARD_KINDS[g.kind].check(self, g)}): return None")

    def local_names(self) -> list[str]:
        """The locals written so far."""
        return list(self._locals.values())

    def local_items(self) -> list[tuple[Source, str]]:
        """The sources fetched so far with their locals, in the order written."""
        return list(self._locals.items())

    def finish(self, lines: Sequence[str], result: str) -> tuple[Matcher, str]:
        """The function ``match(S, C)`` of ``lines`` returning ``result`` (None when a
        line raises), and its text."""
        body = "\n        ".join(lines)
        src = (
            "def match(S, C):\n"
            "    try:\n"
            f"        {body}\n"
            f"        return {result}\n"
            "    except Exception:\n"
            "        return None\n"
        ) if lines else f"def match(S, C):\n    return {result}\n"
        exec(compile(src, "<ember guards>", "exec"), self.names)  # noqa: S102 - from guards
        fn: Matcher = self.names["match"]
        fn.__ember_source__ = src  # type: ignore[attr-defined]
        return fn, src


def matcher_text(match: Matcher) -> str:
    """The generated text of a check function (``match.__ember_source__``)."""
    return str(getattr(match, "__ember_source__", ""))
