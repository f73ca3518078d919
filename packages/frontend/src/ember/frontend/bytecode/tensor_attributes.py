"""Python attributes of tensors during capture (``p.tag = 1``, ``hasattr(x, "tag")``,
``t.grad = g`` on a tensor the graph made).

The interpreter's tensors are fake tensors: an attribute the user put on a real tensor is
not on its fake, and the fake has attributes of its own (``fake_mode``, ``constant``) that
eager tensors lack. So an instance attribute (a name the tensor's visible class does not
define) is read:

- on a graph input (an argument, a parameter): from the real tensor's ``__dict__``,
  through the input's source: guarded by value, or, when missing, guarded to stay
  missing (``raises(x.tag)``) and an ``AttributeError`` as in eager;
- on a tensor the captured code made: only what this capture wrote (none exist at its
  start), else ``AttributeError``.

Writes and deletes are recorded in ``CaptureContext.attr_writes``, so later reads see
them. On an input they are replayed on the real tensor after the graph (``setattr`` /
``delattr`` through its source); on a tensor the graph made, only when that tensor is
seen after the graph (returned, stored, live at a break), on the graph's output that
becomes it (:meth:`.state.StateBuilder.made_tensor_replays`). Writes to a property or
other data descriptor of the class (``requires_grad``, ``data``, ``names``) still break.
"""

from __future__ import annotations

from typing import Any

from ember.frontend.bytecode.side_effects import DELETED
from ember.frontend.bytecode.sources import AttrSource, LookupFails


def _class_attr(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name]
    return _NONE


_NONE = object()


def is_instance_attribute(cap: Any, fake: Any, name: str) -> bool:
    """Whether ``fake.name`` names an instance attribute: not defined by the class the
    user sees (``Tensor``, ``Parameter``), nor a dunder."""
    if name.startswith("__") and name.endswith("__"):
        return False
    return _class_attr(cap.visible_type(fake), name) is _NONE


def _missing(cap: Any, fake: Any, name: str) -> AttributeError:
    return AttributeError(f"'{cap.visible_type(fake).__name__}' object has no attribute "
                          f"'{name}'")


def read(cap: Any, fake: Any, name: str) -> Any:
    """``fake.name`` of an instance attribute not written in this capture (see the
    module docstring).

    Raises:
        AttributeError: the tensor has no such attribute (as in eager).
    """
    source = cap.is_input_fake(fake)
    real = cap.real_input(fake) if source is not None else None
    if real is None:
        raise _missing(cap, fake, name)
    members = real.__dict__
    if name in members:
        return cap.wrap(members[name], AttrSource(source, name))
    cap.guard("equals", LookupFails(source, name, True), True)
    raise _missing(cap, fake, name)


def check_writable(interp: Any, fake: Any, name: str, what: str) -> None:
    """Break on a write (or delete) through a data descriptor of the tensor's class:
    Ember does not run those (``requires_grad``, ``data``, ``names``, ...)."""
    attr = _class_attr(interp.capture.visible_type(fake), name)
    if attr is not _NONE and hasattr(type(attr), "__set__"):
        raise interp.fail(f"attribute {what} .{name} on a tensor: a tensor property "
                          "(only .grad and plain Python attributes are captured)",
                          "set it outside the compiled function")


def write(interp: Any, fake: Any, name: str, value: Any) -> None:
    """``fake.name = value`` for a plain Python attribute."""
    check_writable(interp, fake, name, "write")
    interp.capture.record_attr_write(fake, name, value, raw=False)


def delete(interp: Any, fake: Any, name: str) -> None:
    """``del fake.name`` for a plain Python attribute.

    Raises:
        AttributeError: it has no such attribute (as in eager).
    """
    cap = interp.capture
    check_writable(interp, fake, name, "delete")
    written = cap.attr_writes.get((id(fake), name))
    source = cap.is_input_fake(fake)
    real = cap.real_input(fake) if source is not None else None
    existed = real is not None and name in real.__dict__
    if real is not None:  # whether it exists at the start is what the delete depends on
        cap.guard("equals", LookupFails(source, name, True), not existed)
    if (written is not None and written.value is DELETED) or (written is None and not existed):
        raise _missing(cap, fake, name)
    if not existed:
        cap.forget_attr_write(fake, name)  # written in this capture only: net nothing
        return
    cap.record_attr_write(fake, name, DELETED, raw=False)
