"""What a call does while capturing: inline it, record it, evaluate it, or break.

The rules, in order (:meth:`CallHandler.call_symbolic`):

1. ``ember.frontend.disable``'d functions break; ``nonstrict`` ones run their Python on
   fake tensors (recorded, not guarded).
2. ``nn.Module`` calls inline ``forward`` (modules with hooks break).
3. Python functions and bound methods of user code are inlined (their own frame);
   functions defined inside torch (``torch.nn.functional.*``) run on fake tensors and are
   recorded at the ATen level.
4. torch builtins and tensor methods run on fake tensors (recorded); those that need
   real data (``.item()``, ``.tolist()``, ``bool(t)``, data-dependent shapes) break
   (:mod:`.recorded_calls`).
5. Builtins follow :data:`BUILTIN_RULES`; methods of lists/dicts/sets/strings and the
   ``math``/``operator`` modules run directly on their (non-tensor) values.
6. Classes are constructed as fresh objects (:mod:`.fresh`); anything else (``print``,
   other C functions) breaks.

In concrete mode every call runs for real; a call of user Python code goes through
``compile_callee`` (its own compiled wrapper), so a break in a callee stays local.
"""

from __future__ import annotations

import builtins
import collections
import functools
import inspect
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch
from ember.frontend._torch import (compiled_original_name, disable_dynamo_wrapped,
                                   dynamo_disabled_original, torch_compiled_original)
from ember.frontend.autocast import AutocastRestore
from ember.frontend.bytecode import (
    attention_rules,  # noqa: F401  (registers the SDPA mask rule)
    copy_rules,  # noqa: F401  (registers copy.copy / copy.deepcopy)
    library_rules,  # noqa: F401  (registers itertools rules)
    optimizer_rules,  # noqa: F401  (registers torch.optim's rules)
    scan_rules,  # noqa: F401  (registers associative_scan's rule)
)
from ember.frontend.bytecode.autocast_blocks import autocast_call_break
from ember.frontend.bytecode.binding import BindError, bind_arguments
from ember.frontend.bytecode.breaks import BreakInfo, GraphBreak
from ember.frontend.bytecode.builtin_rules import BUILTIN_RULES, bound_rule_for
from ember.frontend.bytecode.capture import SHADOWED, opaque_data
from ember.frontend.bytecode.code_origin import constant_or_cached, is_stdlib, is_torch_code
from ember.frontend.bytecode.escape import is_disabled, is_nonstrict
from ember.frontend.bytecode.exception_ops import (
    GeneratorExit_,
    ProfilerRangeExit,
    contextmanager_target,
)
from ember.frontend.bytecode.frame import UNBOUND, Frame
from ember.frontend.bytecode.fresh import construct, made_here, note_constructed
from ember.frontend.bytecode.function_rules import apply_function
from ember.frontend.bytecode.generators import InlinedGenerator
from ember.frontend.bytecode.interpreter import MAX_INLINE_DEPTH, GradModeRestore, is_fake_tensor
from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.object_aliasing import guard_contents as _guard_contents
from ember.frontend.bytecode.object_aliasing import real_key_args, refuse_changed_hooks
from ember.frontend.bytecode.optimizer_rules import (
    function_get_rule,
    inlined_torch_code,
    recorded_torch_code,
    tensor_step_math,
    weakref_target,
)
from ember.frontend.bytecode.recorded_calls import callable_name as _name
from ember.frontend.bytecode.recorded_calls import record_call
from ember.frontend.bytecode.root_hooks import MODULE_CALLS, custom_module_call
from ember.frontend.bytecode.sources import AttrSource, DefaultSource, method_source
from ember.frontend.bytecode.subclass_items import check_read_only, item_view, outside_subclass
from ember.frontend.bytecode.triton_launch import capture_or_break, launched_kernel
from ember.frontend.custom_functions import applied_function, gradients_flow
from ember.frontend.guard_model import MODULE_HOOK_TABLES
from ember.frontend.torch_substitutes import substitute_for
from ember.runtime.logs import log
from torch import nn

_GENERATOR_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                    | inspect.CO_ITERABLE_COROUTINE)

_GLOBAL_STATE = {"manual_seed", "seed", "save", "load", "set_grad_enabled", "synchronize",
                 "get_rng_state", "set_rng_state", "initial_seed", "get_state", "set_state",
                 "get_rng_state_all", "set_rng_state_all", "manual_seed_all", "seed_all",
                 "set_default_dtype", "set_printoptions", "use_deterministic_algorithms",
                 # autocast's state, outside a `with` (bytecode/autocast_blocks.py)
                 "set_autocast_enabled", "set_autocast_dtype", "set_autocast_cache_enabled",
                 "autocast_increment_nesting", "autocast_decrement_nesting",
                 "clear_autocast_cache", "set_autocast_cpu_enabled", "set_autocast_cpu_dtype",
                 "set_autocast_gpu_dtype", "set_autocast_xla_enabled",
                 "set_autocast_xla_dtype", "set_autocast_ipu_enabled",
                 "set_autocast_ipu_dtype", "_enter_autocast", "_exit_autocast"}
# modules whose functions give a different result (or act outside) at every call
_NEW_VALUE_EACH_CALL = {"random", "time", "datetime", "uuid", "secrets", "os", "socket",
                        "subprocess", "logging"}
_SET_MUTATORS = {"add", "discard", "remove", "pop", "clear", "update",
                 "difference_update", "intersection_update", "symmetric_difference_update",
                 "__ior__", "__iand__", "__isub__", "__ixor__"}
_TYPE_QUERIES = (type, isinstance, issubclass, id, callable)
# what reads only the type of a module (which its guard fixes), not the object
_SHAPE_QUERIES = (type, isinstance, issubclass, callable)
_PURE_MODULES = ("math", "operator", "_operator", "itertools", "functools")
_CONTAINER_TYPES: tuple[type, ...] = (list, dict, set, frozenset, tuple, str, bytes, ListIterator, slice,
                    range, type({}.keys()), type({}.values()), type({}.items()))


class CallHandler:
    """Decides calls for an :class:`~.interpreter.Interpreter`.

    Args:
        break_calls: root-frame instructions (index) that must break, with the break
            that happened inside the call they inlined (checked by the interpreter).
        compile_callee: in concrete mode, ``compile_callee(fn, owner)`` wraps a user
            function (bound to ``owner`` when not None) so that it runs compiled.
    """

    def __init__(
        self,
        break_calls: dict[int, BreakInfo] | None = None,
        compile_callee: Callable[[Any, Any], Callable[..., Any]] | None = None,
    ) -> None:
        self.break_calls = break_calls if break_calls is not None else {}  # (may be empty)
        self.compile_callee = compile_callee

    # ---- entry -------------------------------------------------------------------------

    def call(self, interp: Any, frame: Frame, fn: Any, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if fn is builtins.super and not args:
            return self._zero_arg_super(frame)
        if not args and not kwargs and any(fn is q for q in _FRAME_QUERIES):
            return _frame_query(interp, frame, fn)
        if not interp.symbolic:
            return self.call_concrete(fn, args, kwargs)
        return self.call_symbolic(interp, frame, fn, args, kwargs)

    def call_concrete(self, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        if (self.compile_callee is not None and not is_disabled(fn)
                and launched_kernel(fn) is None):  # a Triton launch runs as is
            if isinstance(fn, nn.Module) and not _has_hooks(fn):
                forward = fn.forward
                if isinstance(forward, types.MethodType) and _is_user_function(
                        forward.__func__):
                    return self.compile_callee(forward.__func__, fn)(*args, **kwargs)
            elif isinstance(fn, types.MethodType) and _is_user_function(fn.__func__):
                return self.compile_callee(fn.__func__, fn.__self__)(*args, **kwargs)
            elif isinstance(fn, types.FunctionType) and _is_user_function(fn):
                return self.compile_callee(fn, None)(*args, **kwargs)
        return fn(*args, **kwargs)

    # ---- symbolic -------------------------------------------------------------------------

    def call_symbolic(self, interp: Any, frame: Frame, fn: Any, args: list[Any],
                      kwargs: dict[str, Any]) -> Any:
        kernel = launched_kernel(fn)
        if kernel is not None:  # a user Triton kernel: one graph op, or a break
            return capture_or_break(self, interp, frame, fn, kernel, args, kwargs)
        if isinstance(fn, (GradModeRestore, ProfilerRangeExit)):
            return fn(*args)
        if isinstance(fn, AutocastRestore):  # the end of a `with torch.autocast(...)`
            return interp.autocast.exit(fn)
        direct_autocast = autocast_call_break(fn)
        if direct_autocast is not None:
            raise interp.fail(direct_autocast, "use a `with torch.autocast(...)` block "
                              "(captured); this call runs eagerly")
        if isinstance(fn, weakref.ReferenceType) and not args and not kwargs:
            return weakref_target(interp, fn)
        if isinstance(fn, GeneratorExit_):  # the end of a `with` over a @contextmanager
            return interp.call_generator_exit(fn, args)
        target = contextmanager_target(fn)
        # NOTE: torch's too (cudnn.flags: run for real, its object was a constant)
        if target is not None and not is_disabled(fn) and not is_nonstrict(fn):
            return interp.generator_context(target[0], target[1], args, kwargs)
        if isinstance(fn, type) and issubclass(fn, BaseException):
            return interp.construct_exception(frame, fn, args, kwargs)
        if "numpy" in sys.modules:  # NumPy code is traced: bytecode/numpy_rules.py
            from ember.frontend.bytecode import numpy_rules

            result = numpy_rules.numpy_call(fn, args, kwargs)
            if result is not numpy_rules.NOT_NUMPY:
                return result
        opaque = _opaque_argument([*args, *kwargs.values()])
        if opaque is not None and not any(fn is q for q in _TYPE_QUERIES):
            raise interp.fail(f"call to {_name(fn)} with a {type(opaque).__name__} (its "
                              "content is not captured)", "convert it with torch.as_tensor "
                              "outside the compiled function")
        rule = _rule_for(fn)
        if rule is not None:
            return rule(self, interp, frame, args, kwargs)
        if _module_of(fn) in _NEW_VALUE_EACH_CALL:
            raise interp.fail(f"call to {_name(fn)} (it returns a new value at every "
                              "call; a captured result would be a constant)")
        original = torch_compiled_original(fn)
        if original is not None:
            # NOTE: a torch.compile'd function is captured as itself, as Dynamo inlines a
            # nested torch.compile; run for real on fake tensors, Dynamo's wrapper would
            # compile it under the recorder and leave its frame hook set on an error
            log("graphs", f"torch.compile wrapper of {_name(original)} captured as the "
                          "function itself")
            source = interp.capture.source_of(fn)
            if source is not None:
                original = interp.wrap(original,
                                       AttrSource(source, compiled_original_name(fn)))
            return self.call_symbolic(interp, frame, original, args, kwargs)
        if is_disabled(fn):
            marked = ("ember.frontend.disable" if dynamo_disabled_original(fn) is None
                      else "torch.compiler.disable")
            raise interp.fail(f"call to {_name(fn)}, marked {marked}",
                              "this break is deliberate")
        if is_nonstrict(fn):
            return self.record(interp, fn, args, kwargs)
        if isinstance(fn, nn.Module):
            custom = custom_module_call(fn)  # (root_hooks.py)
            if custom is not None:  # a subclass's own __call__ (it calls super().__call__)
                return self.inline(interp, frame, custom, [fn, *args], kwargs, None)
            return self.call_module(interp, frame, fn, args, kwargs)
        if isinstance(fn, types.MethodType):
            func, owner = fn.__func__, fn.__self__
            if isinstance(owner, nn.Module) and any(func is c for c in MODULE_CALLS):
                return self.call_module(interp, frame, owner, args, kwargs)  # super().__call__
            wrapped = disable_dynamo_wrapped(func)
            if wrapped is not None and inlined_torch_code(wrapped):
                # torch's internal torch._disable_dynamo (Optimizer.zero_grad): inlined
                # as the rest of torch.optim (recorded, it ran for real on fake tensors)
                func = wrapped
            function = applied_function(fn)
            if function is not None and gradients_flow(args, kwargs):
                return apply_function(self, interp, function, args, kwargs)  # function_ops
            if isinstance(func, types.FunctionType):
                if recorded_torch_code(func) and not isinstance(owner, nn.Module):
                    return self.record(interp, fn, args, kwargs)
                return self.inline(interp, frame, func, [owner, *args], kwargs,
                                   method_source(interp.capture, owner, func))
            return self.call_builtin(interp, frame, fn, args, kwargs)
        constant, cached = constant_or_cached(fn)  # HF's is_torch_distributed_available
        if constant or cached is not None:
            return (self.inline(interp, frame, cached, args, kwargs, None) if cached
                    else self.direct(interp, fn, args, kwargs))
        if type(fn) is functools.partial:
            # call through: the bound arguments are read like any other outside value
            func, bound, keywords = fn.func, fn.args, fn.keywords
            source = interp.capture.source_of(fn)
            if source is not None:
                func = interp.wrap(func, AttrSource(source, "func"))
                bound = interp.wrap(bound, AttrSource(source, "args"))
                keywords = interp.wrap(keywords, AttrSource(source, "keywords"))
            return self.call_symbolic(interp, frame, func, [*bound, *args],
                                      {**keywords, **kwargs})
        if is_stdlib(fn) and not _stdlib_closure(fn):
            # NOTE: standard-library helpers (inspect.signature, functools.partial,
            # dataclasses.fields, ...) run for real: tensor ops they make are recorded,
            # their other results are capture-time constants (not interpreted; the
            # attributes of the objects handed to them are guarded: guard_contents).
            interp.capture.refuse_dirty([*args, *kwargs.values()], _name(fn))
            _guard_contents(interp, [*args, *kwargs.values()])  # what it reads of them
            result = self.direct(interp, fn, args, kwargs)
            note_constructed(interp, fn, result, args, kwargs)
            return interp.imported(result)  # importlib.import_module: read at every call
        if isinstance(fn, types.FunctionType):
            # NOTE: not a generator (torch's own genexprs): run for real it would return
            # a lazy generator whose body runs after the recording, unrecorded
            if recorded_torch_code(fn) and not fn.__code__.co_flags & inspect.CO_GENERATOR:
                if fn.__name__ in _GLOBAL_STATE:
                    raise interp.fail(f"call to {_name(fn)} (changes global state)")
                return self.record(interp, fn, args, kwargs)
            return self.inline(interp, frame, fn, args, kwargs, interp.capture.source_of(fn))
        if isinstance(fn, type):
            return self.construct(interp, frame, fn, args, kwargs)
        call_method = vars(type(fn)).get("__call__")
        if isinstance(call_method, types.FunctionType):
            # an instance of a class with a Python __call__
            if is_torch_code(type(fn)):
                return self.record(interp, fn, args, kwargs)
            return self.inline(interp, frame, call_method, [fn, *args], kwargs, None)
        return self.call_builtin(interp, frame, fn, args, kwargs)

    def call_module(self, interp: Any, frame: Frame, mod: nn.Module, args: list[Any],
                    kwargs: dict[str, Any]) -> Any:
        """``mod(*args, **kwargs)``: forward pre-hooks, ``forward``, forward hooks, each
        inlined (what ``nn.Module.__call__`` does without backward hooks)."""
        if _has_unsupported_hooks(mod):
            raise interp.fail(f"call to module {type(mod).__name__} with backward or "
                              "global hooks", "remove the hooks, or compile the module "
                              "itself")
        refuse_changed_hooks(interp, mod)
        source = interp.capture.source_of(mod)
        if source is not None:
            # hooks added after compiling (or on another module of the same type,
            # modules being guarded by type) must not be ignored
            # NOTE: one guard for the usual case (no hooks at all): five length guards per
            # module were most of a decoder stack's guard-checking time
            if not any(getattr(mod, attr) for attr in MODULE_HOOK_TABLES):
                interp.capture.guard("no_hooks", source, None)
            for attr in MODULE_HOOK_TABLES:
                if getattr(mod, attr):
                    interp.capture.guard("len", AttrSource(source, attr),
                                         len(getattr(mod, attr)))
        for i, (hook_id, hook) in enumerate(list(mod._forward_pre_hooks.items())):
            hook = interp.module_hook(source, "_forward_pre_hooks", i, hook)
            if hook_id in mod._forward_pre_hooks_with_kwargs:
                result = self.call_symbolic(interp, frame, hook, [mod, tuple(args), kwargs], {})
                if result is not None:
                    args, kwargs = list(result[0]), dict(result[1])
            else:
                result = self.call_symbolic(interp, frame, hook, [mod, tuple(args)], {})
                if result is not None:
                    args = list(result) if isinstance(result, tuple) else [result]
        out = self._call_forward(interp, frame, mod, args, kwargs)
        for i, (hook_id, hook) in enumerate(list(mod._forward_hooks.items())):
            hook = interp.module_hook(source, "_forward_hooks", i, hook)
            if hook_id in mod._forward_hooks_with_kwargs:
                result = self.call_symbolic(interp, frame, hook,
                                            [mod, tuple(args), kwargs, out], {})
            else:
                result = self.call_symbolic(interp, frame, hook, [mod, tuple(args), out], {})
            if result is not None:
                out = result
        return out

    def _call_forward(self, interp: Any, frame: Frame, mod: nn.Module, args: list[Any],
                      kwargs: dict[str, Any]) -> Any:
        forward = interp.load_attr(mod, "forward")
        if isinstance(forward, types.MethodType) and isinstance(forward.__func__,
                                                                types.FunctionType):
            return self.inline(interp, frame, forward.__func__, [mod, *args], kwargs,
                               method_source(interp.capture, mod, forward.__func__))
        return self.call_symbolic(interp, frame, forward, args, kwargs)

    def inline(self, interp: Any, parent: Frame, fn: types.FunctionType, args: list[Any],
               kwargs: dict[str, Any], fn_source: Any) -> Any:
        """Interpret ``fn`` in a new frame; its ops join the current graph (a torch
        function with a substitute: the substitute, ``torch_substitutes``)."""
        from ember.frontend.bytecode.support import unsupported_reason

        fn = substitute_for(fn)
        code = fn.__code__
        reason = unsupported_reason(code, type(interp))
        if reason is not None:
            raise interp.fail(f"call to {_name(fn)}: {reason}")
        if parent.depth >= MAX_INLINE_DEPTH:
            raise interp.fail(f"call to {_name(fn)}: calls nested deeper than "
                              f"{MAX_INLINE_DEPTH}")
        try:
            bound = bind_arguments(fn, args, kwargs)
        except BindError as e:
            raise interp.fail(f"call to {_name(fn)}: {e}", "the call runs in Python, "
                              "which raises its TypeError") from e
        local_values = bound.values
        if interp.capture is not None:
            interp.capture.inlined.setdefault(code, fn)  # checked by the capture cache
            if inlined_torch_code(fn):
                tensor_step_math(interp, fn, local_values)
        if fn_source is not None:
            # defaults are read from the function at every call: guard them
            for param, key in bound.defaults.items():
                local_values[param] = interp.wrap(local_values[param],
                                                  DefaultSource(fn_source, key))
        g = fn.__globals__
        b = g.get("__builtins__", builtins.__dict__)
        frame = Frame(code, g, b if isinstance(b, dict) else b.__dict__,
                      local_values, closure=fn.__closure__ or (),
                      fn_source=fn_source, parent=parent)
        if code.co_flags & inspect.CO_GENERATOR:
            frame.yielded = []
            return InlinedGenerator(interp, frame)  # runs when its values are asked for
        try:
            return interp.run_frame(frame)
        except GraphBreak as e:
            e.from_inlined_call = True
            raise

    def record(self, interp: Any, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run ``fn`` on fake tensors; the recorder records the ATen ops it runs
        (:func:`.recorded_calls.record_call`)."""
        return record_call(interp, fn, args, kwargs)

    def construct(self, interp: Any, frame: Frame, cls: type, args: list[Any],
                  kwargs: dict[str, Any]) -> Any:
        """``cls(*args, **kwargs)``: see :mod:`.fresh`."""
        return construct(self, interp, frame, cls, args, kwargs)

    def call_builtin(self, interp: Any, frame: Frame, fn: Any, args: list[Any],
                     kwargs: dict[str, Any]) -> Any:
        """A C function or method: tensor methods and torch functions are recorded,
        container methods and pure modules evaluated, builtins follow their rule."""
        owner = getattr(fn, "__self__", None)
        module = owner.__name__ if isinstance(owner, types.ModuleType) else (
            getattr(fn, "__module__", None) or "")
        if isinstance(owner, torch.Tensor):
            # a tensor method, also on a real tensor (a parameter or buffer of a module
            # reached without a source): the recorder lifts it to an input (capture._lift)
            return self.record(interp, fn, args, kwargs)
        if (isinstance(owner, set) and interp.capture.source_of(owner) is not None
                and getattr(fn, "__name__", "") in _SET_MUTATORS):
            raise interp.fail(f"set.{fn.__name__}() on a set from outside the compiled "
                              "function")
        if outside_subclass(interp.capture, owner):
            view = _base_method_view(interp.capture, owner, fn)
            if view is not None:  # `out.items()` on a ModelOutput: read through its items
                owner, fn = view, getattr(view, fn.__name__)
        elif args and getattr(fn, "__objclass__", None) in _BASES and outside_subclass(
                interp.capture, args[0]):  # `dict.items(out)`
            check_read_only(interp.capture, args[0], fn.__name__)
            args = [item_view(interp.capture, args[0]), *args[1:]]
        if type(owner) in SHADOWED and id(owner) not in interp.capture.shadows:
            source = interp.capture.source_of(fn)
            if source is not None:
                # `log.append` read from outside (an argument, a closure): called on the
                # container's shadow, a mutation replayed at every call (called for real,
                # it would happen once, now)
                interp.capture.guard("equals", AttrSource(source, "__name__"), fn.__name__)
                shadow = interp.wrap(owner, AttrSource(source, "__self__"))
                fn = getattr(shadow, fn.__name__)
        interp.check_container_call(fn, args)  # a list/dict read without a source
        args = real_key_args(interp.capture, owner, fn, args)  # (a tensor key: by identity)
        if isinstance(owner, _CONTAINER_TYPES) or any(owner is t for t in _CONTAINER_TYPES):
            return self.direct(interp, fn, args, kwargs)  # methods and dict.fromkeys
        if type(owner) is collections.deque and made_here(interp.capture, owner):
            return self.direct(interp, fn, args, kwargs)  # a deque made by this capture
        if isinstance(owner, BaseException) and interp.capture.source_of(owner) is None:
            return self.direct(interp, fn, args, kwargs)  # an exception's own methods
        if (getattr(fn, "__objclass__", None) is object and fn.__name__ == "__init__"
                and not args and not kwargs):
            return None  # super().__init__() reaching object.__init__: nothing to do
        rule = _rule_for(fn)
        if rule is not None:
            return rule(self, interp, frame, args, kwargs)
        if module in _PURE_MODULES:
            _guard_contents(interp, [*args, *kwargs.values()])  # (operator.attrgetter)
            return self.direct(interp, fn, args, kwargs)
        is_tensor_method = isinstance(
            fn, (types.MethodDescriptorType, types.WrapperDescriptorType)) and _any_fake(args)
        if module == "torch" or module.startswith("torch.") or is_tensor_method:
            if getattr(fn, "__name__", "") in _GLOBAL_STATE:
                raise interp.fail(f"call to {_name(fn)} (changes global state)")
            return self.record(interp, fn, args, kwargs)
        raise interp.fail(f"call to {_name(fn)}, a function Ember cannot look into",
                          "move it out of the compiled function or wrap it in "
                          "ember.frontend.disable")

    def direct(self, interp: Any, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Call ``fn`` on its (mostly non-tensor) values; a tensor that must become a
        Python value breaks. A module argument is pinned (guarded by identity) unless
        ``fn`` only asks for its type or, for ``len``, its guarded length."""
        cap = interp.capture
        if cap is not None and fn is len and len(args) == 1 and isinstance(args[0], nn.Module):
            source = cap.source_of(args[0])
            if source is not None:
                cap.guard("len", source, len(args[0]))
        elif cap is not None and not any(fn is q for q in _SHAPE_QUERIES):
            cap.pin([*args, *kwargs.values()])
        try:
            result = fn(*args, **kwargs)
        except GraphBreak:
            raise
        except Exception as e:
            if _any_fake(args) or _any_fake(list(kwargs.values())):
                raise interp.fail(f"{_name(fn)} needs tensor values "
                                  f"({type(e).__name__})") from e
            raise
        if interp.capture is not None:
            interp.capture.note_made(result)
        return result

    def _zero_arg_super(self, frame: Frame) -> Any:
        cls = frame.cells["__class__"].cell_contents
        first = frame.code.co_varnames[0]
        owner = frame.locals.get(first)
        if owner is None and first in frame.cells:
            owner = frame.cells[first].cell_contents
        return super(cls, owner)


def _any_fake(values: list[Any]) -> bool:
    for v in values:
        if is_fake_tensor(v):
            return True
        if isinstance(v, (list, tuple)) and _any_fake(list(v)):
            return True
        if isinstance(v, dict) and _any_fake(list(v.values())):
            return True
    return False


def _has_hooks(mod: nn.Module) -> bool:
    return bool(mod._forward_hooks or mod._forward_pre_hooks
                or _has_unsupported_hooks(mod))


def _has_unsupported_hooks(mod: nn.Module) -> bool:
    from ember.frontend._torch import global_module_hooks_registered

    return bool(mod._backward_hooks or getattr(mod, "_backward_pre_hooks", None)
                or getattr(mod, "_forward_hooks_always_called", None)
                or global_module_hooks_registered())


def _rule_for(fn: Any) -> Any:
    rule = bound_rule_for(fn) or function_get_rule(fn)
    if rule is not None:
        return rule
    try:
        return BUILTIN_RULES.get(fn)
    except TypeError:  # unhashable callable
        return None


_FRAME_QUERIES = (builtins.locals, builtins.vars, builtins.globals, builtins.dir)


_BASES = (list, dict, collections.OrderedDict)


def _base_method_view(cap: Any, owner: Any, fn: Any) -> Any:
    """The plain copy of outside list/dict subclass instance ``owner`` when ``fn`` is a
    method of its base class bound to it (None for other methods: the subclass's own,
    ``object``'s)."""
    name = getattr(fn, "__name__", "")
    for base in type(owner).__mro__:
        method = base.__dict__.get(name) if base in _BASES else None
        if method is not None and hasattr(method, "__get__") and method.__get__(owner) == fn:
            check_read_only(cap, owner, name)
            return item_view(cap, owner)
    return None


def _frame_query(interp: Any, frame: Frame, fn: Any) -> Any:
    """``locals()``, ``vars()``, ``dir()``, ``globals()`` of the program's frame (run for
    real, they would describe Ember's own frame). ``locals()`` is a new dict each call
    (its values the interpreter's, in CPython's order: locals, then cells); ``globals()``
    breaks while capturing (reads through it would not be guarded)."""
    if fn is builtins.globals:
        if interp.symbolic:
            raise interp.fail("globals() (reads through it are not guarded)",
                              "read the global by name")
        return frame.f_globals
    names = {}
    code = frame.code
    for name in (*code.co_varnames, *code.co_cellvars, *code.co_freevars):
        if name in frame.cells:
            cell, cap = frame.cells[name], interp.capture
            written = cap.cell_writes.get(id(cell)) if cap is not None else None
            try:
                value = written.value if written is not None else cell.cell_contents
            except ValueError:  # empty
                continue
            if cap is not None and written is None and id(cell) not in cap.new_cells:
                value = cap.wrap(value, interp.cell_source(frame, name))
            names[name] = value
        elif name in frame.locals and frame.locals[name] is not UNBOUND:
            names[name] = frame.locals[name]
    return sorted(names) if fn is builtins.dir else names


def _stdlib_closure(fn: Any) -> bool:
    """A standard-library function made at run time around the program's values
    (``contextlib.ExitStack``'s ``_exit_wrapper`` around ``log.append``): interpreted
    like the program's code. Run for real, the program's callback would mutate outside
    objects once, at capture, and never at later calls."""
    return isinstance(fn, types.FunctionType) and bool(fn.__closure__)


def _is_user_function(fn: Any) -> bool:
    """Not torch's nor the standard library's: at a break ``logger.warning`` runs as
    plain Python (compiled, each call into ``logging`` under it would break again)."""
    return (isinstance(fn, types.FunctionType) and not is_torch_code(fn)
            and not is_stdlib(fn))


def _module_of(fn: Any) -> str:
    """The top-level module a callable belongs to (its owner's, for bound C methods)."""
    module = getattr(fn, "__module__", None)
    if not isinstance(module, str):
        owner = getattr(fn, "__self__", None)
        if owner is None or isinstance(owner, types.ModuleType):
            module = getattr(owner, "__name__", None)
        else:
            module = getattr(owner if isinstance(owner, type) else type(owner),
                             "__module__", None)
    return module.split(".")[0] if isinstance(module, str) else ""


def _opaque_argument(values: list[Any]) -> Any:
    """The first numpy array or buffer among ``values`` (or one level into lists and
    tuples), or None."""
    for v in values:
        if opaque_data(v):
            return v
        if isinstance(v, (list, tuple)):
            inner = next((x for x in v if opaque_data(x)), None)
            if inner is not None:
                return inner
    return None
