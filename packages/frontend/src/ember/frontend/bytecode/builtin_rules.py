"""What builtins and a few torch/library helpers do during capture, one rule each.

A rule is ``rule(handler, interp, frame, args, kwargs) -> value``; it either computes
the result on the interpreter's values or raises a graph break. Iterators are
materialised (``enumerate``, ``zip``, ``map`` return a :class:`~.list_iterator.ListIterator`),
attribute access goes through the interpreter (guards, captured writes), and functions
that need real data (``bool(t)``, ``print``) break.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend._torch import dynamo_is_compiling
from ember.frontend.bytecode.env_rules import (
    ENV_FUNCTIONS,
    environ_rule,
    refuse_whole_environment,
)
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.generators import (
    InlinedGenerator,
    LazyIterator,
    lazy_enumerate,
    lazy_filter,
    lazy_map,
    lazy_zip,
)
from ember.frontend.bytecode.inference_tensors import INFERENCE_FLAG_RULES, TENSOR_METHOD_RULES
from ember.frontend.bytecode.interpreter import is_fake_tensor
from ember.frontend.bytecode.iteration import EnumeratedList, make_iterator
from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.signature_rules import SIGNATURE_RULES
from ember.frontend.bytecode.sources import AttrSource
from ember.frontend.bytecode.subclass_items import item_view, outside_subclass
from ember.frontend.bytecode.text_values import specialised_for_text

Rule = Callable[[Any, Any, Frame, list[Any], dict[str, Any]], Any]
BUILTIN_RULES: dict[Any, Rule] = {}


def _rule(*fns: Any) -> Callable[[Rule], Rule]:
    def register(rule: Rule) -> Rule:
        for fn in fns:
            BUILTIN_RULES[fn] = rule
        return rule

    return register


# their result depends on a tensor's data (or, for repr/str, would show a fake tensor)
_NEEDS_DATA = (bool, int, float, complex, repr, str, format, ascii)
# they read every item of a container (os.environ must not become a constant)
_READS_CONTENT = (len, sorted, min, max, sum, any, all, repr, str, format, ascii)


def _make_direct_rule(fn: Any) -> Rule:
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if fn in _READS_CONTENT:
            refuse_whole_environment(interp, fn, args)
        if fn in _NEEDS_DATA and args and is_fake_tensor(args[0]):
            raise interp.fail(f"{fn.__name__}() of a tensor needs its data",
                              "keep the value as a tensor")
        if fn is type and len(args) == 1:
            cls = interp.capture.visible_type(args[0])
            source = interp.capture.source_of(args[0])
            if source is None or is_fake_tensor(args[0]):
                return cls
            # class attributes read through it are guarded like the object's own
            return interp.wrap(cls, AttrSource(source, "__class__"))
        if len(args) == 1 and (fn is id or (fn is hash and is_fake_tensor(args[0]))):
            return _identity(interp.capture, args[0])  # (a tensor's hash is its id)
        if fn is isinstance and len(args) == 2 and not kwargs and is_fake_tensor(args[0]):
            # the fake stands for a tensor of the type user code sees (a subclass input:
            # its tensor guard checks the exact type), never for a FakeTensor
            return issubclass(interp.capture.visible_type(args[0]), args[1])
        if fn in (any, all) and len(args) == 1 and isinstance(args[0], LazyIterator):
            # stops at the first deciding item, as in CPython (the rest never runs)
            for item in args[0]:
                if bool(interp.truth(item)) is (fn is any):
                    return fn is any
            return fn is all
        if fn in (sorted, min, max, sum, any, all) and len(args) == 1 and not isinstance(
                args[0], (list, tuple)):
            args = [interp.iterate(args[0])]
        if fn in _MAKE_TEXT:  # a symbolic size made text is specialised (text_values.py)
            args = [specialised_for_text(a) for a in args]
        key = kwargs.get("key")
        if key is not None and fn in (sorted, min, max):
            # the key function is interpreted (inlined, guarded), not run for real
            kwargs = {**kwargs, "key": lambda v: h.call(interp, frame, key, [v], {})}
        return h.direct(interp, fn, args, kwargs)

    return rule


def _identity(cap: Any, value: Any) -> int:
    """``id(value)`` as eager gives it: of the real object a fake tensor input or a
    shadow copy stands for, guarded to be that object (the id is a constant of the
    capture). A tensor the graph makes has its fake's id (fresh at each call in eager
    too)."""
    real, source = value, cap.source_of(value)
    if is_fake_tensor(value):
        real, source = cap.real_input(value), cap.is_input_fake(value)
        if real is None:
            return id(value)
    elif id(value) in cap.shadows:
        real = cap.shadows[id(value)].real
    if source is not None:
        cap.guard("id", source, real)
    return id(real)


for _fn in (len, isinstance, issubclass, abs, min, max, sum, round, divmod, pow, hash,
            callable, repr, chr, ord, format, sorted, any, all, slice, type, id, int, float,
            bool, str, complex, ascii, bin, hex, oct):
    BUILTIN_RULES[_fn] = _make_direct_rule(_fn)


def _make_sequence_rule(cls: type) -> Rule:
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if not args:
            return cls()
        refuse_whole_environment(interp, cls, args)
        return cls(interp.iterate(args[0]))

    return rule


for _cls in (list, tuple, set, frozenset):
    BUILTIN_RULES[_cls] = _make_sequence_rule(_cls)


@_rule(dict)
def _dict_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
               kwargs: dict[str, Any]) -> Any:
    refuse_whole_environment(interp, dict, args)
    if args and outside_subclass(interp.capture, args[0]):
        args = [item_view(interp.capture, args[0]), *args[1:]]
    return dict(*args, **kwargs)


@_rule(range)
def _range_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                kwargs: dict[str, Any]) -> Any:
    for a in args:
        interp.check_not_tensor(a, "range() bound")
    return range(*args)


@_rule(enumerate)
def _enumerate_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                    kwargs: dict[str, Any]) -> Any:
    start = args[1] if len(args) > 1 else kwargs.get("start", 0)
    source = make_iterator(args[0], interp)
    if isinstance(source, LazyIterator):
        return lazy_enumerate(source, start)
    if source is not args[0] and type(source.item_list) is list and source.item_list is args[0]:
        return EnumeratedList(args[0], start)  # a list, read live
    return ListIterator(list(enumerate(source.remaining(), start)))


@_rule(zip)
def _zip_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
              kwargs: dict[str, Any]) -> Any:
    sources = [make_iterator(a, interp) for a in args]
    if any(isinstance(s, LazyIterator) for s in sources) and set(kwargs) <= {"strict"}:
        return lazy_zip(sources, bool(kwargs.get("strict", False)))
    lists = [s.remaining() for s in sources]
    if kwargs.get("strict") and len({len(items) for items in lists}) > 1:
        # CPython's ValueError comes once the shortest is exhausted, not here
        return lazy_zip([ListIterator(items) for items in lists], strict=True)
    return ListIterator(list(zip(*lists, **kwargs)))


@_rule(reversed)
def _reversed_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                   kwargs: dict[str, Any]) -> Any:
    if isinstance(args[0], (ListIterator, LazyIterator)):
        # an iterator (a generator, zip, map, iter(list), ...) is not reversible
        kind = "generator" if isinstance(args[0], InlinedGenerator) else "iterator"
        raise TypeError(f"'{kind}' object is not reversible")
    return ListIterator(list(reversed(interp.iterate(args[0]))))


@_rule(map)
def _map_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
              kwargs: dict[str, Any]) -> Any:
    fn, sources = args[0], [make_iterator(a, interp) for a in args[1:]]
    if any(isinstance(s, LazyIterator) for s in sources):
        return lazy_map(lambda *items: h.call(interp, frame, fn, list(items), {}), sources)
    return ListIterator([h.call(interp, frame, fn, list(items), {})
                         for items in zip(*[s.remaining() for s in sources])])


@_rule(filter)
def _filter_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                 kwargs: dict[str, Any]) -> Any:
    fn, source = args[0], make_iterator(args[1], interp)

    def keep(x: Any) -> bool:
        return bool(interp.truth(x if fn is None else h.call(interp, frame, fn, [x], {})))

    if isinstance(source, LazyIterator):
        return lazy_filter(keep, source)
    return ListIterator([x for x in source.remaining() if keep(x)])


@_rule(vars)
def _vars_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
               kwargs: dict[str, Any]) -> Any:
    """``vars(obj)``: its ``__dict__``, read as ``obj.__dict__`` is (guarded, with the
    writes of this capture); ``vars()`` is answered before the rules (calls.py)."""
    try:
        return interp.load_attr(args[0], "__dict__")
    except AttributeError:
        raise TypeError("vars() argument must have __dict__ attribute") from None


@_rule(iter)
def _iter_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
               kwargs: dict[str, Any]) -> Any:
    if len(args) != 1:
        raise interp.fail("iter(callable, sentinel)")
    return make_iterator(args[0], interp)


@_rule(next)
def _next_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
               kwargs: dict[str, Any]) -> Any:
    it = args[0]
    returned = None
    if isinstance(it, LazyIterator):
        finished_before = it._done
        has, value = it.advance()
        exhausted = not has
        if exhausted and not finished_before and isinstance(it, InlinedGenerator):
            returned = it.frame.return_value  # `return v` of the generator: e.value
    elif isinstance(it, ListIterator):
        exhausted = it.exhausted()
        value = None if exhausted else it.next()
    else:
        raise interp.fail(f"next() on a {type(it).__name__}")
    if exhausted:
        if len(args) > 1:
            return args[1]
        # the program's own exception (routed to its handler)
        raise StopIteration if returned is None else StopIteration(returned)
    return value


@_rule(getattr)
def _getattr_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                  kwargs: dict[str, Any]) -> Any:
    try:
        return interp.load_attr(args[0], args[1])
    except AttributeError:
        if len(args) > 2:
            interp.guard_lookup_fails(args[0], args[1], attribute=True)
            return args[2]
        raise


@_rule(hasattr)
def _hasattr_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                  kwargs: dict[str, Any]) -> Any:
    try:
        interp.load_attr(args[0], args[1])
        return True
    except AttributeError:
        interp.guard_lookup_fails(args[0], args[1], attribute=True)
        return False


@_rule(setattr)
def _setattr_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                  kwargs: dict[str, Any]) -> Any:
    interp.store_attr(args[0], args[1], args[2])
    return None


@_rule(delattr)
def _delattr_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                  kwargs: dict[str, Any]) -> Any:
    interp.delete_attr(args[0], args[1], frame)
    return None


# ``object``'s attribute slots, called as ``object.__setattr__(obj, k, v)`` or bound
# (``super().__setattr__(k, v)`` inside a class's own ``__setattr__``): they bypass the
# class's methods, so they are captured as raw reads, writes and deletes.
OBJECT_SLOTS: dict[str, Callable[[Any, list[Any]], Any]] = {
    "__setattr__": lambda interp, a: interp.store_attr_raw(a[0], a[1], a[2]),
    "__delattr__": lambda interp, a: interp.delete_attr_raw(a[0], a[1]),
    "__getattribute__": lambda interp, a: interp.load_attr_raw(a[0], a[1], bypass=True),
}


def _object_slot_rule(slot: Callable[[Any, list[Any]], Any], bound: Any = None) -> Rule:
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        return slot(interp, args if bound is None else [bound, *args])

    return rule


for _slot_name, _slot in OBJECT_SLOTS.items():
    BUILTIN_RULES[getattr(object, _slot_name)] = _object_slot_rule(_slot)


BUILTIN_RULES.update(ENV_FUNCTIONS)  # os.getenv
BUILTIN_RULES.update(SIGNATURE_RULES)  # inspect.signature of a module's method


def bound_rule_for(fn: Any) -> Rule | None:
    """A rule for a callable that is not a key of :data:`BUILTIN_RULES` because it is
    bound anew at each read: ``object``'s slots bound to an object (a
    ``method-wrapper``), the text-making methods of a string (``"{}".format``, ``join``),
    the methods of ``os.environ`` (:mod:`.env_rules`) and the tensor methods of
    :data:`~.inference_tensors.TENSOR_METHOD_RULES` bound to a fake tensor."""
    if isinstance(fn, types.MethodWrapperType) and getattr(fn, "__objclass__", None) is object:
        slot = OBJECT_SLOTS.get(fn.__name__)
        return None if slot is None else _object_slot_rule(slot, fn.__self__)
    if isinstance(getattr(fn, "__self__", None), str) and getattr(
            fn, "__name__", "") in _STR_MAKE_TEXT:
        return _str_text_rule(fn)
    if isinstance(getattr(fn, "__self__", None), InlinedGenerator):
        return _generator_method_rule(fn)
    method = TENSOR_METHOD_RULES.get(getattr(fn, "__name__", ""))
    if method is not None and is_fake_tensor(getattr(fn, "__self__", None)):
        owner = fn.__self__
        return lambda h, interp, frame, args, kwargs: method(h, interp, frame,
                                                             [owner, *args], kwargs)
    return environ_rule(fn)


def _generator_method_rule(fn: Any) -> Rule:
    """A method of an inlined generator: ``send`` runs it (``InlinedGenerator.send``);
    ``throw``/``close`` (which raise into its frame) break."""
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if fn.__name__ != "send":
            raise interp.fail(f"generator.{fn.__name__}() on a generator the capture runs "
                              "(next(), iteration and send() are captured)")
        return fn(*args, **kwargs)

    return rule


_MAKE_TEXT = (str, repr, format, ascii)
_STR_MAKE_TEXT = ("format", "format_map", "join", "__mod__")


def _str_text_rule(fn: Any) -> Rule:
    """``"...".format(...)`` and friends: symbolic sizes specialised first."""
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        return h.direct(interp, fn, [specialised_for_text(a) for a in args],
                        {k: specialised_for_text(v) for k, v in kwargs.items()})

    return rule


@_rule(print)
def _print_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                kwargs: dict[str, Any]) -> Any:
    raise interp.fail("call to print()", "remove the print, or log outside the compiled "
                      "function")


@_rule(torch.is_grad_enabled)
def _grad_enabled_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                       kwargs: dict[str, Any]) -> Any:
    return torch.is_grad_enabled()


BUILTIN_RULES[torch.no_grad] = lambda h, i, f, a, k: torch.no_grad()
BUILTIN_RULES.update(INFERENCE_FLAG_RULES)  # t.is_inference() of an input: the real one's
BUILTIN_RULES[torch.enable_grad] = lambda h, i, f, a, k: torch.enable_grad()


# Libraries ask whether they are being compiled to pick compile-friendly code paths;
# during strict capture the answer is yes, as under torch.compile.
def _constant_rule(answer: bool) -> Rule:
    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if answer and interp.capture is not None:  # (segment.capture_segment)
            interp.capture.asked_compiling = True
        return answer

    return rule


for _name, _answer in (("is_compiling", True), ("is_dynamo_compiling", True),
                       ("is_exporting", False)):
    _query = getattr(torch.compiler, _name, None)  # absent in some torch versions
    if _query is not None:
        BUILTIN_RULES[_query] = _constant_rule(_answer)
# torch._dynamo's own query (older libraries' fallback): True under torch.compile too
_dynamo_query = dynamo_is_compiling()
if _dynamo_query is not None:
    BUILTIN_RULES[_dynamo_query] = _constant_rule(True)
