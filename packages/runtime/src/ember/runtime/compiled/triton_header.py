"""The parameters of a generated Triton kernel, read from the ``def`` line of its source.

Launching a binary from the store (:mod:`.triton_stored`) needs the kernel's parameter
names and nothing else of its ``@triton.jit`` function: the launcher orders the
constexprs by position, and the runner passes the parameters after the runtime ones.
Importing the kernel's module to get them costs far more than the launch it serves:
``@triton.jit`` reads the function's source back with ``inspect``, which tokenizes the
whole module (about 1.5 ms for a typical fused kernel, 160 ms for a 1,200-line one), on
every warm start. :func:`kernel_header` reads the names from the text instead; a source
whose ``def`` line it cannot read with certainty gives None, and the caller imports the
module as before.

The result, a :class:`KernelHeader`, stands in for the function where Triton's
``ASTSource`` and launcher read it: ``__name__``, ``arg_names`` and ``launch_metadata``
(None: the kernel reports no launch metadata to profiler hooks, as Ember's kernels
never do).
"""

from __future__ import annotations

import re

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_OPEN = {"(": ")", "[": "]", "{": "}"}


class KernelHeader:
    """A kernel function's name (``__name__``) and parameter names (``arg_names``), in
    order; ``launch_metadata`` is None."""

    def __init__(self, name: str, arg_names: tuple[str, ...]) -> None:
        self.__name__ = name
        self.arg_names = arg_names
        self.launch_metadata = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KernelHeader) and (self.__name__, self.arg_names) == (
            other.__name__, other.arg_names)

    def __hash__(self) -> int:
        return hash((self.__name__, self.arg_names))

    def __repr__(self) -> str:
        return f"KernelHeader({self.__name__!r}, {self.arg_names!r})"


def kernel_header(source: str, name: str) -> KernelHeader | None:
    """The header of the function ``name`` defined at the top level of ``source``; None
    when there is not exactly one such ``def`` or its parameter list holds anything but
    plain parameters (``x``, ``x: annotation``, ``x: annotation = default``)."""
    starts = [m.end() for m in re.finditer(rf"^def[ \t]+{re.escape(name)}[ \t]*\(",
                                           source, re.MULTILINE)]
    if len(starts) != 1:
        return None
    parameters = _split_parameters(source, starts[0])
    if parameters is None:
        return None
    names = []
    for text in parameters:
        head = text.split("=", 1)[0].split(":", 1)[0].strip()
        if not _IDENTIFIER.match(head):
            return None
        names.append(head)
    if len(set(names)) != len(names):
        return None
    return KernelHeader(name, tuple(names))


def _split_parameters(source: str, start: int) -> list[str] | None:
    """The comma-separated items from ``start`` (just after the opening parenthesis) to
    the matching closing one, split at depth 0; None when unbalanced or when a string,
    comment or star parameter makes the split uncertain."""
    items: list[str] = []
    closers: list[str] = []
    begin = start
    for i in range(start, len(source)):
        c = source[i]
        if c in "\"'#*\\":
            return None
        if c in _OPEN:
            closers.append(_OPEN[c])
        elif c in ")]}":
            if closers:
                if closers.pop() != c:
                    return None
                continue
            if c != ")":
                return None
            items.append(source[begin:i])
            return [t for t in items if t.strip()] if all(
                t.strip() for t in items[:-1]) else None
        elif c == "," and not closers:
            items.append(source[begin:i])
            begin = i + 1
    return None


__all__ = ["KernelHeader", "kernel_header"]
