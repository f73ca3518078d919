"""Objects constructed by the captured code itself ("fresh" objects).

``cls(*args)`` inside a captured function makes a new object at every call: it is a
value made by the graph's code, not an input, so it gets no guard (no identity guard
that would fail at the next call) and no break. How it is made, by class:

- a plain Python class (default metaclass call, ``object.__new__`` / ``dict.__new__``,
  no ``__slots__``), a dataclass included: ``cls.__new__(cls)``, then ``__init__``
  inlined;
- an ``nn.Module`` subclass (``CrossEntropyLoss()`` in a training head, a user module):
  the same, with ``Module.__init__`` and the subclass's ``__init__`` inlined; creating
  an ``nn.Parameter`` inside the compiled function breaks (its value would be a new
  random tensor at every call);
- :data:`FRESH_BY_CALL` (C classes that only store their arguments, such as
  ``types.SimpleNamespace``): called for real;
- builtins and namedtuples are values, ``MyEnum(value)`` the member it looks up; other
  torch classes are recorded.

Fresh objects are listed in ``CaptureContext.new_objects``: their attribute reads and
writes act on them directly, without guards or replays. One that escapes (returned,
left in the frame at a break, stored on an outside object) is re-created after the
graph from its attributes (``New("object")`` in :mod:`.state`).
"""

from __future__ import annotations

import builtins
import collections
import enum
import types
from typing import Any

import torch
from ember.frontend.bytecode.builtin_rules import BUILTIN_RULES, Rule
from ember.frontend.bytecode.class_ops import build_class_rule
from ember.frontend.bytecode.code_origin import is_stdlib, is_torch_code
from ember.frontend.bytecode.frame import Frame
from torch import nn

_IMMUTABLE = (int, float, complex, str, bytes, tuple, frozenset, range, slice, type(None))


def made_here(cap: Any, obj: Any) -> bool:
    """Whether this capture constructed ``obj`` (nothing outside has seen it)."""
    made = cap.constructed.get(id(obj))
    return made is not None and made[0] is obj


def note_constructed(interp: Any, cls: Any, result: Any, args: list[Any],
                     kwargs: dict[str, Any]) -> None:
    """``result``, just made for real by constructor ``cls`` (``warnings.catch_warnings()``,
    ``bytearray(b"xy")``), is a new object at every call: one live after the graph is
    constructed again (.state), never the first call's object reused."""
    if isinstance(cls, type) and type(result) is cls and not isinstance(result, _IMMUTABLE):
        interp.capture.constructed[id(result)] = (result, cls, list(args), dict(kwargs))


FRESH_BY_CALL: tuple[type, ...] = (types.SimpleNamespace,)
"""Classes whose constructor runs for real and whose instances are fresh objects."""

_PLAIN_NEW = (object.__new__, dict.__new__, collections.OrderedDict.__new__)


def construct(h: Any, interp: Any, frame: Frame, cls: type, args: list[Any],
              kwargs: dict[str, Any]) -> Any:
    """``cls(*args, **kwargs)`` during capture (``h`` is the call handler)."""
    rule = BUILTIN_RULES.get(cls)
    if rule is not None:
        return rule(h, interp, frame, args, kwargs)
    if cls.__module__ == "builtins" and not issubclass(cls, BaseException):
        result = h.direct(interp, cls, args, kwargs)
        note_constructed(interp, cls, result, args, kwargs)
        return result
    if issubclass(cls, nn.Parameter):
        raise interp.fail(f"creating a parameter ({cls.__qualname__}) inside the compiled function "
                          "(a new parameter at every call)",
                          "create the module or parameter in __init__, outside forward")
    if issubclass(cls, nn.Module) and _plain_class(cls):
        return construct_object(h, interp, frame, cls, args, kwargs)
    if is_torch_code(cls) and not issubclass(cls, nn.Module):
        return h.record(interp, cls, args, kwargs)
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return h.direct(interp, cls, args, kwargs)  # a namedtuple: immutable
    if isinstance(cls, enum.EnumMeta) and len(args) == 1 and not kwargs:
        return h.direct(interp, cls, args, kwargs)  # Color(2): a member looked up
    if (_plain_class(cls) and not issubclass(cls, (nn.Module, BaseException, torch.Tensor))
            and not is_stdlib(cls)):
        return construct_object(h, interp, frame, cls, args, kwargs)
    raise interp.fail(f"constructing a {cls.__qualname__} object",
                      "create it outside the compiled function")


def construct_object(h: Any, interp: Any, frame: Frame, cls: Any, args: list[Any],
                     kwargs: dict[str, Any]) -> Any:
    """A fresh instance of ``cls``: made with ``cls.__new__``, its ``__init__``
    inlined; tracked as made by this capture, so writes to it are not side effects."""
    obj = cls.__new__(cls)
    interp.capture.new_objects[id(obj)] = obj
    init = cls.__init__
    if isinstance(init, types.FunctionType):
        h.inline(interp, frame, init, [obj, *args], kwargs, None)
    elif args or kwargs:
        if init is object.__init__:
            raise interp.fail(f"{cls.__qualname__}() takes no arguments")
        h.direct(interp, init, [obj, *args], kwargs)
    return obj


def _plain_class(cls: type) -> bool:
    """A class whose instances Ember can create and re-create: default metaclass call,
    default ``__new__``, no ``__slots__``-only layout."""
    return (type(cls).__call__ is type.__call__ and cls.__new__ in _PLAIN_NEW
            and hasattr(cls, "__dict__") and "__slots__" not in cls.__dict__)


def _fresh_by_call(cls: type) -> Rule:
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        obj = h.direct(interp, cls, args, kwargs)
        if interp.capture is not None:
            interp.capture.new_objects[id(obj)] = obj
        return obj

    return rule


for _cls in FRESH_BY_CALL:
    BUILTIN_RULES[_cls] = _fresh_by_call(_cls)

# a `class` statement inside the captured code makes a fresh class (.class_ops)
BUILTIN_RULES[builtins.__build_class__] = build_class_rule
