"""Attribute reads, writes and deletes during capture (a base of the interpreter).

Reads of outside objects are guarded through their source (:mod:`.capture`). Writes
and deletes on outside objects are side effects: recorded in
``CaptureContext.attr_writes`` (in program order, the last write to a name wins, a
delete is the :data:`DELETED` value) and replayed on the real objects after the graph
runs (:mod:`.state`); later reads in the same capture see them. Objects made by the
captured code itself (``CaptureContext.new_objects``) are written directly.

How a write or delete is captured depends on the class, one rule per case:

- a Python ``__setattr__`` / ``__delattr__`` (not ``nn.Module``'s) is inlined; the
  ``object.__setattr__`` / ``object.__delattr__`` it ends in (``super().__setattr__``)
  is recorded as a *raw* write, replayed with ``object.__setattr__`` (the class's method
  does not run twice);
- a property with a Python setter (or deleter) inlines that function;
- ``nn.Module`` and classes with the default ``__setattr__`` record the write, replayed
  with ``setattr`` / ``delattr`` (``Module.__setattr__`` files tensors, parameters and
  submodules into their tables at replay time);
- ``p.grad = v`` / ``del p.grad`` on a graph input is recorded (``_store_grad``) and
  replayed with ``setattr`` on the real tensor; on a tensor the graph made, replayed on
  its output if it is seen after the graph; plain Python attributes of tensors
  (``p.tag = 1``) likewise (:mod:`.tensor_attributes`);
- any other data descriptor (a tensor property), or an untracked class or module
  breaks.

After a write, reads of that object whose class has a Python ``__getattribute__`` (such
as transformers' ``PretrainedConfig``, which maps attribute aliases) run that method
inlined, so an alias sees the new value; ``object.__getattribute__`` inside it reads the
captured writes.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from ember.frontend._torch import is_fake
from ember.frontend.bytecode import tensor_attributes
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.opaque_modules import guard_handed_modules
from ember.frontend.bytecode.opcodes import Instruction
from ember.frontend.bytecode.side_effects import DELETED
from ember.frontend.bytecode.sources import AttrSource, attr_source

_NOT_INPUT = object()  # _input_grad: not a graph input's .grad
_NOT_WRITTEN = object()  # _class_write: no write on a class the lookup reaches
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class Python code may set attributes of


class AttributeOps:
    """``LOAD_ATTR`` / ``STORE_ATTR`` / ``DELETE_ATTR`` semantics; see the module
    docstring. Mixed into :class:`~.data_ops.DataOps`."""

    capture: Any  # a CaptureContext or None
    calls: Any
    current_frame: Frame | None

    def fail(self, reason: str, hint: str = "") -> Exception:
        raise NotImplementedError  # DataOps.fail

    # ---- reads --------------------------------------------------------------------------

    def load_attr(self, obj: Any, name: str) -> Any:
        """``getattr(obj, name)`` with guards on outside objects and the writes made so
        far in this capture."""
        cap = self.capture
        if cap is None:
            return getattr(obj, name)
        if cap.is_dirty(obj) and not isinstance(obj, torch.nn.Module):
            # written in this capture: code that reads the object runs inlined, so that
            # it sees the writes
            getattribute = getattr(type(obj), "__getattribute__", None)
            if isinstance(getattribute, types.FunctionType):
                return self._inline(getattribute, [obj, name])
        return self.load_attr_raw(obj, name)

    def load_attr_raw(self, obj: Any, name: str, bypass: bool = False) -> Any:
        """``getattr(obj, name)`` without inlining the class's ``__getattribute__``;
        ``bypass``: ``object.__getattribute__(obj, name)`` (what that method calls),
        which skips the class's ``__getattribute__`` and ``__getattr__``."""
        cap = self.capture
        if cap is None:
            return object.__getattribute__(obj, name) if bypass else getattr(obj, name)
        if cap.is_dirty(obj):
            if name == "__dict__":
                return self._dict_with_writes(obj)
            prop = _class_attr(type(obj), name)
            if isinstance(prop, property) and isinstance(prop.fget, types.FunctionType):
                return self._inline(prop.fget, [obj])  # it reads the captured writes
        shadow = dict_shadow(cap, obj, name)
        if shadow is not None:
            # its __dict__ was read (and maybe changed through it): the shadow is current
            if name in shadow:
                return shadow[name]
            if name in obj.__dict__ or (id(obj), name) in cap.attr_writes:
                return self._read_after_delete(obj, name)
        written = cap.attr_writes.get((id(obj), name))
        if written is not None and written.obj is obj:
            if written.value is DELETED:
                return self._read_after_delete(obj, name)
            return written.value
        inherited = self._class_write(obj, name)
        if inherited is not _NOT_WRITTEN:
            return inherited
        if is_fake(obj):
            if name == "data":
                # a detached alias of the tensor (what .data is): an op on the input
                return self.calls.record(self, torch.Tensor.detach, [obj], {})
            if name == "grad":
                grad = self._input_grad(obj)
                if grad is not _NOT_INPUT:
                    return grad
                if cap.is_input_fake(obj) is None:
                    # made by the captured code, .grad not written: no backward ran on it
                    # (backward breaks the graph), so it has none, as in eager
                    return None
            if name in ("grad", "_base", "grad_fn"):
                raise self.fail(f"reading tensor attribute .{name}")
            if name == "__class__":
                return cap.visible_type(obj)
            if tensor_attributes.is_instance_attribute(cap, obj, name):
                return tensor_attributes.read(cap, obj, name)
            return getattr(obj, name)
        read = object.__getattribute__ if bypass else getattr
        source = cap.source_of(obj)
        if source is None:
            return read(obj, name)
        members = getattr(obj, "__dict__", None)
        if isinstance(members, dict) and not isinstance(
                obj, (type, types.ModuleType, torch.nn.Module)):
            # a property run here may cache into the object: captured as a write
            before = dict(members)
            try:
                value = read(obj, name)
            finally:
                cap.capture_writes(obj, before)
        else:
            if isinstance(obj, torch.nn.Module) and name in getattr(
                    obj._modules.get("parametrizations"), "_modules", ()):
                # a parametrized weight: its getter runs the parametrizations (opaque)
                guard_handed_modules(self, None, [self.load_attr(obj, "parametrizations")],
                                     {})
            value = read(obj, name)
        if isinstance(obj, types.ModuleType) and not isinstance(value, (int, float, bool, str)):
            cap.sources.setdefault(id(value), (value, AttrSource(source, name)))
            return value
        return cap.wrap(value, attr_source(obj, source, name))

    def _class_write(self, obj: Any, name: str) -> Any:
        """``obj.name`` where this capture wrote (or deleted) ``name`` on a class that
        the lookup reaches (``type(self).count += 1`` then ``self.count``, or
        ``Base.flag = True`` then ``Sub.flag``): the written value, bound as Python
        would bind it; _NOT_WRITTEN when the lookup finds no such write first."""
        cap = self.capture
        if is_fake(obj) or not any(isinstance(o, type) for o in cap.dirty.values()):
            return _NOT_WRITTEN
        if isinstance(obj, type):
            mro = obj.__mro__
        else:
            members = getattr(obj, "__dict__", None)
            if isinstance(members, dict) and name in members:
                return _NOT_WRITTEN  # the instance's own attribute comes first
            mro = type(obj).__mro__
        for klass in mro:
            written = cap.attr_writes.get((id(klass), name))
            if written is not None and written.obj is klass:
                if written.value is DELETED:
                    continue  # deleted here: the lookup goes on to the bases
                return self._bind_class_value(obj, klass, name, written.value)
            if name in vars(klass):
                return _NOT_WRITTEN  # the real class attribute, as read below
        return _NOT_WRITTEN

    def _bind_class_value(self, obj: Any, klass: type, name: str, value: Any) -> Any:
        """A value written on class ``klass`` in this capture, as ``obj.name`` gives it:
        a function bound to an instance, other plain values as they are."""
        if isinstance(value, types.FunctionType):
            return value if isinstance(obj, type) else types.MethodType(value, obj)
        if hasattr(type(value), "__get__") and not isinstance(value, torch.Tensor):
            raise self.fail(f"reading .{name} after assigning a "
                            f"{type(value).__name__} to {klass.__name__}.{name} in this "
                            "capture (a descriptor Ember does not run)",
                            "assign it outside the compiled function")
        return value

    def _input_grad(self, fake: Any) -> Any:
        """``p.grad`` of a graph input ``p`` (an optimizer reading its parameters'
        gradients): the real tensor's ``.grad``, read through ``p``'s source at every
        call (a tensor: a graph input; None: guarded to stay None). _NOT_INPUT when
        ``fake`` is not an input, or its ``.grad`` was written in this capture."""
        cap = self.capture
        source = cap.is_input_fake(fake)
        if source is None or (id(fake), "grad") in cap.attr_writes:
            return _NOT_INPUT
        real = cap.real_input(fake)
        return _NOT_INPUT if real is None else cap.wrap(real.grad, AttrSource(source, "grad"))

    def _dict_with_writes(self, obj: Any) -> Any:
        """``obj.__dict__`` of an object written in this capture: the shadow copy of
        the real dict (its changes are replayed like any outside dict's), holding the
        writes; ``record_attr_write`` keeps it up to date."""
        cap = self.capture
        source = cap.source_of(obj)
        members = getattr(obj, "__dict__", None)
        if source is None or type(members) is not dict or isinstance(obj, torch.nn.Module):
            raise self.fail(f"reading the __dict__ of a {type(obj).__name__} written "
                            "earlier in this capture (it would not show the write)")
        if id(members) in cap.shadow_of_real:
            return cap.shadow_of_real[id(members)]  # current already
        shadow = cap.wrap(members, AttrSource(source, "__dict__"))
        for write in list(cap.attr_writes.values()):
            if write.obj is obj:
                _apply_to_dict(shadow, write.name, write.value)
        return shadow

    def _read_after_delete(self, obj: Any, name: str) -> Any:
        """``obj.name`` after ``del obj.name`` in this capture: what the class supplies,
        or AttributeError."""
        cls = type(obj)
        for klass in cls.__mro__:
            if name in vars(klass):
                attr = vars(klass)[name]
                if isinstance(attr, types.FunctionType):
                    return types.MethodType(attr, obj)
                if not hasattr(type(attr), "__get__"):
                    return attr
                raise self.fail(f"reading .{name} of a {cls.__name__} after deleting it "
                                "(a class descriptor would supply it)")
        getattr_hook = getattr(cls, "__getattr__", None)
        # (Module.__getattr__ reads the tables the delete empties: nothing to find)
        if isinstance(getattr_hook, types.FunctionType) and not isinstance(
                obj, torch.nn.Module):
            return self._inline(getattr_hook, [obj, name])
        raise AttributeError(f"'{cls.__name__}' object has no attribute '{name}'")

    # ---- writes -------------------------------------------------------------------------

    def op_STORE_ATTR(self, f: Frame, ins: Instruction) -> None:
        obj, value = f.stack[-1], f.stack[-2]
        self.store_attr(obj, ins.argval, value, f)
        f.popn(2)

    def op_DELETE_ATTR(self, f: Frame, ins: Instruction) -> None:
        self.delete_attr(f.stack[-1], ins.argval, f)
        f.pop()

    def store_attr(self, obj: Any, name: str, value: Any, frame: Frame | None = None) -> None:
        """``obj.name = value`` (``setattr``)."""
        cap = self.capture
        if cap is None or id(obj) in cap.new_objects:
            # NOTE: an object made by the captured code runs its own __setattr__ for
            # real: nothing outside the graph sees it before it escapes (state.py).
            setattr(obj, name, value)
            return
        if name == "grad" and isinstance(obj, torch.Tensor):
            self._store_grad(obj, value)
            return
        if isinstance(obj, torch.Tensor) and is_fake(obj):
            tensor_attributes.write(self, obj, name, value)
            return
        self._check_tracked(obj, name, "write")
        if isinstance(obj, torch.nn.Module):
            self._check_module_slot(obj, name, value)
            setter = _module_property_setter(obj, name, self.capture.visible_type(value))
            if setter is not None:  # what Module.__setattr__ ends in: later reads see it
                self._inline(setter, [obj, value], frame)
                return
        else:
            hook = _python_hook(obj, name, "__setattr__", "fset")
            if hook is not None:
                fn, with_name = hook
                self._inline(fn, [obj, *([name] if with_name else []), value], frame)
                return
            if not _plain_attribute(obj, name, "__setattr__"):
                raise self.fail(f"attribute write .{name} on a {type(obj).__name__} goes "
                                "through a descriptor Ember cannot run",
                                "set it outside the compiled function")
        cap.record_attr_write(obj, name, value, raw=False)

    def _store_grad(self, tensor: torch.Tensor, value: Any) -> None:
        """``p.grad = value`` (``del p.grad``: None) on a graph input ``p`` (a parameter
        an optimizer's ``zero_grad(set_to_none=True)`` clears): recorded as an attribute
        write, replayed with ``setattr`` on the real tensor after the graph (a gradient
        the graph computed is its output; an input tensor or None is handed over as
        such); later reads of ``p.grad`` in the capture see it. On a tensor the captured
        code made, replayed only if that tensor is seen after the graph (as its other
        attributes, :mod:`.tensor_attributes`). A write that ``Tensor.grad``'s setter
        refuses breaks, so that it raises there as in eager."""
        cap = self.capture
        problem = _grad_mismatch(tensor, value, cap.visible_type(value))
        if problem is not None:
            raise self.fail(f"assigning .grad: {problem} (Tensor.grad's setter raises "
                            "here)", "this break is needed for correctness")
        # NOTE: torch code the capture runs for real (clip_grad_norm_, recorded on the
        # fakes) reads the fake's own .grad: it must hold the written value too
        if value is not None and not is_fake(value):
            raise self.fail("assigning .grad a tensor that is not a value of the capture",
                            "set it outside the compiled function")
        try:
            if is_fake(tensor):  # (a real tensor, reached through a source: written after)
                tensor.grad = value
        except (RuntimeError, TypeError) as e:
            raise self.fail(f"assigning .grad: {e}", "set it outside the compiled function")
        cap.record_attr_write(tensor, "grad", value, raw=False)

    def _check_module_slot(self, obj: torch.nn.Module, name: str, value: Any) -> None:
        """A write that ``Module.__setattr__`` would refuse (a tensor over a parameter,
        a non-module over a submodule) breaks, so that it raises its TypeError when it
        runs, as in eager, not after the graph."""
        if value is None:
            return
        shown = self.capture.visible_type(value)
        for table, allowed in (("_parameters", torch.nn.Parameter),
                               ("_modules", torch.nn.Module)):
            members = obj.__dict__.get(table)
            if isinstance(members, dict) and name in members and not issubclass(
                    shown, allowed):
                raise self.fail(f"assigning a {shown.__name__} to .{name}, a "
                                f"{table[1:-1]} entry of a {type(obj).__name__} (only "
                                f"a {allowed.__name__} or None replaces it)",
                                "Module.__setattr__ raises TypeError here")

    def store_attr_raw(self, obj: Any, name: str, value: Any) -> None:
        """``object.__setattr__(obj, name, value)``: bypasses the class's method."""
        cap = self.capture
        if cap is None or id(obj) in cap.new_objects:
            object.__setattr__(obj, name, value)
            return
        self._check_tracked(obj, name, "write")
        cap.record_attr_write(obj, name, value, raw=True)

    def delete_attr(self, obj: Any, name: str, frame: Frame | None = None) -> None:
        """``del obj.name`` (``delattr``)."""
        cap = self.capture
        if cap is None or id(obj) in cap.new_objects:
            delattr(obj, name)
            return
        if name == "grad" and isinstance(obj, torch.Tensor):
            self._store_grad(obj, None)  # what Tensor.grad's deleter does
            return
        if isinstance(obj, torch.Tensor) and is_fake(obj):
            tensor_attributes.delete(self, obj, name)
            return
        self._check_tracked(obj, name, "delete")
        if not isinstance(obj, torch.nn.Module):
            hook = _python_hook(obj, name, "__delattr__", "fdel")
            if hook is not None:
                fn, with_name = hook
                self._inline(fn, [obj, *([name] if with_name else [])], frame)
                return
            if not _plain_attribute(obj, name, "__delattr__"):
                raise self.fail(f"del .{name} on a {type(obj).__name__} goes through a "
                                "descriptor Ember cannot run")
        self._record_delete(obj, name, raw=False)

    def delete_attr_raw(self, obj: Any, name: str) -> None:
        """``object.__delattr__(obj, name)``."""
        cap = self.capture
        if cap is None or id(obj) in cap.new_objects:
            object.__delattr__(obj, name)
            return
        self._check_tracked(obj, name, "delete")
        self._record_delete(obj, name, raw=True)

    def _record_delete(self, obj: Any, name: str, raw: bool) -> None:
        cap = self.capture
        written = cap.attr_writes.get((id(obj), name))
        existed = _has_own(obj, name)
        if written is not None and written.value is DELETED or (written is None and not existed):
            raise AttributeError(f"'{type(obj).__name__}' object has no attribute '{name}'")
        if not existed:
            cap.forget_attr_write(obj, name)  # written in this capture only: net nothing
            return
        cap.record_attr_write(obj, name, DELETED, raw=raw)

    def _check_tracked(self, obj: Any, name: str, what: str) -> None:
        cap = self.capture
        if isinstance(obj, torch.Tensor):
            # NOTE: named for the user: the interpreter's tensors are fake ones
            raise self.fail(f"attribute {what} .{name} on a tensor: tensor attributes "
                            "other than .grad are not captured")
        if isinstance(obj, (type, types.ModuleType)) and cap.source_of(obj) is None:
            raise self.fail(f"attribute {what} .{name} on a {type(obj).__name__} Ember "
                            "does not track")

    def _inline(self, fn: types.FunctionType, args: list[Any],
                frame: Frame | None = None) -> Any:
        parent = frame if frame is not None else self.current_frame
        return self.calls.inline(self, parent, fn, args, {}, None)


def _apply_to_dict(members: dict[str, Any], name: str, value: Any) -> None:
    """An attribute write (or delete) applied to a shadow of the object's ``__dict__``."""
    if value is DELETED:
        members.pop(name, None)
    else:
        members[name] = value


def dict_shadow(cap: Any, obj: Any, name: str) -> dict[str, Any] | None:
    """The shadow copy of outside ``obj``'s ``__dict__`` when the capture read it
    (``obj.__dict__``), and ``name`` lives there (not an ``nn.Module``, no data
    descriptor on the class); it then holds the object's current instance attributes,
    attribute writes included, and its replay carries them."""
    if not cap.shadow_of_real or isinstance(obj, torch.nn.Module):
        return None
    members = getattr(obj, "__dict__", None)
    shadow = cap.shadow_of_real.get(id(members)) if type(members) is dict else None
    if shadow is None:
        return None
    attr = _class_attr(type(obj), name)
    if attr is not None and hasattr(type(attr), "__set__"):
        return None
    return shadow  # type: ignore[no-any-return]


def _python_hook(obj: Any, name: str, method: str,
                 accessor: str) -> tuple[types.FunctionType, bool] | None:
    """The Python function a write (``__setattr__``, a property's ``fset``) or delete
    (``__delattr__``, ``fdel``) of ``obj.name`` runs, and whether it takes the name;
    None when it is the default."""
    cls = type(obj)
    hook = getattr(cls, method, None)
    if isinstance(hook, types.FunctionType):
        return hook, True
    attr = _class_attr(cls, name)
    if isinstance(attr, property) and getattr(cls, method, None) is getattr(object, method):
        fn = getattr(attr, accessor)
        if isinstance(fn, types.FunctionType):
            return fn, False
    return None


def _module_property_setter(obj: torch.nn.Module, name: str,
                            shown: type) -> types.FunctionType | None:
    """The Python ``fset`` of a property ``name`` of ``obj``'s class that
    ``Module.__setattr__`` would end in (the value is no parameter or module, the name
    no parameter, buffer or submodule); None otherwise."""
    cls = type(obj)
    if cls.__setattr__ is not torch.nn.Module.__setattr__ or issubclass(
            shown, (torch.nn.Parameter, torch.nn.Module)):
        return None
    attr = _class_attr(cls, name)
    if not isinstance(attr, property) or not isinstance(attr.fset, types.FunctionType):
        return None
    if any(name in (obj.__dict__.get(t) or ()) for t in ("_parameters", "_buffers",
                                                          "_modules")):
        return None
    return attr.fset


def _grad_mismatch(tensor: torch.Tensor, value: Any, shown: type) -> str | None:
    """Why ``tensor.grad = value`` raises in eager (``Tensor.grad``'s setter checks
    the type, dtype, device, layout and size), or None when it is accepted."""
    if value is None:
        return None
    if not issubclass(shown, torch.Tensor):
        return f"a {shown.__name__} is not a Tensor or None"
    for what in ("dtype", "device", "layout"):
        if getattr(value, what) != getattr(tensor, what):
            return (f"a gradient of {what} {getattr(value, what)} for a tensor of "
                    f"{what} {getattr(tensor, what)}")
    if value.layout != torch.strided:
        return f"a {value.layout} gradient"
    if tuple(value.shape) != tuple(tensor.shape):  # (symbolic sizes: guarded)
        return f"a gradient of size {tuple(value.shape)} for a tensor of size " \
               f"{tuple(tensor.shape)}"
    return None


def _class_attr(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return None


def _has_own(obj: Any, name: str) -> bool:
    """Whether the real ``obj`` holds ``name`` itself (its ``__dict__``, or an
    ``nn.Module``'s parameter, buffer or submodule tables)."""
    if isinstance(obj, type):
        return name in vars(obj)  # (a base class's attribute is not deleted through it)
    members = getattr(obj, "__dict__", None)
    if isinstance(members, dict) and name in members:
        return True
    if isinstance(obj, torch.nn.Module):
        return any(name in getattr(obj, t) for t in ("_parameters", "_buffers", "_modules"))
    return hasattr(obj, name)


def _plain_attribute(obj: Any, name: str, method: str) -> bool:
    """Whether ``obj.name = v`` (``method`` ``__setattr__``) or ``del obj.name``
    (``__delattr__``) only stores or removes the value (no override and no property or
    other data descriptor but slots), so that recording it and replaying it later with
    ``setattr`` / ``delattr`` is equivalent."""
    cls = type(obj)
    if isinstance(obj, type):
        return _plain_class_attribute(obj, name, method)
    if getattr(cls, method, None) is not getattr(object, method):
        return False
    attr = _class_attr(cls, name)
    return attr is None or isinstance(attr, types.MemberDescriptorType) or not hasattr(
        type(attr), "__set__")


def _plain_class_attribute(cls: type, name: str, method: str) -> bool:
    """Whether ``cls.name = v`` (``del cls.name``) on a class only stores (removes) the
    entry of its ``__dict__``: a class made by Python code, whose metaclass keeps
    ``type``'s method and has no data descriptor of that name (``__name__``,
    ``__doc__``), and not a special method (which changes the type's slots that
    operators read)."""
    meta = type(cls)
    if getattr(meta, method, None) is not getattr(type, method):
        return False
    if not cls.__flags__ & _HEAPTYPE or (name.startswith("__") and name.endswith("__")):
        return False
    attr = _class_attr(meta, name)
    return attr is None or not hasattr(type(attr), "__set__")
