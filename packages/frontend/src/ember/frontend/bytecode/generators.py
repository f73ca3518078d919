"""Generators run lazily while capturing, as CPython runs them.

Calling an inlined generator function returns an :class:`InlinedGenerator`: its frame
runs only when a value is asked for (``FOR_ITER``, ``next()``, ``list()``), up to the
next ``yield``. Running it to completion at the call instead would reorder the
generator's side effects with the consumer's (a loop body appending to the same list)
and never end for an infinite generator. ``enumerate``, ``zip``, ``map`` and ``filter``
over such an iterator are lazy too (:func:`lazy_enumerate`, ...).

A lazy iterator holds a suspended frame, which a graph break cannot rebuild: a break
while one is alive runs that resume point eagerly (:class:`~.state.Unrebuildable`). A
break inside the generator's own code makes the instruction that created it run for
real (``GraphBreak.root_ip``), so Python runs the real generator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.list_iterator import ListIterator

# instructions one generator may run during a capture before it is taken for endless
MAX_GENERATOR_STEPS = 1_000_000


class LazyIterator:
    """An iterator whose next value is computed when asked: ``advance()`` returns
    ``(True, value)`` or ``(False, None)`` once exhausted."""

    def __init__(self, advance: Callable[[], tuple[bool, Any]]) -> None:
        self._advance = advance
        self._done = False
        # iterators it pulls from when it only combines them, running no program code
        # (zip, enumerate, islice of counts and lists): None when it runs code
        self.parts: tuple[Any, ...] | None = None
        self.finite = False

    def pure(self, finite: bool, parts: tuple[Any, ...]) -> LazyIterator:
        """Mark it as only combining ``parts`` (each a ListIterator or a pure lazy one),
        so that, when finite, a graph break can give its remaining items as a list
        (:meth:`.state.StateBuilder.recipe`); unchanged if a part is not pure."""
        if all(_is_pure(p) for p in parts):
            self.parts, self.finite = parts, finite
        return self

    def advance(self) -> tuple[bool, Any]:
        if self._done:
            return False, None
        has, value = self._advance()
        if not has:
            self._done = True
        return has, value

    def remaining(self) -> list[Any]:
        out: list[Any] = []
        while True:
            has, value = self.advance()
            if not has:
                return out
            out.append(value)

    def __iter__(self) -> LazyIterator:
        return self

    def __next__(self) -> Any:
        has, value = self.advance()
        if not has:
            raise StopIteration
        return value


class InlinedGenerator(LazyIterator):
    """The generator object of an inlined generator function: ``frame`` (with
    ``yielded`` set) resumed by ``interp`` up to its next ``yield``."""

    def __init__(self, interp: Any, frame: Frame) -> None:
        super().__init__(self._resume)
        self.interp, self.frame = interp, frame
        self._steps = 0
        self._started = False
        root = frame
        while root.parent is not None:
            root = root.parent
        # the root frame's instruction that made this generator (ip is past it)
        self.created_at = root.ip - 1
        capture = getattr(interp, "capture", None)
        if capture is not None:
            capture.generators.append(self)

    def close_runs_code(self) -> bool:
        """Whether closing it now would run its code: started, not finished, and
        suspended inside a ``try``/``with`` block (its ``finally``/``__exit__`` runs
        when Python closes the generator, at its last reference)."""
        from ember.frontend.bytecode.exceptions import find_handler

        frame = self.frame
        if not self._started or self._done or frame.returned or frame.ip == 0:
            return False
        suspended = frame.instructions[frame.ip - 1]
        entry = find_handler(frame.code, suspended.offset)
        if entry is None:
            return False
        handler = next((i for i in frame.instructions if i.offset == entry.target), None)
        # (3.12 wraps every generator body in a handler turning StopIteration into
        # RuntimeError; it runs nothing on close)
        return handler is None or handler.opname != "CALL_INTRINSIC_1"

    def send(self, value: Any) -> Any:
        """``generator.send(value)``: ``value`` becomes the result of the ``yield`` the
        frame is suspended at (the ``None`` its YIELD_VALUE pushed), then it runs to the
        next one, as CPython does.

        Raises:
            TypeError: a value other than None sent to a generator not started yet.
            StopIteration: the generator returned (its value as ``.value``).
        """
        if value is not None:
            if not self._started:
                raise TypeError("can't send non-None value to a just-started generator")
            if not self._done:
                self.frame.stack[-1] = value
        has, result = self.advance()
        if not has:
            raise StopIteration(self.frame.return_value)
        return result

    def throw(self, *args: Any) -> Any:
        """Not captured: the call breaks before it runs (``builtin_rules``)."""
        raise NotImplementedError("generator.throw() of an inlined generator")

    def close(self) -> None:
        """Not captured: the call breaks before it runs (``builtin_rules``)."""
        raise NotImplementedError("generator.close() of an inlined generator")

    def _resume(self) -> tuple[bool, Any]:
        frame = self.frame
        assert frame.yielded is not None
        self._started = True
        try:
            while not frame.returned and not frame.yielded:
                self._steps += 1
                if self._steps > MAX_GENERATOR_STEPS:
                    raise self.interp.fail(f"generator {frame.code.co_name} ran more than "
                                           f"{MAX_GENERATOR_STEPS} instructions during "
                                           "capture (endless?)")
                self.interp.step(frame)
        except GraphBreak as e:
            # the instruction that made the (outermost) generator runs for real: the
            # generator is then a real one, resumed by Python
            e.from_inlined_call = True
            e.root_ip = self.created_at
            raise
        if frame.yielded:
            return True, frame.yielded.pop(0)
        return False, None


def _is_pure(it: Any) -> bool:
    return (isinstance(it, ListIterator) and type(it).exhausted is ListIterator.exhausted) or (
        isinstance(it, LazyIterator) and it.parts is not None)


def _finite(it: Any) -> bool:
    return not isinstance(it, LazyIterator) or it.finite


def _pull(it: Any) -> tuple[bool, Any]:
    if isinstance(it, LazyIterator):
        return it.advance()
    if it.exhausted():  # a ListIterator
        return False, None
    return True, it.next()


def lazy_enumerate(it: Any, start: int) -> LazyIterator:
    count = [start]

    def advance() -> tuple[bool, Any]:
        has, value = _pull(it)
        if not has:
            return False, None
        count[0] += 1
        return True, (count[0] - 1, value)

    return LazyIterator(advance).pure(_finite(it), (it,))


def lazy_zip(its: list[Any], strict: bool = False) -> LazyIterator:
    def advance() -> tuple[bool, Any]:
        values = []
        for i, it in enumerate(its):  # in order, stopping at the first exhausted one
            has, value = _pull(it)
            if not has:
                if strict:
                    _check_strict_end(its, i)
                return False, None
            values.append(value)
        return True, tuple(values)

    lazy = LazyIterator(advance)
    # (strict: its end raises, which a list of what is left would not)
    return lazy if strict else lazy.pure(any(_finite(it) for it in its), tuple(its))


def _check_strict_end(its: list[Any], i: int) -> None:
    """``zip(strict=True)``'s check once argument ``i`` (0-based) is exhausted: CPython's
    ``ValueError`` when another argument is not."""
    if i > 0:
        s = "s" if i > 1 else ""
        raise ValueError(f"zip() argument {i + 1} is shorter than argument{s} 1"
                         f"{'-' + str(i) if i > 1 else ''}")
    for j, other in enumerate(its[1:], start=2):
        if _pull(other)[0]:
            s = "s" if j > 2 else ""
            raise ValueError(f"zip() argument {j} is longer than argument{s} 1"
                             f"{'-' + str(j - 1) if j > 2 else ''}")


def lazy_map(call: Callable[..., Any], its: list[Any]) -> LazyIterator:
    zipped = lazy_zip(its)

    def advance() -> tuple[bool, Any]:
        has, args = zipped.advance()
        return (True, call(*args)) if has else (False, None)

    return LazyIterator(advance)


def lazy_filter(keep: Callable[[Any], bool], it: Any) -> LazyIterator:
    def advance() -> tuple[bool, Any]:
        while True:
            has, value = _pull(it)
            if not has or keep(value):
                return has, value

    return LazyIterator(advance)


def lazy_from(iterator: Any) -> LazyIterator:
    """A lazy iterator pulling from a Python iterator (e.g. an ``itertools`` object over
    lazy iterators), one value per ``advance``."""

    def advance() -> tuple[bool, Any]:
        try:
            return True, next(iterator)
        except StopIteration:
            return False, None

    return LazyIterator(advance)
