"""``class`` statements inside captured code (CPython 3.11/3.12).

``class C(Base): body`` compiles to ``LOAD_BUILD_CLASS`` (pushes ``__build_class__``), a
function made from the body's code, then a call ``__build_class__(body, "C", Base,
**kw)``. :func:`build_class_rule` does what CPython's ``__build_class__`` does: resolve
``__mro_entries__``, pick the metaclass, ``__prepare__`` the namespace, then run the body
*interpreted* in a frame whose ``class_namespace`` is that namespace (its ``LOAD_NAME``
/ ``STORE_NAME`` ... opcodes are here), so what the body reads (globals, the enclosing
function's variables) is guarded and its tensor ops recorded; finally the metaclass is
called for real on the namespace.

The class is made by the capture (``CaptureContext.new_classes``): its attribute writes
act on it directly, and neither it nor an instance of it can be re-created after the
graph, so one that escapes (returned, stored outside, live at a break) makes that resume
point run eagerly (:mod:`.state`), where Python makes a new class at every call as in
eager. A class used only inside the compiled code (a local helper, a local
``nn.Module``) is captured with the rest of the function. A graph break inside the body
runs the whole ``class`` statement for real.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.opcodes import Instruction
from ember.frontend.bytecode.support import unsupported_reason


class ClassOps:
    """Opcodes of class bodies; a base of the interpreter. Uses its ``op_LOAD_GLOBAL``
    and ``op_LOAD_DEREF`` for names the namespace does not hold."""

    def op_LOAD_BUILD_CLASS(self, f: Frame, ins: Instruction) -> None:
        f.push(f.f_builtins["__build_class__"])

    def _namespace(self, f: Frame) -> Any:
        if f.class_namespace is None:
            raise SystemError(f"{f.current().opname} outside a class body")
        return f.class_namespace

    def _global_named(self, f: Frame, ins: Instruction) -> None:
        as_global = dataclasses.replace(ins, opname="LOAD_GLOBAL", arg=0)
        self.op_LOAD_GLOBAL(f, as_global)  # type: ignore[attr-defined]

    def op_LOAD_NAME(self, f: Frame, ins: Instruction) -> None:
        found, value = _lookup(self._namespace(f), ins.argval)
        if found:
            f.push(value)
        else:
            self._global_named(f, ins)

    def op_STORE_NAME(self, f: Frame, ins: Instruction) -> None:
        self._namespace(f)[ins.argval] = f.pop()

    def op_DELETE_NAME(self, f: Frame, ins: Instruction) -> None:
        ns = self._namespace(f)
        try:
            del ns[ins.argval]
        except KeyError:
            raise NameError(f"name {ins.argval!r} is not defined") from None

    def op_SETUP_ANNOTATIONS(self, f: Frame, ins: Instruction) -> None:
        ns = self._namespace(f)
        if not _lookup(ns, "__annotations__")[0]:
            ns["__annotations__"] = {}

    def op_LOAD_CLASSDEREF(self, f: Frame, ins: Instruction) -> None:  # 3.11
        found, value = _lookup(self._namespace(f), ins.argval)
        if found:
            f.push(value)
        else:
            self.op_LOAD_DEREF(f, ins)  # type: ignore[attr-defined]

    def op_LOAD_LOCALS(self, f: Frame, ins: Instruction) -> None:  # 3.12
        f.push(self._namespace(f))

    def op_LOAD_FROM_DICT_OR_GLOBALS(self, f: Frame, ins: Instruction) -> None:  # 3.12
        found, value = _lookup(f.pop(), ins.argval)
        if found:
            f.push(value)
        else:
            self._global_named(f, ins)

    def op_LOAD_FROM_DICT_OR_DEREF(self, f: Frame, ins: Instruction) -> None:  # 3.12
        found, value = _lookup(f.pop(), ins.argval)
        if found:
            f.push(value)
        else:
            self.op_LOAD_DEREF(f, ins)  # type: ignore[attr-defined]


_MISSING = object()


def _lookup(ns: Any, name: str) -> tuple[bool, Any]:
    if type(ns) is dict:
        value = ns.get(name, _MISSING)
        return value is not _MISSING, value
    try:
        return True, ns[name]
    except KeyError:
        return False, None


def _metaclass(meta: Any, bases: tuple[Any, ...]) -> Any:
    """The most derived metaclass of ``meta`` and the bases' (CPython's rule)."""
    if not isinstance(meta, type):
        return meta
    winner = meta
    for base in bases:
        base_meta = type(base)
        if issubclass(winner, base_meta):
            continue
        if issubclass(base_meta, winner):
            winner = base_meta
            continue
        raise TypeError("metaclass conflict: the metaclass of a derived class must be a "
                        "(non-strict) subclass of the metaclasses of all its bases")
    return winner


def build_class_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                     kwargs: dict[str, Any]) -> Any:
    """``__build_class__(body, name, *bases, **kw)``: see the module docstring."""
    if len(args) < 2 or not isinstance(args[0], types.FunctionType):
        raise TypeError("__build_class__: not enough arguments or body is not a function")
    body, name, orig_bases = args[0], args[1], tuple(args[2:])
    if not isinstance(name, str):
        raise TypeError("__build_class__: name is not a string")
    reason = unsupported_reason(body.__code__, type(interp))
    if reason is not None:
        raise interp.fail(f"class {name}: {reason}")
    bases = types.resolve_bases(orig_bases)
    kw = dict(kwargs)
    meta = kw.pop("metaclass", None)
    if meta is None:
        meta = type(bases[0]) if bases else type
    meta = _metaclass(meta, bases)
    prepare = getattr(meta, "__prepare__", None)
    ns = prepare(name, bases, **kw) if prepare is not None else {}
    g = body.__globals__
    b = g.get("__builtins__", frame.f_builtins)
    body_frame = Frame(body.__code__, g, b if isinstance(b, dict) else b.__dict__, {},
                       closure=body.__closure__ or (), parent=frame)
    body_frame.class_namespace = ns
    if interp.capture is not None:
        interp.capture.inlined.setdefault(body.__code__, body)  # checked by the capture cache
    try:
        cell = interp.run_frame(body_frame)
    except GraphBreak as e:  # the whole class statement runs for real
        e.from_inlined_call = True
        raise
    if bases is not orig_bases:
        ns["__orig_bases__"] = orig_bases
    cls = meta(name, bases, ns, **kw)
    if interp.capture is not None:
        interp.capture.new_classes[id(cls)] = cls
        interp.capture.new_objects[id(cls)] = cls
    if isinstance(cell, types.CellType) and isinstance(cls, type):
        # CPython checks that the metaclass passed __classcell__ on to type.__new__
        try:
            contents = cell.cell_contents
        except ValueError:  # empty
            contents = None
        if contents is not cls:
            raise TypeError(f"__class__ set to {contents!r} defining {name!r} as {cls!r}")
    return cls
