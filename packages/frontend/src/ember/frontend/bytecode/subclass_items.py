"""The items of an outside instance of a ``list``/``dict`` subclass (transformers'
``ModelOutput``, an ``OrderedDict`` subclass), as the C code of its base class reads
them.

Outside lists and dicts of the exact builtin types are shadow copies (:mod:`.capture`);
an instance of a subclass stays the real object (its class's Python methods, its
attributes, its identity), guarded by type. Code run for real on it (``out.items()``,
``dict(out)``, ``{**out}``, a loop over a list subclass) would read its items now, at
capture: their tensors would be constants of the graph (the first call's values) and
their number unguarded. :func:`item_view` gives those reads a plain copy instead, whose
items are read through their source (:class:`~.sources.BaseItemSource`: tensors are
graph inputs, other values guarded) and whose length or keys are guarded; calls that
would change the object break (:func:`check_read_only`), as its change would happen
once, at capture.
"""

from __future__ import annotations

import collections
import operator
import types
from typing import Any

from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.sources import BaseItemSource

__all__ = ["check_read_only", "item_view", "outside_subclass", "python_operator",
           "subclass_operands"]

# methods of the base class that read the items and change nothing
_READS = {
    list: frozenset({"__getitem__", "__len__", "__iter__", "__reversed__", "__contains__",
                     "index", "count", "copy", "__add__", "__mul__", "__rmul__", "__eq__",
                     "__ne__", "__lt__", "__le__", "__gt__", "__ge__"}),
    dict: frozenset({"__getitem__", "__len__", "__iter__", "__reversed__", "__contains__",
                     "keys", "values", "items", "get", "copy", "__or__", "__eq__",
                     "__ne__"}),
}

# protocol methods the guards call (len, keys): a Python override would run in them
_PROTOCOL = ("__len__", "__iter__", "keys")


def outside_subclass(cap: Any, value: Any) -> bool:
    """Whether ``value`` is an instance of a strict subclass of ``list`` or ``dict`` read
    from outside the capture (it has a source)."""
    if cap is None or type(value) in (list, dict, collections.OrderedDict,
                                      collections.defaultdict):
        return False
    return isinstance(value, (list, dict)) and cap.source_of(value) is not None


def check_read_only(cap: Any, value: Any, name: str) -> None:
    """Raise a graph break when method ``name`` of the base class of outside ``value``
    may change it (or, on a ``defaultdict`` subclass, insert a missing key)."""
    base = list if isinstance(value, list) else dict
    # (OrderedDict's copy() and | make an instance of the subclass, not a plain copy)
    same_class = isinstance(value, collections.OrderedDict) and name in ("copy", "__or__")
    if name in _READS[base] and not same_class and not isinstance(
            value, collections.defaultdict):
        return
    raise GraphBreak(f"{base.__name__}.{name}() on an instance of {type(value).__qualname__} "
                     "from outside the compiled function (a change made once, at capture)")


def item_view(cap: Any, value: Any) -> Any:
    """A plain ``list``/``dict``/``OrderedDict`` holding the items of outside ``value``,
    each wrapped through its source, with ``value``'s length (list) or keys (dict)
    guarded. The same copy for the whole capture (no call that changes ``value`` is
    captured).

    Raises:
        GraphBreak: the class overrides in Python a protocol method the guards would
            call (``__len__``, ``__iter__``, ``keys``).
    """
    known = cap.subclass_views.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    cls = type(value)
    for name in _PROTOCOL:
        if isinstance(getattr(cls, name, None), types.FunctionType):
            raise GraphBreak(f"the items of a {cls.__qualname__} from outside the compiled "
                             f"function ({cls.__qualname__}.{name} is Python code)")
    source = cap.source_of(value)
    copy: Any
    if isinstance(value, list):
        cap.guard("len", source, len(value))
        copy = [cap.wrap(list.__getitem__(value, i), BaseItemSource(source, i, list))
                for i in range(len(value))]
    else:
        keys = list(value.keys())
        cap.guard("keys", source, tuple(keys))
        copy = collections.OrderedDict() if isinstance(value, collections.OrderedDict) else {}
        for k in keys:
            copy[k] = cap.wrap(dict.__getitem__(value, k), BaseItemSource(source, k, dict))
    cap.subclass_views[id(value)] = (value, copy)
    return copy


# operators whose result, on the base class's items, is a plain value (bool, list)
_PLAIN_RESULT = {operator.contains: (list, dict), operator.eq: (list, dict),
                 operator.ne: (list, dict), operator.add: (list,)}


def subclass_operands(cap: Any, fn: Any, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The operands of operator ``fn`` with each outside list/dict subclass instance
    replaced by its :func:`item_view`.

    Raises:
        GraphBreak: ``fn`` may change the object or make an instance of its class, or
            the class defines the operator in Python.
    """
    out = []
    for a in args:
        if outside_subclass(cap, a):
            bases = _PLAIN_RESULT.get(fn, ())
            dunder = f"__{fn.__name__}__"
            if not isinstance(a, bases) or isinstance(getattr(type(a), dunder, None),
                                                      types.FunctionType):
                raise GraphBreak(f"operator {fn.__name__} on an instance of "
                                 f"{type(a).__qualname__} from outside the compiled function")
            a = item_view(cap, a)
        out.append(a)
    return tuple(out)


def python_operator(fn: Any, args: tuple[Any, ...]) -> types.FunctionType | None:
    """The Python ``__contains__`` of the class of ``args[0]`` that ``operator.contains``
    calls (``ModelOutput.__contains__``), to be inlined; None for other operators (a
    reflected operand would need ``NotImplemented`` handled) or a C method."""
    if fn is not operator.contains or not args:
        return None
    method = getattr(type(args[0]), "__contains__", None)
    return method if isinstance(method, types.FunctionType) else None
