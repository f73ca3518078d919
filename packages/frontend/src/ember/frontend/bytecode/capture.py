"""The capture context of one segment: the recorder, the guards, the graph inputs, and
the Python side effects made while interpreting.

Every value that enters the interpreter from outside (function arguments, globals,
closure cells, attributes of modules, items of argument lists) goes through
:meth:`CaptureContext.wrap` with its :class:`~.sources.Source`, which installs the guards
the capture depends on and turns real tensors into tracked fake tensors (graph inputs).
Lists and dicts from outside are replaced by *shadow* copies: the interpreter mutates
the shadow, and the mutation is replayed on the real object after the graph runs
(:mod:`.state`). Attribute and cell writes on outside objects are recorded the same way.
"""

from __future__ import annotations

import array
import collections
import enum
import numbers
import re
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Self

import torch
from ember.frontend._torch import is_fake
from ember.frontend.bytecode.guards import Guard, GuardSet, tensor_guard
from ember.frontend.bytecode.method_guards import guard_method
from ember.frontend.bytecode.object_aliasing import guard_apart, second_source
from ember.frontend.bytecode.side_effects import AttrWrite, CellWrite, GlobalWrite
from ember.frontend.bytecode.sources import (
    AttrSource,
    ItemSource,
    LocalSource,
    MethodFuncSource,
    ModuleMemberSource,
    Source,
)
from ember.frontend.bytecode.symbolic_ints import symbolic_int
from ember.frontend.dynamic import (DynamicDim, DynamicPolicy, add_input, asked_when_aliased,
                                    dims_of)
from ember.frontend.free_layouts import FreeInputs, add_free_input
from ember.frontend.shape_guards import SymbolicInput
from ember.frontend.tensor_subclasses import overriding_subclass
from ember.runtime.ir import InputKind, InputSpec, SourceLocation
from ember.runtime.tracing import GraphRecorder
from torch import nn

PRIMITIVES = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis),
              torch.dtype, torch.device, torch.layout, torch.memory_format)


@dataclass
class Shadow:
    """A copy of an outside list/dict the interpreter works on; ``initial`` is its
    content when wrapped, to detect mutation."""

    real: Any
    copy: Any
    source: Source
    initial: list[Any]


# outside containers read through a shadow copy whose changes are replayed
SHADOWED = (list, dict, collections.OrderedDict, collections.defaultdict)


@dataclass
class CaptureContext:
    """State of one segment capture; see the module docstring."""

    recorder: GraphRecorder = field(default_factory=GraphRecorder)
    guards: GuardSet = field(default_factory=GuardSet)
    inputs: list[tuple[Source, torch.Tensor]] = field(default_factory=list)
    # id(real or fake tensor) -> fake; the real tensors are kept alive in ``inputs``.
    fake_of: dict[int, torch.Tensor] = field(default_factory=dict)
    source_of_fake: dict[int, Source] = field(default_factory=dict)
    # id(outside object) -> (object, source), for attribute reads and state rebuilds.
    sources: dict[int, tuple[Any, Source]] = field(default_factory=dict)
    shadows: dict[int, Shadow] = field(default_factory=dict)  # id(copy) -> shadow
    shadow_of_real: dict[int, Any] = field(default_factory=dict)
    # (id(obj), name) -> the last write (or delete) of that attribute, in program order
    attr_writes: dict[tuple[int, str], AttrWrite] = field(default_factory=dict)
    dirty: dict[int, Any] = field(default_factory=dict)  # id -> outside object written
    cell_writes: dict[int, CellWrite] = field(default_factory=dict)  # id(cell) -> write
    # (id(globals dict), name) -> the last write
    global_writes: dict[tuple[int, str], GlobalWrite] = field(default_factory=dict)
    new_cells: set[int] = field(default_factory=set)
    new_functions: dict[int, Any] = field(default_factory=dict)  # id(fn) -> fn
    new_objects: dict[int, Any] = field(default_factory=dict)  # made by this capture
    new_classes: dict[int, type] = field(default_factory=dict)  # `class` statements run
    generators: list[Any] = field(default_factory=list)  # inlined generators made here
    # id -> (object, class, args, kwargs): a standard-library object constructed for real
    constructed: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # id(outside list/dict subclass instance) -> (it, the plain copy its C methods read)
    subclass_views: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    # id -> object returned by a call run for real during this capture (kept alive)
    made: dict[int, Any] = field(default_factory=dict)
    # id(fake) -> the type of the real tensor it stands for (nn.Parameter, subclasses)
    real_types: dict[int, type] = field(default_factory=dict)
    # id(real tensor) -> it, for tensors lifted to inputs by the recorder (see _lift)
    lifted: dict[int, torch.Tensor] = field(default_factory=dict)
    # inputs lifted through a second source of a tensor that is an input already
    aliased_inputs: set[Source] = field(default_factory=set)
    # id(outside np.ndarray or its traced array) -> (it, traced array, source)
    arrays: dict[int, tuple[Any, Any, Source]] = field(default_factory=dict)
    recording: bool = False
    # dynamic shapes: which dimensions become symbolic (ember.frontend.dynamic); the
    # tensor inputs with symbolic dimensions, whose guards are built after the graph
    policy: DynamicPolicy = field(default_factory=lambda: DynamicPolicy(False))
    symbolic_inputs: list[tuple[SymbolicInput, dict[int, DynamicDim]]] = field(
        default_factory=list)
    free_layouts: FreeInputs = field(default_factory=FreeInputs)  # (free_layouts.py)
    # a marked tensor, or an op with a data-dependent output size, was met by a capture
    # without symbolic shapes: capture again with them
    missed_marks: bool = False
    data_dependent: bool = False
    asked_compiling: bool = False  # the code asked torch.compiler.is_compiling() (True)
    # root-frame instructions whose .item() / .tolist() gave unbacked symbols (u0), with
    # the method's name: a later break captures again breaking at the first of them
    # (recorded_calls.py, segment.py)
    unbacked_items: list[tuple[int, SourceLocation | None, str]] = field(
        default_factory=list)
    # for the capture cache: every function inlined (by code), and globals of inlined
    # functions read without a source (module name, global name, value)
    inlined: dict[types.CodeType, types.FunctionType] = field(default_factory=dict)
    untracked_globals: list[tuple[str, str, Any]] = field(default_factory=list)
    # sources scanned, and the sourced modules' tables by id (iteration.py)
    module_tables: tuple[int, dict[int, Any]] = field(default_factory=lambda: (0, {}))
    _names: set[str] = field(default_factory=lambda: {"output"})  # (the IR's output node)

    def __post_init__(self) -> None:
        self.recorder.lift = self._lift

    # ---- entering the recorder ----------------------------------------------------------

    def __enter__(self) -> Self:
        self.recorder.__enter__()
        self.recording = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.recording = False
        self.recorder.__exit__(*exc)

    def _add_input(self, value: torch.Tensor, spec: InputSpec,
                   dims: dict[int, DynamicDim] | None = None, free: bool = False) -> torch.Tensor:
        add = add_free_input if free else add_input
        if not self.recording:
            return add(self.recorder, value, spec, dims)
        self.recorder.__exit__(None, None, None)
        try:
            return add(self.recorder, value, spec, dims)
        finally:
            self.recorder.__enter__()

    # ---- wrapping outside values --------------------------------------------------------

    def guard(self, kind: str, source: Source | None, expected: Any) -> None:
        self.guards.add(Guard(kind, source, expected))

    def wrap(self, value: Any, source: Source | None) -> Any:
        """The interpreter's view of outside ``value`` read from ``source`` (None: an
        untracked read, nothing is guarded)."""
        if isinstance(value, torch.Tensor):
            return self._wrap_tensor(value, source)
        if source is not None and opaque_data(value):  # an ndarray: bytecode/numpy_values.py
            # NOTE: numpy_rules registers the attribute rule of the arrays made here
            from ember.frontend.bytecode import numpy_rules, numpy_values  # noqa: F401

            if numpy_values.traceable_input_array(value):
                return numpy_values.wrap_input_array(self, value, source)
        if isinstance(value, PRIMITIVES) or _guarded_by_value(value):
            if type(value) is int and source is not None and self.policy.symbolic_int(source):
                return symbolic_int(self, value, source)
            if source is not None:
                self.guard("equals", source, value)
            return value
        if source is None:
            return value
        if id(value) in self.shadow_of_real:
            shadow = self.shadow_of_real[id(value)]
            second_source(self, value, source, self.source_of(shadow))
            return shadow
        if isinstance(value, tuple):
            return self._wrap_tuple(value, source)
        if type(value) in SHADOWED:
            return self._wrap_container(value, source)
        if isinstance(value, types.MethodType):
            # a fresh bound method each read: its function is guarded (by code, as a
            # function is), so that an instance attribute or a class change that
            # replaces it (`obj.go = f`) recompiles; its object was guarded where read.
            # NOTE: a module's method (its layers share the class's functions) is
            # guarded by the function's identity through MethodFuncSource, which the
            # guard fast path's stamp covers (a model's layers pay no guard per method
            # call); other objects' not for torch's, Ember's (which may stand in while
            # capturing: a Triton launch) or the standard library's methods
            func = value.__func__
            if isinstance(value.__self__, nn.Module):
                if isinstance(func, types.FunctionType) and isinstance(source, AttrSource):
                    self.guard("id", MethodFuncSource(source.base, source.name), func)
            else:
                guard_method(self, value, source)  # (and its object: method_guards.py)
            return value
        if isinstance(value, types.BuiltinFunctionType) and isinstance(
                value.__self__, (types.ModuleType, type(None))):
            self.guard("id", source, value)  # torch.sin passed where torch.cos was
        if isinstance(value, (types.ModuleType, types.BuiltinFunctionType)):
            self.sources.setdefault(id(value), (value, source))
            return value
        if second_source(self, value, source, self.source_of(value)):
            return value  # reached before through another source (object_aliasing.py)
        if isinstance(value, types.FunctionType):
            # NOTE: a function made by the code being compiled is new at every call;
            # its code identifies it, the closure cells it reads are guarded on read.
            self.guard("id", AttrSource(source, "__code__"), value.__code__)
        elif isinstance(value, nn.Module):
            # NOTE: by type, not identity (the layers of a model share compiled code):
            # each attribute, parameter and submodule read is guarded on its own, and
            # code run for real on the module pins it (see ``pin``).
            self.guard("type", source, type(value))
        elif isinstance(value, (type, enum.Enum, types.MethodDescriptorType,
                                types.WrapperDescriptorType)) or (
                callable(value) and (type(value).__module__ or "").startswith("torch.")):
            self.guard("id", source, value)  # singletons, and torch's op objects
        else:
            # NOTE: other objects may be fresh on every call (a dataclass made before a
            # graph break); their type is guarded here and each attribute read on its own.
            self.guard("type", source, type(value))
        self.sources.setdefault(id(value), (value, source))
        return value

    def _wrap_tensor(self, value: torch.Tensor, source: Source | None) -> torch.Tensor:
        if self.lifted.get(id(value)) is value:
            return value  # its input is the recorder's; ops on it use that placeholder
        known = self.fake_of.get(id(value))
        if known is not None:
            first = self.source_of_fake.get(id(known))
            if source is not None and first is not None and first != source:
                self.guard("same", source, first)
            return known
        if self.recorder.value_of(value) is not None:
            return value  # already a tracked fake
        _refuse_overriding_subclass(value)
        if source is None:
            return value  # recorded as a constant by the recorder
        kind, target = _input_kind(value, source)
        name = self._input_name(source)
        user = not _module_state(value, source)
        free = self.free_layouts.admit(self.policy, source, value, user, self.inputs)
        dims = dims_of(source, value, user, self.policy, free=free)
        dims = asked_when_aliased(dims, value, (real for _, real in self.inputs))
        if dims and self.recorder.shape_env is None:
            self.missed_marks = True  # only marks ask for symbols in a static capture
            dims = {}
        fake = self._add_input(value, InputSpec(name, kind, target), dims, free)
        self.free_layouts.inputs += [(value, fake)] if free else []
        if dims or free:  # guarded after the graph (shape_guards), when its sizes are known
            origin = self.guards.locate() if self.guards.locate is not None else None
            self.symbolic_inputs.append(
                (SymbolicInput(name, source, value, origin, fake, free), dims))
        else:
            self.guards.add(tensor_guard(source, value))
        self.inputs.append((source, value))
        self.fake_of[id(value)] = fake
        self.fake_of[id(fake)] = fake
        self.source_of_fake[id(fake)] = source
        self.real_types[id(fake)] = type(value)
        return fake

    def _lift(self, value: torch.Tensor) -> InputSpec | None:
        """Called by the recorder for a real tensor that reached an op: code run for
        real (torch functions, properties) read it from an outside object. When the
        tensor is an attribute (or a parameter or buffer) of an object with a source, it
        becomes a graph input fetched through that source at every call, not a constant
        of the first call."""
        _refuse_overriding_subclass(value)
        source = self._member_source(value)
        if source is None:
            if value.requires_grad and torch.is_grad_enabled():
                from ember.frontend.bytecode.breaks import GraphBreak

                # a constant is detached: its gradient would be silently lost
                raise GraphBreak(
                    f"a tensor that requires grad ({type(value).__name__} of shape "
                    f"{tuple(value.shape)}) reached from no tracked source would be a "
                    "constant of the graph", "read it as an attribute of the module or "
                    "pass it as an argument")
            return None
        known = self.fake_of.get(id(value))
        first = self.source_of_fake.get(id(known)) if known is not None else None
        if first is not None and first != source:
            # already an input through another source (a parameter the code read as
            # self.weight, lifted again from m.parameters()): the same tensor each call
            self.guard("same", source, first)
            self.aliased_inputs.add(source)
        else:
            self.guards.add(tensor_guard(source, value))
        kind, target = _input_kind(value, source)
        self.inputs.append((source, value))
        self.lifted[id(value)] = value
        self.source_of_fake[id(value)] = source
        return InputSpec(self._input_name(source), kind, target)

    def _member_source(self, value: torch.Tensor) -> Source | None:
        """Where code run for real read ``value`` from: an attribute (or a parameter or
        buffer) of an object with a source, or the ``.grad`` of one (a parameter's
        gradient read by ``clip_grad_norm_``: a constant would be the first call's
        gradient, and an in-place write into it would be lost)."""
        source = self._find_member(lambda t: t is value)
        if source is not None:
            return source
        owner = self._find_member(lambda t: isinstance(t, torch.Tensor) and t.is_leaf
                                  and not is_fake(t) and t.grad is value)
        if owner is None:
            for input_source, real in self.inputs:
                if real.is_leaf and not is_fake(real) and real.grad is value:
                    owner = input_source
                    break
        return AttrSource(owner, "grad") if owner is not None else None

    def _find_member(self, match: Any) -> Source | None:
        from ember.frontend.bytecode.sources import ItemSource, ModuleMemberSource

        for obj, source in list(self.sources.values()):
            if isinstance(obj, nn.Module):
                # its own parameters and buffers, then those of its submodules
                for path, sub in obj.named_modules():
                    for table in ("_parameters", "_buffers"):
                        for name, t in getattr(sub, table).items():
                            if match(t):
                                base = source
                                for part in path.split(".") if path else ():
                                    base = ModuleMemberSource(base, "_modules", part)
                                return ModuleMemberSource(base, table, name)
            members = getattr(obj, "__dict__", None)
            if not isinstance(members, dict) or isinstance(obj, (type, types.ModuleType)):
                continue
            for name, v in members.items():
                if match(v):
                    return AttrSource(source, name)
                if isinstance(v, (list, tuple)):
                    for i, item in enumerate(v):
                        if match(item):
                            return ItemSource(AttrSource(source, name), i)
        return None

    def guard_identities(self, a: Any, b: Any, only_identity_eq: bool = False) -> None:
        """``a`` and ``b`` are compared by identity (``is``, or ``==``, ``in`` and dict
        keys when their type compares by identity): when both are objects (not None
        or another plain value, whose type guard decides the result already), guard
        that each is the same object, not only of the same type."""
        if not (self._identity_matters(a, only_identity_eq)
                and self._identity_matters(b, only_identity_eq)):
            return
        for value in (a, b):
            source = self.source_of(value)
            if source is not None and id(value) not in self.shadows:
                self.guard("id", source, value)

    def pin(self, values: Any) -> None:
        """Values handed to code run for real (a builtin such as ``id``/``repr``, a
        library function): a module among them is guarded by identity, since what
        that code computed from it is a constant of the graph."""
        for value in values:
            if isinstance(value, types.MethodType):  # self.layer.forward handed over
                value = value.__self__
            if isinstance(value, nn.Module):
                source = self.source_of(value)
                if source is not None:
                    self.guard("id", source, value)

    @staticmethod
    def _identity_matters(value: Any, only_identity_eq: bool) -> bool:
        if isinstance(value, (*PRIMITIVES, torch.Tensor, type)):
            return False
        return not only_identity_eq or getattr(type(value), "__eq__", None) is (
            object.__eq__) or isinstance(value, enum.Enum)

    def visible_type(self, value: Any) -> type:
        """``type(value)`` as user code must see it: never ``FakeTensor``."""
        if isinstance(value, torch.Tensor) and is_fake(value):
            return self.real_types.get(id(value), torch.Tensor)
        if is_traced_array(value):
            shown: type = value.__class__  # np.ndarray, as in eager (numpy_values.py)
            return shown
        return type(value)

    def note_made(self, value: Any) -> None:
        """Remember an object a call run for real returned (see :mod:`.state`)."""
        if not isinstance(value, (*PRIMITIVES, torch.Tensor)) and id(value) not in self.sources:
            self.made[id(value)] = value

    def record_attr_write(self, obj: Any, name: str, value: Any, raw: bool) -> None:
        """An attribute write (or delete: ``value`` is ``side_effects.DELETED``) on an
        outside object, replayed after the graph; ``raw`` replays it with
        ``object.__setattr__``. A later write to the name moves it to the end (program
        order of the last writes)."""
        key = (id(obj), name)
        self.attr_writes.pop(key, None)
        self.attr_writes[key] = AttrWrite(obj, name, value, raw)
        if isinstance(obj, torch.Tensor):
            return  # a graph input's .grad (attributes._store_grad): no __dict__ involved
        self.dirty[id(obj)] = obj
        members = getattr(obj, "__dict__", None)
        shadow = self.shadow_of_real.get(id(members)) if type(members) is dict else None
        if shadow is not None and (raw or not isinstance(obj, nn.Module)):
            from ember.frontend.bytecode.attributes import _apply_to_dict

            _apply_to_dict(shadow, name, value)  # its __dict__ was read: keep it current

    def is_dirty(self, obj: Any) -> bool:
        """Whether this capture wrote or deleted an attribute of outside ``obj``."""
        return id(obj) in self.dirty and self.dirty[id(obj)] is obj

    def refuse_dirty(self, values: Any, what: str) -> None:
        """Code run for real (``what``) would read the real objects among ``values``,
        without the attribute writes this capture made to them (replayed only after
        the graph): a graph break, so that it runs after them."""
        for value in values:
            if self.is_dirty(value):
                from ember.frontend.bytecode.breaks import GraphBreak

                raise GraphBreak(f"{what} runs for real on a {type(value).__name__} "
                                 "written earlier in this capture (it would not see the "
                                 "write)", "this break is needed for correctness")

    def forget_attr_write(self, obj: Any, name: str) -> None:
        """An attribute set and deleted again within this capture: nothing to replay."""
        self.attr_writes.pop((id(obj), name), None)

    def capture_writes(self, obj: Any, before: dict[str, Any]) -> None:
        """Code run for real (a property, a torch method) wrote into the ``__dict__`` of
        outside ``obj`` (e.g. a cached ``lazy_property``): undo the writes on the real
        object and record them as attribute writes, replayed with real values after the
        graph runs (a fake tensor never stays in a user object)."""
        now = obj.__dict__
        for name in [k for k in now if k not in before or now[k] is not before[k]]:
            earlier = self.attr_writes.get((id(obj), name))
            raw = earlier is not None and earlier.raw
            self.attr_writes[(id(obj), name)] = AttrWrite(obj, name, now[name], raw)
            if name in before:
                now[name] = before[name]
            else:
                del now[name]

    def _wrap_tuple(self, value: tuple[Any, ...], source: Source) -> Any:
        from ember.frontend.bytecode.sources import ItemSource

        self.guard("type", source, type(value))
        self.guard("len", source, len(value))
        items = [self.wrap(v, ItemSource(source, i)) for i, v in enumerate(value)]
        if all(a is b for a, b in zip(items, value)):
            return value
        if hasattr(value, "_fields"):
            return type(value)(*items)
        return type(value)(items)

    def _wrap_container(self, value: Any, source: Source) -> Any:
        from ember.frontend.bytecode.sources import ItemSource, TensorKeySource

        self.guard("type", source, type(value))
        if isinstance(value, list):
            self.guard("len", source, len(value))
            copy: Any = []
            self.shadow_of_real[id(value)] = copy
            copy.extend(self.wrap(v, ItemSource(source, i)) for i, v in enumerate(value))
            initial = list(copy)
        else:
            self.guard("keys", source, tuple(value.keys()))
            if isinstance(value, collections.defaultdict):
                # (optimizer.state: parameters -> their state, made on first use)
                self.guard("id", AttrSource(source, "default_factory"), value.default_factory)
                copy = collections.defaultdict(value.default_factory)
            else:
                copy = type(value)()
            self.shadow_of_real[id(value)] = copy
            for k, v in value.items():
                item = (TensorKeySource(source, k) if isinstance(k, torch.Tensor)
                        else ItemSource(source, k))
                copy[k] = self.wrap(v, item)
            initial = list(copy.items())
        self.shadows[id(copy)] = Shadow(value, copy, source, initial)
        self.sources[id(copy)] = (copy, source)
        return copy

    def _input_name(self, source: Source) -> str:
        base = re.sub(r"[^0-9a-zA-Z_]+", "_", source.expr()).strip("_") or "input"
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    # ---- reads and writes -------------------------------------------------------------

    def finish_guards(self) -> None:
        """Guards relating several inputs: distinct ones stay so (and :func:`guard_apart`)."""
        distinct = tuple(s for s, _ in self.inputs if s not in self.aliased_inputs)
        if len(distinct) > 1:
            self.guard("distinct", None, distinct)
        guard_apart(self)

    def any_input_requires_grad(self) -> bool:
        """Whether a graph input requires grad (then grad-mode changes matter)."""
        return any(t.requires_grad for _, t in self.inputs)

    def source_of(self, obj: Any) -> Source | None:
        entry = self.sources.get(id(obj))
        return entry[1] if entry is not None and entry[0] is obj else None

    def is_input_fake(self, value: Any) -> Source | None:
        return self.source_of_fake.get(id(value))

    def real_input(self, fake: Any) -> torch.Tensor | None:
        """The real tensor of graph input ``fake`` (None when it is not an input)."""
        source = self.is_input_fake(fake)
        if source is not None:
            for input_source, real in self.inputs:
                if input_source == source:
                    return real
        return None


def _guarded_by_value(value: Any) -> bool:
    """Values whose content C code reads (a number type such as ``np.int64`` or
    ``Fraction``, a range, a slice or set of plain values): guarded by equality, not
    only by type, so that a new value is never taken for the first call's."""
    if isinstance(value, torch.Tensor):
        return False
    if isinstance(value, (numbers.Number, range)):
        return True
    if isinstance(value, slice):
        return all(isinstance(v, PRIMITIVES) for v in (value.start, value.stop, value.step))
    if isinstance(value, (set, frozenset)):
        return all(isinstance(v, PRIMITIVES) for v in value)
    np = sys.modules.get("numpy")
    return np is not None and isinstance(value, np.generic)


def _refuse_overriding_subclass(value: torch.Tensor) -> None:
    """A break where the graph would read a tensor whose subclass overrides
    ``__torch_function__``/``__torch_dispatch__`` (the fake tensors would skip it)."""
    overrides = overriding_subclass(value)
    if overrides is not None:
        from ember.frontend.bytecode.breaks import GraphBreak

        raise GraphBreak(f"a tensor whose class overrides {overrides.partition(' of ')[0]} "
                         f"({overrides.partition(' of ')[2]}): the graph would skip it",
                         "the code from here runs eagerly, with the overrides")


def opaque_data(value: Any) -> bool:
    """A value whose content only C code reads (numpy arrays, bytearrays, buffers):
    the interpreter cannot guard it, so code that uses it runs for real."""
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray) and not is_traced_array(value):
        return True
    return isinstance(value, (bytearray, memoryview, array.array))


def is_traced_array(value: Any) -> bool:
    """A NumPy array computed by the graph (:mod:`.numpy_values`)."""
    arrays = sys.modules.get("ember.frontend.bytecode.numpy_values")
    return arrays is not None and type(value) is arrays.TracedArray


def _module_state(value: torch.Tensor, source: Source) -> bool:
    """A parameter, or a buffer registered on a module: static under ``dynamic=True``
    (as in torch.compile); other tensors (arguments, attributes of plain objects such
    as a KV cache, locals at a resume point) are inputs whose dimensions may be
    symbolic."""
    return isinstance(value, nn.Parameter) or (
        isinstance(source, ModuleMemberSource) and source.table == "_buffers")


def _input_kind(value: torch.Tensor, source: Source) -> tuple[InputKind, str | None]:
    # NOTE: a registered buffer is read from its module's ``_buffers`` (a
    # ModuleMemberSource); a tensor attribute of another object through getattr
    if isinstance(value, nn.Parameter):
        return InputKind.PARAMETER, _dotted(source)
    if _module_state(value, source) or isinstance(source, AttrSource):
        return InputKind.BUFFER, _dotted(source)
    return InputKind.USER_INPUT, None


def _dotted(source: Source) -> str:
    parts: list[str] = []
    s: Source | None = source
    while isinstance(s, (AttrSource, ModuleMemberSource, ItemSource)):
        if isinstance(s, ItemSource):
            if type(s.key) not in (int, str):
                break
            parts.append(str(s.key))  # a Sequential's or ModuleList's member: "0.weight"
        else:
            parts.append(s.name)
        s = s.base
    if isinstance(s, LocalSource) and s.name != "self":
        parts.append(s.name)
    return ".".join(reversed(parts)) or source.expr()
