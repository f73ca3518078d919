"""The data opcodes of the bytecode interpreter: loads and stores (locals, globals,
cells, attributes, imports), operators, subscripts and container building.

:class:`DataOps` is a base of :class:`~.interpreter.Interpreter`; it also holds the
helpers every opcode uses (``fail``, ``wrap``, ``apply``, ``truth``). In symbolic mode
reads of outside values go through the capture context (guards, shadows) and writes to
outside objects are recorded for replay (:mod:`.state`).
"""

from __future__ import annotations

import contextlib
import operator
import sys
import types
from collections.abc import Callable
from typing import Any

from ember.frontend._torch import data_dependent_output_types, is_fake, quiet_fake_tensor_errors
from ember.frontend.bytecode import opcodes
from ember.frontend.bytecode.breaks import GraphBreak, failure_hint
from ember.frontend.bytecode.capture import (
    PRIMITIVES,
    CaptureContext,
    is_traced_array,
    opaque_data,
)
from ember.frontend.bytecode.env_rules import environ_contains, environ_getitem, is_environ
from ember.frontend.bytecode.frame import NULL, UNBOUND, Frame
from ember.frontend.bytecode.grad_mode import CALL_TURNED_GRAD_ON, program_call
from ember.frontend.bytecode.iteration import make_iterator
from ember.frontend.bytecode.object_aliasing import real_key
from ember.frontend.bytecode.opcodes import Instruction
from ember.frontend.bytecode.side_effects import CellWrite, GlobalWrite
from ember.frontend.bytecode.sources import (
    AttrSource,
    CellSource,
    ClosureSource,
    GlobalSource,
    ModuleGlobalSource,
    imported_module_source,
)
from ember.frontend.bytecode.subclass_items import (
    item_view,
    outside_subclass,
    python_operator,
    subclass_operands,
)
from ember.frontend.bytecode.text_values import specialised_for_text
from ember.frontend.bytecode.unsourced import UnsourcedOps
from torch import nn

_INPLACE_SET_OPS = (operator.ior, operator.iand, operator.isub, operator.ixor)


def is_fake_tensor(v: Any) -> bool:
    return is_fake(v)


class DataOps(UnsourcedOps):
    """Loads, stores, operators, subscripts and containers; see the module docstring."""

    capture: CaptureContext | None
    calls: Any  # a .calls.CallHandler

    @property
    def symbolic(self) -> bool:
        return self.capture is not None

    def fail(self, reason: str, hint: str = "") -> GraphBreak:
        from ember.frontend.bytecode.breaks import DEFAULT_HINT

        return GraphBreak(reason, hint or DEFAULT_HINT)

    def wrap(self, value: Any, source: Any) -> Any:
        return self.capture.wrap(value, source) if self.capture is not None else value

    def check_not_tensor(self, value: Any, what: str) -> None:
        if self.symbolic and is_fake_tensor(value):
            raise self.fail(f"data-dependent {what}: the value of a tensor decides Python "
                            "control flow", "use torch.where / masking instead of Python "
                            "branching on tensor values")

    # ---- loads and stores ---------------------------------------------------------------

    def op_LOAD_CONST(self, f: Frame, ins: Instruction) -> None:
        f.push(ins.argval)

    def op_RETURN_CONST(self, f: Frame, ins: Instruction) -> None:
        f.returned, f.return_value = True, ins.argval

    def op_RETURN_VALUE(self, f: Frame, ins: Instruction) -> None:
        f.returned, f.return_value = True, f.pop()

    def op_LOAD_FAST(self, f: Frame, ins: Instruction) -> None:
        value = f.locals.get(ins.argval, UNBOUND)
        if value is UNBOUND:
            raise UnboundLocalError(f"local variable {ins.argval!r} referenced before "
                                    "assignment")
        f.push(value)

    op_LOAD_FAST_CHECK = op_LOAD_FAST

    def op_LOAD_FAST_AND_CLEAR(self, f: Frame, ins: Instruction) -> None:
        f.push(f.locals.pop(ins.argval, UNBOUND))

    def op_STORE_FAST(self, f: Frame, ins: Instruction) -> None:
        value = f.pop()
        if value is UNBOUND:
            f.locals.pop(ins.argval, None)
        else:
            f.locals[ins.argval] = value

    def op_DELETE_FAST(self, f: Frame, ins: Instruction) -> None:
        del f.locals[ins.argval]

    def op_LOAD_GLOBAL(self, f: Frame, ins: Instruction) -> None:
        name = ins.argval
        written = (self.capture.global_writes.get((id(f.f_globals), name))
                   if self.capture is not None else None)
        if written is not None:
            value = written.value
        elif name in f.f_globals:
            source = self.global_source(f, name)
            value = self.wrap(f.f_globals[name], source)
            if source is None and self.capture is not None:  # checked by the capture cache
                self.capture.untracked_globals.append(
                    (str(f.f_globals.get("__name__")), name, f.f_globals[name]))
                self.note_unsourced(value)
        elif name in f.f_builtins:
            value = f.f_builtins[name]
        else:
            raise NameError(f"name {name!r} is not defined")
        if ins.oparg & 1:
            f.push(NULL)
        f.push(value)

    def global_source(self, f: Frame, name: str) -> Any:
        # NOTE: globals of inlined functions from other modules are read through the
        # function's source (``fn.__globals__``), which the root context does not hold,
        # or through their imported module; with neither (code run by exec) the read is
        # untracked: its containers are not shadowed, so writes into them break
        # (.unsourced)
        if f.parent is None or f.f_globals is self.root_globals(f):
            return GlobalSource(name)
        if f.fn_source is not None:
            from ember.frontend.bytecode.sources import ItemSource

            return ItemSource(AttrSource(f.fn_source, "__globals__"), name)
        # a function reached without a source (a callable object's __call__): its
        # globals are read through its module, when they are that imported module's
        module = f.f_globals.get("__name__")
        if isinstance(module, str) and f.f_globals is getattr(
                sys.modules.get(module), "__dict__", None):
            return ModuleGlobalSource(module, name)
        return None

    def root_globals(self, f: Frame) -> dict[str, Any]:
        while f.parent is not None:
            f = f.parent
        return f.f_globals

    def op_STORE_GLOBAL(self, f: Frame, ins: Instruction) -> None:
        if self.capture is not None:
            # replayed on the real globals dict after the graph runs
            self.capture.global_writes[(id(f.f_globals), ins.argval)] = GlobalWrite(
                f.f_globals, ins.argval, f.pop())
            return
        f.f_globals[ins.argval] = f.pop()

    def op_MAKE_CELL(self, f: Frame, ins: Instruction) -> None:
        name = ins.argval
        value = f.locals.pop(name, UNBOUND)
        cell = types.CellType() if value is UNBOUND else types.CellType(value)
        if self.capture is not None:
            self.capture.new_cells.add(id(cell))
        f.cells[name] = cell

    def op_COPY_FREE_VARS(self, f: Frame, ins: Instruction) -> None:
        for name, cell in zip(f.code.co_freevars, f.closure):
            f.cells[name] = cell

    def op_LOAD_CLOSURE(self, f: Frame, ins: Instruction) -> None:
        f.push(f.cells[ins.argval])

    def op_LOAD_DEREF(self, f: Frame, ins: Instruction) -> None:
        name = ins.argval
        cell = f.cells[name]
        if self.capture is not None:
            written = self.capture.cell_writes.get(id(cell))
            if written is not None:
                f.push(written.value)
                return
            if id(cell) not in self.capture.new_cells:
                source = self.cell_source(f, name)
                f.push(self.capture.wrap(cell.cell_contents, source))
                if source is None:
                    self.note_unsourced(f.stack[-1])
                return
        f.push(cell.cell_contents)

    def cell_source(self, f: Frame, name: str) -> Any:
        if f.parent is None:
            return CellSource(name)
        if name in f.code.co_freevars and f.fn_source is not None:
            return ClosureSource(f.fn_source, f.code.co_freevars.index(name))
        return None

    def op_STORE_DEREF(self, f: Frame, ins: Instruction) -> None:
        cell = f.cells[ins.argval]
        value = f.pop()
        if self.capture is not None and id(cell) not in self.capture.new_cells:
            self.capture.cell_writes[id(cell)] = CellWrite(cell, value)
        else:
            cell.cell_contents = value

    def op_LOAD_ATTR(self, f: Frame, ins: Instruction) -> None:
        obj = f.stack[-1]
        if opcodes.PY312 and ins.oparg & 1:
            self._load_method(f, obj, ins.argval)
            return
        value = self.load_attr(obj, ins.argval)
        f.pop()
        f.push(value)

    def op_LOAD_METHOD(self, f: Frame, ins: Instruction) -> None:
        self._load_method(f, f.stack[-1], ins.argval)

    def _load_method(self, f: Frame, obj: Any, name: str) -> None:
        value = self.load_attr(obj, name)
        f.pop()
        f.push(NULL)
        f.push(value)

    def op_LOAD_SUPER_ATTR(self, f: Frame, ins: Instruction) -> None:  # 3.12
        sup_fn, cls, self_obj = f.stack[-3:]
        sup = sup_fn(cls, self_obj)
        value = getattr(sup, ins.argval)
        f.popn(3)
        if ins.oparg & 1:
            f.push(NULL)
        f.push(value)

    def op_LOAD_ASSERTION_ERROR(self, f: Frame, ins: Instruction) -> None:
        f.push(AssertionError)

    def op_IMPORT_NAME(self, f: Frame, ins: Instruction) -> None:
        level, fromlist = f.stack[-2:]
        if self.symbolic and not _already_imported(ins.argval, level, f.f_globals):
            raise self.fail("import of a module not yet imported", "import at module level")
        f.popn(2)
        f.push(self.imported(__import__(ins.argval, f.f_globals, None, fromlist, level)))

    def imported(self, value: Any) -> Any:
        """A module the code imported, read through ``sys.modules`` (its attributes are
        guarded where read, as those of a module global are)."""
        if self.capture is None or not isinstance(value, types.ModuleType):
            return value
        return self.capture.wrap(value, imported_module_source(value.__name__))

    def op_IMPORT_FROM(self, f: Frame, ins: Instruction) -> None:
        module = f.stack[-1]
        f.push(self.load_attr(module, ins.argval) if self.capture is not None
               and self.capture.source_of(module) is not None else getattr(module, ins.argval))

    # ---- operators ----------------------------------------------------------------------

    def op_BINARY_OP(self, f: Frame, ins: Instruction) -> None:
        a, b = f.stack[-2:]
        result = self.apply(opcodes.BINARY_OPS[ins.oparg], a, b)
        f.popn(2)
        f.push(result)

    def op_COMPARE_OP(self, f: Frame, ins: Instruction) -> None:
        a, b = f.stack[-2:]
        if self.capture is not None and opcodes.compare_op_name(ins) in ("==", "!="):
            self.capture.guard_identities(a, b, only_identity_eq=True)
        result = self.apply(opcodes.COMPARE_OPS[opcodes.compare_op_name(ins)], a, b)
        f.popn(2)
        f.push(result)

    def op_IS_OP(self, f: Frame, ins: Instruction) -> None:
        b = f.pop()
        a = f.pop()
        if self.capture is not None:  # the result depends on which objects these are
            self.capture.guard_identities(a, b)
        f.push((a is not b) if ins.oparg else (a is b))

    def op_CONTAINS_OP(self, f: Frame, ins: Instruction) -> None:
        a, b = f.stack[-2:]
        if self.capture is not None and is_environ(b):
            found = environ_contains(self, a)  # a guarded read (env_rules)
            f.popn(2)
            f.push(found != bool(ins.oparg))
            return
        if self.capture is not None and not isinstance(a, PRIMITIVES) and isinstance(
                b, (list, tuple, set, frozenset, dict)):
            for item in b:
                self.capture.guard_identities(a, item, only_identity_eq=True)
        a = real_key(self.capture, b, a) if self.capture is not None else a
        result = self.apply(operator.contains, b, a)
        self.check_not_tensor(result, "'in' test")
        f.popn(2)
        f.push((not result) if ins.oparg else bool(result))

    def op_UNARY_NEGATIVE(self, f: Frame, ins: Instruction) -> None:
        f.push(self.apply(operator.neg, f.pop()))

    def op_UNARY_POSITIVE(self, f: Frame, ins: Instruction) -> None:
        f.push(self.apply(operator.pos, f.pop()))

    def op_UNARY_INVERT(self, f: Frame, ins: Instruction) -> None:
        f.push(self.apply(operator.invert, f.pop()))

    def op_UNARY_NOT(self, f: Frame, ins: Instruction) -> None:
        self.check_not_tensor(f.stack[-1], "'not'")
        f.push(not self.truth(f.pop()))

    def op_CALL_INTRINSIC_1(self, f: Frame, ins: Instruction) -> None:
        if ins.oparg == opcodes.INTRINSIC_UNARY_POSITIVE:
            self.op_UNARY_POSITIVE(f, ins)
        elif ins.oparg == opcodes.INTRINSIC_LIST_TO_TUPLE:
            f.push(tuple(f.pop()))
        else:
            raise self.fail(f"unsupported intrinsic {ins.oparg}")

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a Python operator; on fake tensors the recorder records it."""
        if self.symbolic and any(opaque_data(a) for a in args):
            raise self.fail(f"operator {fn.__name__} on a numpy array or buffer (its "
                            "content is not captured)")
        if (self.capture is not None and fn in _INPLACE_SET_OPS and isinstance(args[0], set)
                and self.capture.source_of(args[0]) is not None):
            raise self.fail(f"in-place {fn.__name__} on a set from outside the compiled "
                            "function")
        self.check_operator(fn, args)
        if self.capture is not None and fn is not operator.getitem and any(
                outside_subclass(self.capture, a) for a in args):
            method = python_operator(fn, args)
            if method is not None and self.current_frame is not None:  # inlined
                return self.calls.call_symbolic(self, self.current_frame, method, list(args),
                                                {})
            args = subclass_operands(self.capture, fn, args)
        if self.capture is not None and fn is not operator.getitem:
            self.capture.pin(args)  # an operator on a module reads more than its type
        if self.capture is not None and fn is operator.mod and isinstance(args[0], str):
            args = (args[0], specialised_for_text(args[1]))  # "%s" % (x.shape,)
        try:
            # (torch's own grad-mode switches stay inside the call; a failing op's log too)
            quiet = quiet_fake_tensor_errors() if self.capture is not None else None
            with program_call() as call, quiet or contextlib.nullcontext():
                result = fn(*args)
        except GraphBreak:
            raise
        except Exception as e:
            if self.symbolic and any(is_fake_tensor(a) for a in args):
                if self.capture is not None and isinstance(e, data_dependent_output_types()):
                    self.capture.data_dependent = True  # x[x > 0]: capture symbolic again
                raise self.fail(f"operator {fn.__name__} on tensors failed during capture: "
                                f"{type(e).__name__}: {e}", failure_hint(e)) from e
            raise
        if call.turned_grad_on():
            raise self.fail(f"operator {fn.__name__}: {CALL_TURNED_GRAD_ON}")
        return result

    def truth(self, value: Any) -> bool:
        self.check_not_tensor(value, "branch")
        if self.capture is not None and isinstance(value, nn.Module):
            source = self.capture.source_of(value)
            sized: Any = value
            if source is not None and hasattr(type(value), "__len__"):
                self.capture.guard("len", source, len(sized))  # an empty ModuleList
        return bool(value)

    # ---- subscripts and slices -----------------------------------------------------------

    def op_BINARY_SUBSCR(self, f: Frame, ins: Instruction) -> None:
        obj, key = f.stack[-2:]
        result = self.subscr(obj, key)
        f.popn(2)
        f.push(result)

    def op_BINARY_SLICE(self, f: Frame, ins: Instruction) -> None:
        obj, start, stop = f.stack[-3:]
        result = self.subscr(obj, slice(start, stop))
        f.popn(3)
        f.push(result)

    def subscr(self, obj: Any, key: Any) -> Any:
        cap = self.capture
        if cap is not None and is_environ(obj):
            return environ_getitem(self, key)  # a guarded read (env_rules)
        if cap is not None and isinstance(obj, dict):
            key = real_key(cap, obj, key)
        if cap is not None and isinstance(obj, dict) and not isinstance(key, PRIMITIVES):
            for k in obj:  # an object key is found by identity
                cap.guard_identities(key, k, only_identity_eq=True)
        value = self.apply(operator.getitem, obj, key)
        if cap is None:
            return value
        if self.is_unsourced(obj):
            self.note_unsourced(value)
        source = cap.source_of(obj)
        if source is not None and isinstance(key, (int, str)) and not isinstance(key, bool):
            from ember.frontend.bytecode.sources import ItemSource

            return cap.wrap(value, ItemSource(source, key))
        if source is not None and isinstance(obj, nn.Module):
            # NOTE: modules are guarded by type: a slice (``self.layers[:n]``) is read
            # through its own source; any other key pins the module (see ``pin``)
            bounds = (key.start, key.stop, key.step) if isinstance(key, slice) else None
            if bounds is not None and all(type(b) in (int, type(None)) for b in bounds):
                from ember.frontend.bytecode.sources import SliceSource

                return cap.wrap(value, SliceSource(source, *bounds))
            cap.pin([obj])
        return value

    def op_STORE_SUBSCR(self, f: Frame, ins: Instruction) -> None:
        value, obj, key = f.stack[-3:]
        self.store_subscr(obj, key, value)
        f.popn(3)

    def op_STORE_SLICE(self, f: Frame, ins: Instruction) -> None:
        value, obj, start, stop = f.stack[-4:]
        self.store_subscr(obj, slice(start, stop), value)
        f.popn(4)

    def store_subscr(self, obj: Any, key: Any, value: Any) -> None:
        if outside_subclass(self.capture, obj):
            raise self.fail(f"item assignment on a {type(obj).__qualname__} from outside the "
                            "compiled function (a change made once, at capture)")
        if self.capture is not None and not (
            is_fake_tensor(obj) or isinstance(obj, (list, dict)) or is_traced_array(obj)
            or id(obj) in self.capture.new_objects
        ):
            raise self.fail(f"item assignment on a {type(obj).__name__}")
        self.refuse_unsourced_write(obj, "item assignment")
        if self.capture is not None and isinstance(obj, dict):
            key = real_key(self.capture, obj, key)
        self.apply(operator.setitem, obj, key, value)

    def op_DELETE_SUBSCR(self, f: Frame, ins: Instruction) -> None:
        obj, key = f.stack[-2:]
        if self.capture is not None and (not isinstance(obj, (list, dict))
                                         or outside_subclass(self.capture, obj)):
            raise self.fail(f"del on a {type(obj).__name__}")
        self.refuse_unsourced_write(obj, "del of an item")
        del obj[key]
        f.popn(2)

    def op_BUILD_SLICE(self, f: Frame, ins: Instruction) -> None:
        f.push(slice(*f.popn(ins.oparg)))

    # ---- containers -----------------------------------------------------------------------

    def op_BUILD_TUPLE(self, f: Frame, ins: Instruction) -> None:
        f.push(tuple(f.popn(ins.oparg)))

    def op_BUILD_LIST(self, f: Frame, ins: Instruction) -> None:
        f.push(list(f.popn(ins.oparg)))

    def op_BUILD_SET(self, f: Frame, ins: Instruction) -> None:
        f.push(set(f.popn(ins.oparg)))

    def op_BUILD_MAP(self, f: Frame, ins: Instruction) -> None:
        items = f.popn(2 * ins.oparg)
        f.push({items[i]: items[i + 1] for i in range(0, len(items), 2)})

    def op_BUILD_CONST_KEY_MAP(self, f: Frame, ins: Instruction) -> None:
        keys = f.pop()
        f.push(dict(zip(keys, f.popn(ins.oparg))))

    def op_BUILD_STRING(self, f: Frame, ins: Instruction) -> None:
        f.push("".join(f.popn(ins.oparg)))

    def op_FORMAT_VALUE(self, f: Frame, ins: Instruction) -> None:
        spec = f.pop() if (ins.oparg & 0x04) else ""
        value = f.stack[-1]
        if self.symbolic and is_fake_tensor(value):
            raise self.fail("formatting a tensor as a string")
        if self.symbolic:
            value = specialised_for_text(value)  # not "s0": bytecode/text_values.py
        conv = ins.oparg & 0x03
        if conv == 1:
            value = str(value)
        elif conv == 2:
            value = repr(value)
        elif conv == 3:
            value = ascii(value)
        f.pop()
        f.push(format(value, spec))

    def op_LIST_APPEND(self, f: Frame, ins: Instruction) -> None:
        v = f.pop()
        f.stack[-ins.oparg].append(v)

    def op_SET_ADD(self, f: Frame, ins: Instruction) -> None:
        v = f.pop()
        f.stack[-ins.oparg].add(v)

    def op_MAP_ADD(self, f: Frame, ins: Instruction) -> None:
        v = f.pop()
        k = f.pop()
        f.stack[-ins.oparg][k] = v

    def op_LIST_EXTEND(self, f: Frame, ins: Instruction) -> None:
        v = f.stack[-1]
        if not is_star_iterable(v):
            raise TypeError(f"Value after * must be an iterable, not {type(v).__name__}")
        items = self.iterate(v)
        f.pop()
        f.stack[-ins.oparg].extend(items)

    def op_SET_UPDATE(self, f: Frame, ins: Instruction) -> None:
        v = f.stack[-1]
        items = self.iterate(v)
        f.pop()
        f.stack[-ins.oparg].update(items)

    def op_DICT_UPDATE(self, f: Frame, ins: Instruction) -> None:
        v = f.pop()
        if outside_subclass(self.capture, v):
            v = item_view(self.capture, v)
        f.stack[-ins.oparg].update(v)

    def op_DICT_MERGE(self, f: Frame, ins: Instruction) -> None:
        """``**mapping`` in a call: a non-mapping or a repeated keyword raises CPython's
        TypeError (naming the function being called)."""
        v = f.stack[-1]
        target = f.stack[-1 - ins.oparg]
        fn = f.stack[-3 - ins.oparg]
        if not hasattr(v, "keys"):
            raise TypeError(f"{function_str(fn)} argument after ** must be a mapping, not "
                            f"{type(v).__name__}")
        if outside_subclass(self.capture, v):
            v = item_view(self.capture, v)
        for key in v.keys():  # noqa: SIM118  (the mapping protocol: keys())
            if key in target:
                raise TypeError(f"{function_str(fn)} got multiple values for keyword "
                                f"argument '{key}'")
        f.pop()
        target.update(v)

    def op_LIST_TO_TUPLE(self, f: Frame, ins: Instruction) -> None:
        f.push(tuple(f.pop()))

    def op_UNPACK_SEQUENCE(self, f: Frame, ins: Instruction) -> None:
        items = self.iterate(f.stack[-1])
        if len(items) != ins.oparg:
            raise ValueError(f"expected {ins.oparg} values to unpack, got {len(items)}")
        f.pop()
        f.stack.extend(reversed(items))

    def op_UNPACK_EX(self, f: Frame, ins: Instruction) -> None:
        before, after = ins.oparg & 0xFF, ins.oparg >> 8
        items = self.iterate(f.stack[-1])
        f.pop()
        middle = list(items[before:len(items) - after])
        values = list(items[:before]) + [middle] + list(items[len(items) - after:])
        f.stack.extend(reversed(values))

    def iterate(self, value: Any) -> list[Any]:
        """The items of a finite iterable, as a list (tensors are unbound along dim 0)."""
        items: list[Any] = make_iterator(value, self).remaining()
        return items


def _already_imported(name: str, level: int, f_globals: dict[str, Any]) -> bool:
    """Importing a module that is already in sys.modules has no side effects."""
    import importlib.util
    import sys

    try:
        full = importlib.util.resolve_name("." * level + name, f_globals.get("__package__"))
    except (ImportError, ValueError):
        return False
    return full in sys.modules


def is_star_iterable(value: Any) -> bool:
    """Whether ``*value`` is allowed (CPython: an ``__iter__`` or a sequence)."""
    cls = type(value)
    return hasattr(cls, "__iter__") or hasattr(cls, "__getitem__")


def function_str(fn: Any) -> str:
    """How CPython names a callable in call-site errors (``module.qualname()``)."""
    try:
        qualname = fn.__qualname__
    except AttributeError:
        return str(fn)
    module = getattr(fn, "__module__", None)
    if isinstance(module, str) and module != "builtins":
        return f"{module}.{qualname}()"
    return f"{qualname}()"
