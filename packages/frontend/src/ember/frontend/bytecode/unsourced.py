"""Outside objects the strict capture reached without a source, and the writes into
their lists and dicts it refuses (a base of the interpreter).

A value read from outside the compiled function through a source (an argument, a
global, an attribute or item of either) is guarded, and a list or dict among them is
read through a shadow copy whose changes are replayed after the graph
(:mod:`.capture`, :mod:`.state`). A value read without a source is the real object: a
global of code whose globals are not an imported module's (``exec``), a closure
variable of a function reached without a source, an attribute or item of such a value.
A write into one of its containers during capture (``collector.append(out)``) would
happen once, at capture, with a fake tensor in it, and never at later calls.

:class:`UnsourcedOps` remembers those values (``note_unsourced``; what is read from
them, attributes and items, too) for the rest of the capture; a mutating method
(``append``, ``update``, ...), an item assignment or deletion, or an in-place operator
(``+=``, ``|=``) on one of their lists or dicts is a graph break whose reason says so
(``EMBER_LOGS=graph_breaks``): the code runs eagerly, on the real object. Not followed:
items reached by iterating over such a container, objects a call run for real returns.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend.bytecode.attributes import AttributeOps
from ember.frontend.bytecode.capture import PRIMITIVES
from ember.frontend.bytecode.sources import AttrSource, DictValueSource, Source

__all__ = ["MUTATING_METHODS", "UnsourcedOps"]

_LIST_WRITES = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "sort",
                          "reverse", "__setitem__", "__delitem__", "__iadd__", "__imul__"})
_DICT_WRITES = frozenset({"update", "setdefault", "pop", "popitem", "clear", "__setitem__",
                          "__delitem__", "__ior__", "move_to_end"})

MUTATING_METHODS: dict[type, frozenset[str]] = {list: _LIST_WRITES, dict: _DICT_WRITES}
"""The methods that write into a list or dict (and their subclasses)."""

_INPLACE_OPERATORS = (operator.iadd, operator.imul, operator.ior)


def _writes(container: Any, name: str) -> bool:
    """Whether method ``name`` of ``container`` (a list or dict) writes into it."""
    for base, names in MUTATING_METHODS.items():
        if isinstance(container, base):
            return name in names
    return False


class UnsourcedOps(AttributeOps):
    """Tracks the outside values read without a source; see the module docstring.
    Mixed into :class:`~.data_ops.DataOps`."""

    @property
    def unsourced(self) -> dict[int, Any]:
        """id -> outside value read without a source in this capture (kept alive)."""
        found: dict[int, Any] | None = self.__dict__.get("_unsourced")
        if found is None:
            found = self.__dict__["_unsourced"] = {}
        return found

    def note_unsourced(self, value: Any) -> None:
        """``value`` was read from outside the compiled function without a source."""
        if self.capture is not None and not isinstance(value, (*PRIMITIVES, torch.Tensor)):
            self.unsourced[id(value)] = value

    def is_unsourced(self, obj: Any) -> bool:
        entry = self.unsourced.get(id(obj)) if self.capture is not None else None
        return entry is not None and entry is obj

    def load_attr_raw(self, obj: Any, name: str, bypass: bool = False) -> Any:
        value = super().load_attr_raw(obj, name, bypass)
        cap = self.capture
        if (cap is not None and self.is_unsourced(obj)
                and (id(obj), name) not in cap.attr_writes):  # not a value written here
            self.note_unsourced(value)
        return value

    def module_hook(self, module: Source | None, table: str, index: int, hook: Any) -> Any:
        """Hook ``index`` of the hook dict ``table`` of the module at ``module``, read
        through its source (by position): a hook defined in a library module reads that
        module's globals, a closure's hook its cells, through sources (guarded, lists
        and dicts shadowed) rather than as real objects."""
        if self.capture is None or module is None:
            return hook
        return self.capture.wrap(hook, DictValueSource(AttrSource(module, table), index))

    def refuse_unsourced_write(self, container: Any, what: str) -> None:
        """Break the graph when ``container`` is an outside list or dict read without a
        source (``what``: the write, for the reason)."""
        if isinstance(container, (list, dict)) and self.is_unsourced(container):
            raise self.fail(
                f"{what} writes into a {type(container).__name__} from outside the "
                "compiled function that the capture reached without a source (the write "
                "would happen once, at capture, and never be replayed)",
                "this break is needed for correctness: the code runs eagerly, on the "
                "real object")

    def check_container_call(self, fn: Any, args: list[Any]) -> None:
        """A C method called during capture: ``list.append`` and the like, bound
        (``log.append(x)``) or not (``list.append(log, x)``)."""
        name = getattr(fn, "__name__", "")
        owner = getattr(fn, "__self__", None)
        if _writes(owner, name):
            self.refuse_unsourced_write(owner, f"{type(owner).__name__}.{name}()")
        elif (args and isinstance(getattr(fn, "__objclass__", None), type)
              and _writes(args[0], name)):
            self.refuse_unsourced_write(args[0], f"{type(args[0]).__name__}.{name}()")

    def check_operator(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """An operator applied during capture: ``+=``, ``*=`` and ``|=`` write into a
        list or dict."""
        if args and any(fn is op for op in _INPLACE_OPERATORS):
            self.refuse_unsourced_write(args[0], f"in-place {fn.__name__}")
