"""The writer of generated guard check functions (``match(S, C)``), shared by the full
check (:func:`ember.frontend.guards.compile_matcher`) and its fast path
(:mod:`ember.frontend.guard_fast`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember.frontend.guard_batch import TensorBatch
from ember.frontend.guard_model import GUARD_KINDS, Guard, Source
from ember.runtime.compiled.code_cache import cached_code

__all__ = ["Matcher", "MatcherWriter", "matcher_text"]

#: the length from which a check function's code object is kept on disk
#: (``ember.runtime.compiled.code_cache``): compiling ~4 KB of guards takes about as long
#: as reading a cache entry
CACHED_TEXT = 8192

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

    def __init__(self, batch_tensors: bool = False) -> None:
        self.names: dict[str, Any] = {"torch": torch, "Tensor": torch.Tensor,
                                      "Parameter": torch.nn.Parameter}
        self.lines: list[str] = []
        self._locals: dict[Source, str] = {}
        # tensor guards checked at the end, in one batch (ember.frontend.guard_batch):
        # (local, condition); the locals whose type is not yet tested inline
        self.batch_tensors = batch_tensors
        self._batched: list[tuple[str, str]] = []
        self._untyped: set[str] = set()
        self._fetching = 0

    def const(self, prefix: str, value: Any) -> str:
        name = f"{prefix}{len(self.names)}"
        self.names[name] = value
        return name

    def ref(self, source: Source) -> str:
        name = self._locals.get(source)
        if name is not None and self._fetching and name in self._untyped:
            # a batched tensor read through (p.grad): its type first, as its guard would
            self._untyped.discard(name)
            self.lines.append(f"if not ({_TENSOR_TYPE.format(v=name)}): return None")
        if name is None:
            self._fetching += 1
            try:
                value = source.fetch_code(self)
            finally:
                self._fetching -= 1
            name = f"v{len(self._locals)}"
            # NOTE: the comment shows the source; str.__repr__ (not the object's own
            # repr) escapes every line break in it
            shown = str.__repr__(str(source.expr()))
            self.lines.append(f"{name} = {value}  # {shown}")
            self._locals[source] = name
        return name

    def guard(self, g: Guard) -> None:
        """Emit the check of ``g`` (its kind's condition); a ``tensor`` guard, when
        batching, is checked by :meth:`check_batch` (its value fetched here)."""
        condition = GUARD_KINDS[g.kind].check(self, g)
        if self.batch_tensors and g.kind == "tensor" and g.source is not None:
            name = self.ref(g.source)
            self._batched.append((name, condition))
            self._untyped.add(name)
            return
        self.lines.append(f"if not ({condition}): return None")

    def check_batch(self) -> None:
        """Emit the batched tensor guards (after every other guard): one
        :class:`~ember.frontend.guard_batch.TensorBatch` check, and each guard only
        when it does not hold."""
        batched, self._batched = self._batched, []
        self._untyped.clear()
        if not batched:
            return
        batch = self.const("batch", TensorBatch())
        values = ", ".join(v for v, _ in batched)
        self.lines.append(f"# {len(batched)} tensor guards, in one C++ check while the "
                          "tensors look as on a call that passed them (guard_batch.py)")
        self.lines.append(f"if not {batch}.holds({values}):")
        self.lines += [f"    if not ({condition}): return None" for _, condition in batched]
        self.lines.append(f"    {batch}.learn({values})")

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
        # a long check is compiled once a machine (a warm start rebuilds the check of
        # every guard); a short one (a probe of one guard) compiles faster than a read
        code = (cached_code(src, "<ember guards>", "guard") if len(src) >= CACHED_TEXT
                else compile(src, "<ember guards>", "exec"))
        exec(code, self.names)  # noqa: S102 - from guards
        fn: Matcher = self.names["match"]
        fn.__ember_source__ = src  # type: ignore[attr-defined]
        return fn, src


_TENSOR_TYPE = "type({v}) is Tensor or type({v}) is Parameter or isinstance({v}, Tensor)"
"""A tensor guard's type test (the exact-type tests first: ``isinstance`` of a Parameter
runs its metaclass check in Python)."""


def matcher_text(match: Matcher) -> str:
    """The generated text of a check function (``match.__ember_source__``)."""
    return str(getattr(match, "__ember_source__", ""))
