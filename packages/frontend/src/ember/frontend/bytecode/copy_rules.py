"""``copy.copy`` / ``copy.deepcopy`` during capture: their results are fresh objects of
the capture (``CaptureContext.new_objects``).

``copy.copy`` and ``copy.deepcopy`` of values without the graph's tensors run for real
(what they read of the original is guarded first: ``guard_contents``).
``copy.deepcopy`` of a value holding fake tensors (a tensor the graph made,
``dataclasses.astuple``/``asdict``, which deep-copy each field, a list or dict of
tensors) is done here instead: run for real, torch's ``Tensor.__deepcopy__`` would make
a tensor of another fake mode, which every later op refuses. A tensor becomes a recorded
``clone`` (one per original, through the memo, as in CPython); lists, tuples, dicts and
plain objects (default ``__reduce_ex__``, an instance ``__dict__``) are copied item by
item. A tensor that requires grad (eager makes it a new leaf), one with Python
attributes, or another object holding tensors of the graph breaks.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch
from ember.frontend._torch import is_fake
from ember.frontend.bytecode.builtin_rules import BUILTIN_RULES
from ember.frontend.bytecode.capture import is_traced_array
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.object_aliasing import guard_contents


def _copy_rule(fn: Any) -> Any:
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if interp.capture is not None:
            interp.capture.refuse_dirty(args, f"copy.{fn.__name__}")
            guard_contents(interp, args)  # the copy's values are those of each call
            if (fn is copy.deepcopy and len(args) == 1 and not kwargs
                    and not is_traced_array(args[0]) and _holds_fake(args[0])):
                return _deepcopy(h, interp, args[0], {})
        result = h.direct(interp, fn, args, kwargs)
        if (interp.capture is not None and args and result is not args[0]
                and isinstance(getattr(result, "__dict__", None), dict)):
            # a copy is a fresh object made by the captured code: its attribute writes
            # are not side effects (see ``CaptureContext.new_objects``)
            interp.capture.new_objects[id(result)] = result
        return result

    return rule


def _holds_fake(value: Any) -> bool:
    from ember.frontend.bytecode.state import holds_fake

    return holds_fake(value)


def _plain_object(value: Any) -> bool:
    cls = type(value)
    return (isinstance(getattr(value, "__dict__", None), dict)
            and getattr(cls, "__deepcopy__", None) is None
            and getattr(cls, "__reduce_ex__", None) is object.__reduce_ex__
            and getattr(cls, "__reduce__", None) is object.__reduce__
            and getattr(cls, "__setstate__", None) is None
            and getattr(cls, "__getstate__", object.__getstate__) is object.__getstate__
            and getattr(cls, "__new__", None) is object.__new__
            and not any("__slots__" in vars(k) for k in cls.__mro__[:-1]))


def _deepcopy(h: Any, interp: Any, value: Any, memo: dict[int, Any]) -> Any:
    """``copy.deepcopy(value)`` of a value holding fake tensors (module docstring)."""
    if id(value) in memo:
        return memo[id(value)]
    cap = interp.capture
    if isinstance(value, torch.Tensor) and is_fake(value):
        real = cap.real_input(value)
        if value.requires_grad:
            raise interp.fail("copy.deepcopy of a tensor that requires grad (eager makes it "
                              "a new leaf)", "detach it first, or copy it outside the "
                              "compiled function")
        if (real is not None and real.__dict__) or any(
                w.obj is value for w in cap.attr_writes.values()):
            raise interp.fail("copy.deepcopy of a tensor with Python attributes")
        result: Any = h.record(interp, torch.Tensor.clone, [value], {})
        memo[id(value)] = result
        return result
    if not _holds_fake(value) or is_traced_array(value):  # (arrays copy themselves)
        result = copy.deepcopy(value, memo)
        memo[id(value)] = result
        return result
    if type(value) is list:
        result = []
        memo[id(value)] = result
        result.extend(_deepcopy(h, interp, v, memo) for v in value)
        return result
    if type(value) is dict:
        result = {}
        memo[id(value)] = result
        for k, v in value.items():
            result[_deepcopy(h, interp, k, memo)] = _deepcopy(h, interp, v, memo)
        return result
    if type(value) is tuple:
        items = [_deepcopy(h, interp, v, memo) for v in value]
        if id(value) in memo:  # a cycle through the tuple copied it already
            return memo[id(value)]
        result = tuple(items)
        memo[id(value)] = result
        return result
    if _plain_object(value) and (getattr(type(value), "__setattr__", None) is object.__setattr__
                                 or _frozen_dataclass(value)):
        result = object.__new__(type(value))
        memo[id(value)] = result
        cap.new_objects[id(result)] = result
        result.__dict__.update(_deepcopy(h, interp, dict(value.__dict__), memo))
        return result
    raise interp.fail(f"copy.deepcopy of a {type(value).__qualname__} holding tensors of "
                      "the graph", "copy it outside the compiled function")


def _frozen_dataclass(value: Any) -> bool:
    params = getattr(type(value), "__dataclass_params__", None)
    return bool(getattr(params, "frozen", False))


def _fields_rule(fn: Any, to_tuple: bool) -> Any:
    """``dataclasses.astuple`` / ``asdict``: run for real, but on a value holding the
    graph's tensors done here, as CPython does it (fields recursed into, lists, tuples,
    namedtuples and dicts rebuilt, any other value deep-copied by :func:`_deepcopy`)."""

    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if interp.capture is None or not args or not _holds_fake(args[0]):
            if interp.capture is not None:
                guard_contents(interp, args)  # the fields it reads, at every call
            return h.direct(interp, fn, args, kwargs)
        obj = args[0]
        factory = args[1] if len(args) > 1 else kwargs.get(
            "tuple_factory" if to_tuple else "dict_factory", tuple if to_tuple else dict)
        if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            raise TypeError(f"{fn.__name__}() should be called on dataclass instances")

        def make(items: list[Any]) -> Any:
            if factory is tuple or factory is dict:
                return factory(items)
            return h.call(interp, frame, factory, [items], {})

        def inner(value: Any) -> Any:
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                parts = [(f.name, inner(interp.load_attr(value, f.name)))
                         for f in dataclasses.fields(value)]
                return make([v for _, v in parts] if to_tuple else parts)
            if isinstance(value, tuple) and hasattr(value, "_fields"):
                return type(value)(*[inner(v) for v in value])
            if isinstance(value, (list, tuple)):
                return type(value)(inner(v) for v in value)
            if isinstance(value, dict):
                return type(value)((inner(k), inner(v)) for k, v in value.items())
            return _deepcopy(h, interp, value, {})

        return inner(obj)

    return rule


for _fn in (copy.copy, copy.deepcopy):
    BUILTIN_RULES[_fn] = _copy_rule(_fn)
BUILTIN_RULES[dataclasses.astuple] = _fields_rule(dataclasses.astuple, to_tuple=True)
BUILTIN_RULES[dataclasses.asdict] = _fields_rule(dataclasses.asdict, to_tuple=False)
