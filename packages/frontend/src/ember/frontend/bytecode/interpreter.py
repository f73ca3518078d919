"""The bytecode interpreter: one method per (normalised) opcode, ``op_<OPNAME>``.

It runs in one of two modes:

* **symbolic** (``capture`` is a :class:`~.capture.CaptureContext`): tensors are fake
  tensors whose ops the recorder turns into graph nodes; outside values go through
  ``capture.wrap`` (guards); code that cannot be captured raises
  :class:`~.breaks.GraphBreak` *before* changing the frame, so the caller can run that
  instruction for real instead.
* **concrete** (``capture`` is None): real values, every instruction runs for real. The
  runtime uses it to execute the instruction at a graph break, and to finish a frame
  that cannot be captured any more.

Calls are handled in :mod:`.calls` (inlining, builtins, torch functions, modules).
"""

from __future__ import annotations

import linecache
import operator
import types
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend._torch import is_fake
from ember.frontend.bytecode import opcodes
from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.capture import CaptureContext
from ember.frontend.bytecode.exceptions import find_handler
from ember.frontend.bytecode.frame import NULL, UNBOUND, Frame
from ember.frontend.bytecode.iteration import ListIterator, make_iterator
from ember.frontend.bytecode.sources import (
    AttrSource,
    CellSource,
    ClosureSource,
    GlobalSource,
    attr_source,
)
from ember.runtime.ir import SourceLocation

MAX_INLINE_DEPTH = 32


class GradModeRestore:
    """Stands for ``cm.__exit__`` of a grad-mode context manager on the stack: calling it
    restores the grad mode seen at ``__enter__``. Immutable, so a graph break inside a
    ``with torch.no_grad():`` block can rebuild it."""

    def __init__(self, previous: bool) -> None:
        self.previous = previous

    def __call__(self, *exc: Any) -> bool:
        torch.set_grad_enabled(self.previous)
        return False


_GRAD_MODE_CMS = (torch.no_grad, torch.enable_grad, torch.set_grad_enabled,
                  torch.inference_mode)


def is_fake_tensor(v: Any) -> bool:
    return is_fake(v)


class Interpreter:
    """Interprets frames; see the module docstring. ``call_rules`` decides calls."""

    def __init__(self, capture: CaptureContext | None, calls: Any) -> None:
        self.capture = capture
        self.calls = calls  # a .calls.CallHandler
        self.current_frame: Frame | None = None

    @property
    def symbolic(self) -> bool:
        return self.capture is not None

    # ---- driving ------------------------------------------------------------------------

    def run_frame(self, frame: Frame) -> Any:
        """Run ``frame`` to its return; return the value."""
        while not frame.returned:
            self.step(frame)
        return frame.return_value

    def step(self, frame: Frame) -> None:
        """Run one instruction of ``frame``."""
        ins = frame.instructions[frame.ip]
        frame.ip += 1
        self.current_frame = frame
        if self.capture is not None and ins.line != frame.last_line:
            frame.last_line = ins.line
            self.capture.recorder.set_source(location_of(frame, ins.line))
        if self.capture is not None and frame.parent is None:
            inlined = self.calls.break_calls.get(frame.ip - 1)
            if inlined is not None:
                # this instruction inlined code that broke: run it for real instead
                frame.ip -= 1
                err = GraphBreak(inlined.reason, inlined.hint)
                err.location = inlined.location
                raise err
        handler = getattr(self, "op_" + ins.opname, None)
        if handler is None:
            frame.ip -= 1
            raise GraphBreak(f"unsupported bytecode {ins.opname}",
                             "rewrite this line with plainer Python")
        try:
            handler(frame, ins)
        except GraphBreak as e:
            if e.location is None:
                e.location = location_of(frame, ins.line)
            frame.ip -= 1
            raise
        except Exception as e:
            if self.symbolic:
                # NOTE: the instruction then runs concretely, where the exception is
                # raised for real and routed to the frame's handler.
                frame.ip -= 1
                err = GraphBreak(f"{type(e).__name__} raised during capture: {e}",
                                 "exceptions are handled by running the raising code "
                                 "eagerly")
                err.location = location_of(frame, ins.line)
                raise err from e
            self._handle_exception(frame, ins, e)

    def _handle_exception(self, frame: Frame, ins: Any, exc: Exception) -> None:
        """Route ``exc`` to the frame's handler (exception table), or re-raise it."""
        entry = find_handler(frame.code, ins.offset)
        if entry is None:
            raise exc
        del frame.stack[entry.depth:]
        if entry.lasti:
            frame.push(ins.offset)
        frame.push(exc)
        frame.ip = opcodes.index_of_offset(frame.code, entry.target)

    def check_grad_mode_change(self, cm: Any) -> None:
        """A graph runs under one grad mode: where the mode changes while tensors that
        require grad are in the graph, capture breaks (the new mode starts a new graph)."""
        if self.capture is None or not self.capture.any_input_requires_grad():
            return
        new_mode = getattr(cm, "prev", None) if isinstance(cm, GradModeRestore) else None
        if isinstance(cm, GradModeRestore):
            new_mode = cm.previous
        elif isinstance(cm, torch.no_grad):
            new_mode = False
        elif isinstance(cm, torch.enable_grad):
            new_mode = True
        elif isinstance(cm, torch.set_grad_enabled):
            new_mode = bool(getattr(cm, "mode", getattr(cm, "prev", True)))
        if new_mode is not None and new_mode != torch.is_grad_enabled():
            raise GraphBreak("grad mode changes while tensors require grad",
                             "a graph runs under one grad mode; this break starts a new one")

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

    # ---- no-ops and stack shuffles ------------------------------------------------------

    def op_NOP(self, f: Frame, ins: Any) -> None:
        pass

    op_RESUME = op_NOP
    op_CACHE = op_NOP
    op_PRECALL = op_NOP
    op_EXTENDED_ARG = op_NOP
    op_JUMP_NO_INTERRUPT = op_NOP  # never produced after normalisation; kept harmless

    def op_POP_TOP(self, f: Frame, ins: Any) -> None:
        f.pop()

    def op_END_FOR(self, f: Frame, ins: Any) -> None:
        f.popn(2)

    def op_PUSH_NULL(self, f: Frame, ins: Any) -> None:
        f.push(NULL)

    def op_COPY(self, f: Frame, ins: Any) -> None:
        f.push(f.stack[-ins.arg])

    def op_SWAP(self, f: Frame, ins: Any) -> None:
        s = f.stack
        s[-1], s[-ins.arg] = s[-ins.arg], s[-1]

    def op_KW_NAMES(self, f: Frame, ins: Any) -> None:
        f.kw_names = tuple(f.code.co_consts[ins.arg])

    # ---- loads and stores ---------------------------------------------------------------

    def op_LOAD_CONST(self, f: Frame, ins: Any) -> None:
        f.push(ins.argval)

    def op_RETURN_CONST(self, f: Frame, ins: Any) -> None:
        f.returned, f.return_value = True, ins.argval

    def op_RETURN_VALUE(self, f: Frame, ins: Any) -> None:
        f.returned, f.return_value = True, f.pop()

    def op_LOAD_FAST(self, f: Frame, ins: Any) -> None:
        value = f.locals.get(ins.argval, UNBOUND)
        if value is UNBOUND:
            raise UnboundLocalError(f"local variable {ins.argval!r} referenced before "
                                    "assignment")
        f.push(value)

    op_LOAD_FAST_CHECK = op_LOAD_FAST

    def op_LOAD_FAST_AND_CLEAR(self, f: Frame, ins: Any) -> None:
        f.push(f.locals.pop(ins.argval, UNBOUND))

    def op_STORE_FAST(self, f: Frame, ins: Any) -> None:
        value = f.pop()
        if value is UNBOUND:
            f.locals.pop(ins.argval, None)
        else:
            f.locals[ins.argval] = value

    def op_DELETE_FAST(self, f: Frame, ins: Any) -> None:
        del f.locals[ins.argval]

    def op_LOAD_GLOBAL(self, f: Frame, ins: Any) -> None:
        name = ins.argval
        written = (self.capture.global_writes.get((id(f.f_globals), name))
                   if self.capture is not None else None)
        if written is not None:
            value = written[2]
        elif name in f.f_globals:
            value = self.wrap(f.f_globals[name], self.global_source(f, name))
        elif name in f.f_builtins:
            value = f.f_builtins[name]
        else:
            raise NameError(f"name {name!r} is not defined")
        if ins.arg & 1:
            f.push(NULL)
        f.push(value)

    def global_source(self, f: Frame, name: str) -> Any:
        # NOTE: globals of inlined functions from other modules are reached through the
        # function's __globals__, which the root context does not hold; those reads are
        # guarded through the function instead (its identity pins its globals dict).
        if f.parent is None or f.f_globals is self.root_globals(f):
            return GlobalSource(name)
        if f.fn_source is not None:
            from ember.frontend.bytecode.sources import ItemSource

            return ItemSource(AttrSource(f.fn_source, "__globals__"), name)
        return None

    def root_globals(self, f: Frame) -> dict[str, Any]:
        while f.parent is not None:
            f = f.parent
        return f.f_globals

    def op_STORE_GLOBAL(self, f: Frame, ins: Any) -> None:
        if self.capture is not None:
            # replayed on the real globals dict after the graph runs
            self.capture.global_writes[(id(f.f_globals), ins.argval)] = (
                f.f_globals, ins.argval, f.pop())
            return
        f.f_globals[ins.argval] = f.pop()

    def op_MAKE_CELL(self, f: Frame, ins: Any) -> None:
        name = ins.argval
        value = f.locals.pop(name, UNBOUND)
        cell = types.CellType() if value is UNBOUND else types.CellType(value)
        if self.capture is not None:
            self.capture.new_cells.add(id(cell))
        f.cells[name] = cell

    def op_COPY_FREE_VARS(self, f: Frame, ins: Any) -> None:
        for name, cell in zip(f.code.co_freevars, f.closure):
            f.cells[name] = cell

    def op_LOAD_CLOSURE(self, f: Frame, ins: Any) -> None:
        f.push(f.cells[ins.argval])

    def op_LOAD_DEREF(self, f: Frame, ins: Any) -> None:
        name = ins.argval
        cell = f.cells[name]
        if self.capture is not None:
            written = self.capture.cell_writes.get(id(cell))
            if written is not None:
                f.push(written[1])
                return
            if id(cell) not in self.capture.new_cells:
                f.push(self.capture.wrap(cell.cell_contents, self.cell_source(f, name)))
                return
        f.push(cell.cell_contents)

    def cell_source(self, f: Frame, name: str) -> Any:
        if f.parent is None:
            return CellSource(name)
        if name in f.code.co_freevars and f.fn_source is not None:
            return ClosureSource(f.fn_source, f.code.co_freevars.index(name))
        return None

    def op_STORE_DEREF(self, f: Frame, ins: Any) -> None:
        cell = f.cells[ins.argval]
        value = f.pop()
        if self.capture is not None and id(cell) not in self.capture.new_cells:
            self.capture.cell_writes[id(cell)] = (cell, value)
        else:
            cell.cell_contents = value

    def op_LOAD_ATTR(self, f: Frame, ins: Any) -> None:
        obj = f.stack[-1]
        if opcodes.PY312 and ins.arg & 1:
            self._load_method(f, obj, ins.argval)
            return
        value = self.load_attr(obj, ins.argval)
        f.pop()
        f.push(value)

    def op_LOAD_METHOD(self, f: Frame, ins: Any) -> None:
        self._load_method(f, f.stack[-1], ins.argval)

    def _load_method(self, f: Frame, obj: Any, name: str) -> None:
        value = self.load_attr(obj, name)
        f.pop()
        f.push(NULL)
        f.push(value)

    def load_attr(self, obj: Any, name: str) -> Any:
        """``getattr(obj, name)`` with guards on outside objects and the writes made so
        far in this capture."""
        cap = self.capture
        if cap is None:
            return getattr(obj, name)
        written = cap.attr_writes.get((id(obj), name))
        if written is not None and written[0] is obj:
            return written[2]
        if is_fake_tensor(obj):
            if name in ("data", "grad", "_base", "grad_fn"):
                raise self.fail(f"reading tensor attribute .{name}")
            return getattr(obj, name)
        source = cap.source_of(obj)
        value = getattr(obj, name)
        if source is None:
            return value
        if isinstance(obj, types.ModuleType) and not isinstance(value, (int, float, bool, str)):
            cap.sources.setdefault(id(value), (value, AttrSource(source, name)))
            return value
        return cap.wrap(value, attr_source(obj, source, name))

    def op_STORE_ATTR(self, f: Frame, ins: Any) -> None:
        obj, value = f.stack[-1], f.stack[-2]
        self.store_attr(obj, ins.argval, value)
        f.popn(2)

    def store_attr(self, obj: Any, name: str, value: Any) -> None:
        cap = self.capture
        if cap is None:
            setattr(obj, name, value)
            return
        if id(obj) in cap.new_objects:
            setattr(obj, name, value)
            return
        if isinstance(obj, torch.Tensor) or (
                isinstance(obj, (type, types.ModuleType)) and cap.source_of(obj) is None):
            raise self.fail(f"attribute write .{name} on a {type(obj).__name__} Ember does "
                            "not track")
        if not isinstance(obj, torch.nn.Module) and not _plain_attribute(obj, name):
            raise self.fail(f"attribute write .{name} on a {type(obj).__name__} goes through "
                            "a property or __setattr__ (code Ember would have to run)")
        # NOTE: an outside object without a source (e.g. a module global reached through
        # an inlined function) is the same object at every call, as its unguarded reads
        # assume; the write is replayed on it directly (see ``StateBuilder.replays``).
        cap.attr_writes[(id(obj), name)] = (obj, name, value)

    def op_DELETE_ATTR(self, f: Frame, ins: Any) -> None:
        if self.symbolic:
            raise self.fail(f"del .{ins.argval}")
        delattr(f.pop(), ins.argval)

    def op_LOAD_SUPER_ATTR(self, f: Frame, ins: Any) -> None:  # 3.12
        sup_fn, cls, self_obj = f.stack[-3:]
        sup = sup_fn(cls, self_obj)
        value = getattr(sup, ins.argval)
        f.popn(3)
        if ins.arg & 1:
            f.push(NULL)
        f.push(value)

    def op_LOAD_ASSERTION_ERROR(self, f: Frame, ins: Any) -> None:
        f.push(AssertionError)

    def op_IMPORT_NAME(self, f: Frame, ins: Any) -> None:
        level, fromlist = f.stack[-2:]
        if self.symbolic and not _already_imported(ins.argval, level, f.f_globals):
            raise self.fail("import of a module not yet imported", "import at module level")
        f.popn(2)
        f.push(__import__(ins.argval, f.f_globals, None, fromlist, level))

    def op_IMPORT_FROM(self, f: Frame, ins: Any) -> None:
        f.push(getattr(f.stack[-1], ins.argval))

    # ---- operators ----------------------------------------------------------------------

    def op_BINARY_OP(self, f: Frame, ins: Any) -> None:
        a, b = f.stack[-2:]
        result = self.apply(opcodes.BINARY_OPS[ins.arg], a, b)
        f.popn(2)
        f.push(result)

    def op_COMPARE_OP(self, f: Frame, ins: Any) -> None:
        a, b = f.stack[-2:]
        result = self.apply(opcodes.COMPARE_OPS[opcodes.compare_op_name(ins)], a, b)
        f.popn(2)
        f.push(result)

    def op_IS_OP(self, f: Frame, ins: Any) -> None:
        b = f.pop()
        a = f.pop()
        f.push((a is not b) if ins.arg else (a is b))

    def op_CONTAINS_OP(self, f: Frame, ins: Any) -> None:
        a, b = f.stack[-2:]
        result = self.apply(operator.contains, b, a)
        self.check_not_tensor(result, "'in' test")
        f.popn(2)
        f.push((not result) if ins.arg else bool(result))

    def op_UNARY_NEGATIVE(self, f: Frame, ins: Any) -> None:
        f.push(self.apply(operator.neg, f.pop()))

    def op_UNARY_POSITIVE(self, f: Frame, ins: Any) -> None:
        f.push(self.apply(operator.pos, f.pop()))

    def op_UNARY_INVERT(self, f: Frame, ins: Any) -> None:
        f.push(self.apply(operator.invert, f.pop()))

    def op_UNARY_NOT(self, f: Frame, ins: Any) -> None:
        self.check_not_tensor(f.stack[-1], "'not'")
        f.push(not self.truth(f.pop()))

    def op_CALL_INTRINSIC_1(self, f: Frame, ins: Any) -> None:
        if ins.arg == opcodes.INTRINSIC_UNARY_POSITIVE:
            self.op_UNARY_POSITIVE(f, ins)
        elif ins.arg == opcodes.INTRINSIC_LIST_TO_TUPLE:
            f.push(tuple(f.pop()))
        else:
            raise self.fail(f"unsupported intrinsic {ins.argrepr if hasattr(ins, 'argrepr') else ins.arg}")

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a Python operator; on fake tensors the recorder records it."""
        try:
            return fn(*args)
        except GraphBreak:
            raise
        except Exception as e:
            if self.symbolic and any(is_fake_tensor(a) for a in args):
                raise self.fail(f"operator {fn.__name__} on tensors failed during capture: "
                                f"{type(e).__name__}: {e}") from e
            raise

    def truth(self, value: Any) -> bool:
        self.check_not_tensor(value, "branch")
        return bool(value)

    # ---- subscripts and slices -----------------------------------------------------------

    def op_BINARY_SUBSCR(self, f: Frame, ins: Any) -> None:
        obj, key = f.stack[-2:]
        result = self.subscr(obj, key)
        f.popn(2)
        f.push(result)

    def op_BINARY_SLICE(self, f: Frame, ins: Any) -> None:
        obj, start, stop = f.stack[-3:]
        result = self.subscr(obj, slice(start, stop))
        f.popn(3)
        f.push(result)

    def subscr(self, obj: Any, key: Any) -> Any:
        cap = self.capture
        value = self.apply(operator.getitem, obj, key)
        if cap is None:
            return value
        source = cap.source_of(obj)
        if source is not None and isinstance(key, (int, str)) and not isinstance(key, bool):
            from ember.frontend.bytecode.sources import ItemSource

            return cap.wrap(value, ItemSource(source, key))
        return value

    def op_STORE_SUBSCR(self, f: Frame, ins: Any) -> None:
        value, obj, key = f.stack[-3:]
        self.store_subscr(obj, key, value)
        f.popn(3)

    def op_STORE_SLICE(self, f: Frame, ins: Any) -> None:
        value, obj, start, stop = f.stack[-4:]
        self.store_subscr(obj, slice(start, stop), value)
        f.popn(4)

    def store_subscr(self, obj: Any, key: Any, value: Any) -> None:
        if self.capture is not None and not (
            is_fake_tensor(obj) or isinstance(obj, (list, dict))
            or id(obj) in self.capture.new_objects
        ):
            raise self.fail(f"item assignment on a {type(obj).__name__}")
        self.apply(operator.setitem, obj, key, value)

    def op_DELETE_SUBSCR(self, f: Frame, ins: Any) -> None:
        obj, key = f.stack[-2:]
        if self.capture is not None and not isinstance(obj, (list, dict)):
            raise self.fail(f"del on a {type(obj).__name__}")
        del obj[key]
        f.popn(2)

    def op_BUILD_SLICE(self, f: Frame, ins: Any) -> None:
        f.push(slice(*f.popn(ins.arg)))

    # ---- containers -----------------------------------------------------------------------

    def op_BUILD_TUPLE(self, f: Frame, ins: Any) -> None:
        f.push(tuple(f.popn(ins.arg)))

    def op_BUILD_LIST(self, f: Frame, ins: Any) -> None:
        f.push(list(f.popn(ins.arg)))

    def op_BUILD_SET(self, f: Frame, ins: Any) -> None:
        f.push(set(f.popn(ins.arg)))

    def op_BUILD_MAP(self, f: Frame, ins: Any) -> None:
        items = f.popn(2 * ins.arg)
        f.push({items[i]: items[i + 1] for i in range(0, len(items), 2)})

    def op_BUILD_CONST_KEY_MAP(self, f: Frame, ins: Any) -> None:
        keys = f.pop()
        f.push(dict(zip(keys, f.popn(ins.arg))))

    def op_BUILD_STRING(self, f: Frame, ins: Any) -> None:
        f.push("".join(f.popn(ins.arg)))

    def op_FORMAT_VALUE(self, f: Frame, ins: Any) -> None:
        spec = f.pop() if (ins.arg & 0x04) else ""
        value = f.stack[-1]
        if self.symbolic and is_fake_tensor(value):
            raise self.fail("formatting a tensor as a string")
        conv = ins.arg & 0x03
        if conv == 1:
            value = str(value)
        elif conv == 2:
            value = repr(value)
        elif conv == 3:
            value = ascii(value)
        f.pop()
        f.push(format(value, spec))

    def op_LIST_APPEND(self, f: Frame, ins: Any) -> None:
        v = f.pop()
        f.stack[-ins.arg].append(v)

    def op_SET_ADD(self, f: Frame, ins: Any) -> None:
        v = f.pop()
        f.stack[-ins.arg].add(v)

    def op_MAP_ADD(self, f: Frame, ins: Any) -> None:
        v = f.pop()
        k = f.pop()
        f.stack[-ins.arg][k] = v

    def op_LIST_EXTEND(self, f: Frame, ins: Any) -> None:
        v = f.stack[-1]
        items = self.iterate(v)
        f.pop()
        f.stack[-ins.arg].extend(items)

    def op_SET_UPDATE(self, f: Frame, ins: Any) -> None:
        v = f.stack[-1]
        items = self.iterate(v)
        f.pop()
        f.stack[-ins.arg].update(items)

    def op_DICT_UPDATE(self, f: Frame, ins: Any) -> None:
        v = f.pop()
        f.stack[-ins.arg].update(v)

    op_DICT_MERGE = op_DICT_UPDATE

    def op_LIST_TO_TUPLE(self, f: Frame, ins: Any) -> None:
        f.push(tuple(f.pop()))

    def op_UNPACK_SEQUENCE(self, f: Frame, ins: Any) -> None:
        items = self.iterate(f.stack[-1])
        if len(items) != ins.arg:
            raise ValueError(f"expected {ins.arg} values to unpack, got {len(items)}")
        f.pop()
        f.stack.extend(reversed(items))

    def op_UNPACK_EX(self, f: Frame, ins: Any) -> None:
        before, after = ins.arg & 0xFF, ins.arg >> 8
        items = self.iterate(f.stack[-1])
        f.pop()
        middle = list(items[before:len(items) - after])
        values = list(items[:before]) + [middle] + list(items[len(items) - after:])
        f.stack.extend(reversed(values))

    def iterate(self, value: Any) -> list[Any]:
        """The items of a finite iterable, as a list (tensors are unbound along dim 0)."""
        items: list[Any] = make_iterator(value, self).remaining()
        return items

    # ---- control flow --------------------------------------------------------------------

    def op_JUMP(self, f: Frame, ins: Any) -> None:
        f.ip = ins.target

    op_JUMP_FORWARD = op_JUMP
    op_JUMP_BACKWARD = op_JUMP
    op_JUMP_BACKWARD_NO_INTERRUPT = op_JUMP
    op_JUMP_ABSOLUTE = op_JUMP

    def op_POP_JUMP_IF_TRUE(self, f: Frame, ins: Any) -> None:
        if self.truth(f.stack[-1]):
            f.ip = ins.target
        f.pop()

    def op_POP_JUMP_IF_FALSE(self, f: Frame, ins: Any) -> None:
        if not self.truth(f.stack[-1]):
            f.ip = ins.target
        f.pop()

    def op_POP_JUMP_IF_NONE(self, f: Frame, ins: Any) -> None:
        if f.pop() is None:
            f.ip = ins.target

    def op_POP_JUMP_IF_NOT_NONE(self, f: Frame, ins: Any) -> None:
        if f.pop() is not None:
            f.ip = ins.target

    def op_JUMP_IF_TRUE_OR_POP(self, f: Frame, ins: Any) -> None:
        if self.truth(f.stack[-1]):
            f.ip = ins.target
        else:
            f.pop()

    def op_JUMP_IF_FALSE_OR_POP(self, f: Frame, ins: Any) -> None:
        if not self.truth(f.stack[-1]):
            f.ip = ins.target
        else:
            f.pop()

    def op_GET_ITER(self, f: Frame, ins: Any) -> None:
        it = make_iterator(f.stack[-1], self)
        f.pop()
        f.push(it)

    def op_FOR_ITER(self, f: Frame, ins: Any) -> None:
        it = f.stack[-1]
        if not isinstance(it, ListIterator):
            if self.symbolic:
                raise self.fail(f"iteration over a {type(it).__name__}")
            try:
                f.push(next(it))
            except StopIteration:
                self._end_loop(f, ins)
            return
        if it.exhausted():
            self._end_loop(f, ins)
        else:
            f.push(it.next())

    def _end_loop(self, f: Frame, ins: Any) -> None:
        f.pop()
        f.ip = ins.target + 1 if opcodes.PY312 else ins.target

    # ---- with blocks ------------------------------------------------------------------------

    def op_BEFORE_WITH(self, f: Frame, ins: Any) -> None:
        cm = f.stack[-1]
        if isinstance(cm, _GRAD_MODE_CMS):
            self.check_grad_mode_change(cm)
            previous = torch.is_grad_enabled()
            result = cm.__enter__()
            f.pop()
            f.push(GradModeRestore(previous))
            f.push(result)
            return
        if self.symbolic:
            raise self.fail(f"context manager {type(cm).__qualname__}",
                            "only torch.no_grad/enable_grad/set_grad_enabled blocks are "
                            "captured")
        exit_fn = type(cm).__exit__.__get__(cm)
        result = type(cm).__enter__(cm)
        f.pop()
        f.push(exit_fn)
        f.push(result)

    # ---- functions and calls ------------------------------------------------------------------

    def op_MAKE_FUNCTION(self, f: Frame, ins: Any) -> None:
        code = f.pop()
        flags = ins.arg
        closure = f.pop() if flags & 0x08 else None
        annotations = f.pop() if flags & 0x04 else None
        kwdefaults = f.pop() if flags & 0x02 else None
        defaults = f.pop() if flags & 0x01 else None
        fn = types.FunctionType(code, f.f_globals, code.co_name, defaults, closure)
        if kwdefaults:
            fn.__kwdefaults__ = kwdefaults
        if annotations:
            fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2])) if isinstance(
                annotations, tuple) else annotations
        fn.__qualname__ = code.co_qualname
        if self.capture is not None:
            self.capture.new_functions.add(id(fn))
        f.push(fn)

    def op_CALL(self, f: Frame, ins: Any) -> None:
        argc = ins.arg
        kw_names = f.kw_names
        f.kw_names = ()
        below = f.stack[-argc - 2:-argc] if argc else f.stack[-2:]
        args = f.stack[len(f.stack) - argc:] if argc else []
        if below[0] is NULL:
            fn, pos = below[1], list(args)
        else:
            fn, pos = below[0], [below[1]] + list(args)
        n_kw = len(kw_names)
        kwargs = dict(zip(kw_names, pos[len(pos) - n_kw:])) if n_kw else {}
        if n_kw:
            pos = pos[: len(pos) - n_kw]
        try:
            result = self.calls.call(self, f, fn, pos, kwargs)
        except GraphBreak:
            f.kw_names = kw_names
            raise
        f.popn(argc + 2)
        f.push(result)

    def op_CALL_FUNCTION_EX(self, f: Frame, ins: Any) -> None:
        has_kwargs = ins.arg & 1
        kwargs = dict(f.stack[-1]) if has_kwargs else {}
        args_obj = f.stack[-1 - has_kwargs]
        fn = f.stack[-2 - has_kwargs]
        args = self.iterate(args_obj) if not isinstance(args_obj, tuple) else list(args_obj)
        result = self.calls.call(self, f, fn, args, kwargs)
        f.popn(3 + has_kwargs)
        f.push(result)

    # ---- exceptions (handlers run concretely; see .exceptions) -------------------------

    def op_PUSH_EXC_INFO(self, f: Frame, ins: Any) -> None:
        value = f.pop()
        f.push(f.exc_stack[-1] if f.exc_stack else None)
        f.exc_stack.append(value)
        f.push(value)

    def op_POP_EXCEPT(self, f: Frame, ins: Any) -> None:
        f.pop()
        if f.exc_stack:
            f.exc_stack.pop()

    def op_CHECK_EXC_MATCH(self, f: Frame, ins: Any) -> None:
        right = f.pop()
        f.push(isinstance(f.stack[-1], right))

    def op_RERAISE(self, f: Frame, ins: Any) -> None:
        if self.symbolic:
            raise self.fail("re-raising an exception")
        exc = f.pop()
        if ins.arg:
            f.pop()
        raise exc

    def op_WITH_EXCEPT_START(self, f: Frame, ins: Any) -> None:
        if self.symbolic:
            raise self.fail("exception inside a with block")
        exit_fn, value = f.stack[-4], f.stack[-1]
        f.push(exit_fn(type(value), value, value.__traceback__))

    # ---- generators (run to completion while inlined; see .calls) --------------------------

    def op_RETURN_GENERATOR(self, f: Frame, ins: Any) -> None:
        if f.yielded is None:
            raise self.fail("generator code outside an inlined generator call")
        f.push(None)  # the value of the first send(), popped by the next POP_TOP

    def op_YIELD_VALUE(self, f: Frame, ins: Any) -> None:
        if f.yielded is None:
            raise self.fail("yield outside an inlined generator call")
        f.yielded.append(f.pop())
        f.push(None)

    def op_RAISE_VARARGS(self, f: Frame, ins: Any) -> None:
        if self.symbolic:
            raise self.fail("raise statement reached during capture")
        if ins.arg == 0:
            if f.exc_stack:
                raise f.exc_stack[-1]
            raise RuntimeError("No active exception to reraise")
        cause = f.pop() if ins.arg == 2 else None
        exc = f.pop()
        if cause is not None:
            raise exc from cause
        raise exc


def location_of(frame: Frame, line: int | None) -> SourceLocation:
    file = frame.code.co_filename
    text = linecache.getline(file, line).strip() if line else ""
    return SourceLocation(file, line or 0, frame.code.co_name, text)


def _already_imported(name: str, level: int, f_globals: dict[str, Any]) -> bool:
    """Importing a module that is already in sys.modules has no side effects."""
    import importlib.util
    import sys

    try:
        full = importlib.util.resolve_name("." * level + name, f_globals.get("__package__"))
    except (ImportError, ValueError):
        return False
    return full in sys.modules


def _plain_attribute(obj: Any, name: str) -> bool:
    """Whether ``obj.name = v`` only stores ``v`` (no ``__setattr__`` override and no
    property or other data descriptor but slots), so that recording the write and
    replaying it later with ``setattr`` is equivalent."""
    cls = type(obj)
    if getattr(cls, "__setattr__", None) is not object.__setattr__:
        return False
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = klass.__dict__[name]
            return (isinstance(attr, types.MemberDescriptorType)
                    or not hasattr(type(attr), "__set__"))
    return True
