"""Rules for the iterator tools of the standard library (``itertools``, one table, and
``functools.reduce``); ``copy`` has its own (:mod:`.copy_rules`).

A C iterator made during capture would hold the capture's fake tensors and its position
would be a constant of the first call; instead each finite ``itertools`` call is
materialised into a :class:`~.list_iterator.ListIterator` (its items computed now, from the
interpreter's values), which the graph-break machinery can rebuild. Callables passed to
them (``starmap``, ``accumulate``, ``groupby`` keys, predicates) are called through the
interpreter, so user functions are inlined and guarded. Infinite iterators
(``count``, ``cycle``, ``repeat`` without ``times``) are lazy iterators
(:class:`~.generators.LazyIterator`), so ``islice``, ``zip``, ``enumerate``, ``map`` over
them pull one value at a time as in CPython; like a generator, one alive at a graph break
makes that resume point run eagerly. ``functools.reduce`` calls its function through the
interpreter too.

The table: ``ITERTOOLS[fn] = (positional roles, keyword roles)``; a role is ``"iter"``
(an iterable, materialised), ``"fn"`` (a callable or None), ``"value"`` (passed as is);
a trailing ``"iter*"`` covers any number of iterables.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import numbers
from typing import Any

import torch
from ember.frontend.bytecode.builtin_rules import BUILTIN_RULES
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.generators import LazyIterator, lazy_from
from ember.frontend.bytecode.iteration import make_iterator
from ember.frontend.bytecode.list_iterator import ListIterator

ITERTOOLS: dict[Any, tuple[tuple[str, ...], dict[str, str]]] = {
    itertools.chain: (("iter*",), {}),
    itertools.zip_longest: (("iter*",), {"fillvalue": "value"}),
    itertools.product: (("iter*",), {"repeat": "value"}),
    itertools.islice: (("iter", "value", "value", "value"), {}),
    itertools.accumulate: (("iter", "fn"), {"func": "fn", "initial": "value"}),
    itertools.starmap: (("fn", "iter"), {}),
    itertools.permutations: (("iter", "value"), {"r": "value"}),
    itertools.combinations: (("iter", "value"), {"r": "value"}),
    itertools.combinations_with_replacement: (("iter", "value"), {"r": "value"}),
    itertools.compress: (("iter", "iter"), {"data": "iter", "selectors": "iter"}),
    itertools.dropwhile: (("fn", "iter"), {}),
    itertools.takewhile: (("fn", "iter"), {}),
    itertools.filterfalse: (("fn", "iter"), {}),
    itertools.pairwise: (("iter",), {}),
}
# values one infinite iterator may give during a capture before it is taken for endless
MAX_INFINITE_ITEMS = 1_000_000


def _role(roles: tuple[str, ...], i: int) -> str:
    if i < len(roles):
        return roles[i]
    if roles and roles[-1] == "iter*":
        return "iter*"
    return "value"


def _through_interpreter(h: Any, interp: Any, frame: Frame, fn: Any) -> Any:
    if fn is None:
        return None

    def call(*args: Any) -> Any:
        return h.call(interp, frame, fn, list(args), {})

    return call


def _convert(h: Any, interp: Any, frame: Frame, role: str, value: Any) -> Any:
    if role in ("iter", "iter*"):
        source = make_iterator(value, interp)
        # a generator stays lazy: itertools pulls from it as it would in CPython
        return source if isinstance(source, LazyIterator) else source.remaining()
    if role == "fn":
        return _through_interpreter(h, interp, frame, value)
    return value


def _materialising_rule(fn: Any) -> Any:
    roles, kw_roles = ITERTOOLS[fn]

    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        pos = [_convert(h, interp, frame, _role(roles, i), a) for i, a in enumerate(args)]
        kw = {k: _convert(h, interp, frame, kw_roles.get(k, "value"), v)
              for k, v in kwargs.items()}
        if any(isinstance(v, LazyIterator) for v in [*pos, *kw.values()]):
            lazy = lazy_from(fn(*pos, **kw))
            if fn is itertools.islice and not kw:  # islice(it, stop) / (it, start, stop[, step])
                stop = pos[1] if len(pos) == 2 else pos[2] if len(pos) > 2 else None
                lazy.pure(stop is not None, (pos[0],))
            return lazy
        return ListIterator(list(fn(*pos, **kw)))

    return rule


for _fn in ITERTOOLS:
    BUILTIN_RULES[_fn] = _materialising_rule(_fn)


def _chain_from_iterable(h: Any, interp: Any, frame: Frame, args: list[Any],
                         kwargs: dict[str, Any]) -> Any:
    return ListIterator([item for it in interp.iterate(args[0])
                         for item in interp.iterate(it)])


def _tee(h: Any, interp: Any, frame: Frame, args: list[Any],
         kwargs: dict[str, Any]) -> Any:
    items = interp.iterate(args[0])
    n = args[1] if len(args) > 1 else kwargs.get("n", 2)
    return tuple(ListIterator(list(items)) for _ in range(n))


def _groupby(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
    items = interp.iterate(args[0])
    key = args[1] if len(args) > 1 else kwargs.get("key")
    grouped = itertools.groupby(items, _through_interpreter(h, interp, frame, key))
    return ListIterator([(k, ListIterator(list(group))) for k, group in grouped])


def _endless(interp: Any, name: str, values: Any) -> LazyIterator:
    """A lazy iterator over the endless Python iterator ``values`` (of capture-time
    values), failing after :data:`MAX_INFINITE_ITEMS` (a capture would never end)."""
    given = [0]

    def advance() -> tuple[bool, Any]:
        given[0] += 1
        if given[0] > MAX_INFINITE_ITEMS:
            raise interp.fail(f"itertools.{name} gave more than {MAX_INFINITE_ITEMS} "
                              "values during capture (endless?)")
        return True, next(values)

    return LazyIterator(advance).pure(False, ())


def _repeat(h: Any, interp: Any, frame: Frame, args: list[Any],
            kwargs: dict[str, Any]) -> Any:
    times = args[1] if len(args) > 1 else kwargs.get("times")
    obj = args[0] if args else kwargs["object"]
    if times is None:
        return _endless(interp, "repeat", itertools.repeat(obj))
    return ListIterator([obj] * max(times, 0))


def _count(h: Any, interp: Any, frame: Frame, args: list[Any],
           kwargs: dict[str, Any]) -> Any:
    bound = inspect.signature(lambda start=0, step=1: None).bind(*args, **kwargs)
    bound.apply_defaults()
    for value in bound.arguments.values():
        if not isinstance(value, (numbers.Number, torch.SymInt, torch.SymFloat)):
            raise interp.fail(f"itertools.count of a {type(value).__name__}",
                              "count with Python numbers, or iterate over a range")
    return _endless(interp, "count", _counting(bound.arguments["start"],
                                               bound.arguments["step"]))


def _counting(start: Any, step: Any) -> Any:
    """What ``itertools.count`` gives (repeated addition, as CPython's count does past
    its fast path), also of symbolic sizes (``count(0, k)`` with ``k`` from a shape)."""
    value = start
    while True:
        yield value
        value = value + step


def _cycle(h: Any, interp: Any, frame: Frame, args: list[Any],
           kwargs: dict[str, Any]) -> Any:
    source = make_iterator(args[0], interp)
    if isinstance(source, LazyIterator):
        # the first pass pulls from the source as CPython's cycle does, then repeats
        lazy = _endless(interp, "cycle", itertools.cycle(source))
        lazy.parts = None  # (it pulls from the source: not a pure combination)
        return lazy
    items = source.remaining()
    if not items:
        return ListIterator([])
    return _endless(interp, "cycle", itertools.cycle(items))


BUILTIN_RULES[itertools.chain.from_iterable] = _chain_from_iterable
BUILTIN_RULES[itertools.tee] = _tee
BUILTIN_RULES[itertools.groupby] = _groupby
BUILTIN_RULES[itertools.repeat] = _repeat
BUILTIN_RULES[itertools.count] = _count
BUILTIN_RULES[itertools.cycle] = _cycle


def _reduce(h: Any, interp: Any, frame: Frame, args: list[Any],
            kwargs: dict[str, Any]) -> Any:
    fn = _through_interpreter(h, interp, frame, args[0])
    return functools.reduce(fn, interp.iterate(args[1]), *args[2:])


BUILTIN_RULES[functools.reduce] = _reduce
