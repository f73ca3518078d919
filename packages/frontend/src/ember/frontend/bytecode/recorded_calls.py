"""Calls run for real on fake tensors and recorded at the ATen level (rule 4 of
:mod:`.calls`): torch functions, tensor methods and torch's own Python code.

:func:`record_call` refuses what needs real data (``.item()``, ``.tolist()``,
``bool(t)``: a break, or unbacked symbols for an integer ``.item()`` / ``.tolist()``
in a symbolic capture), higher-order ops, calls whose result went through a custom
``autograd.Function``, and, inside an ``ember.frontend.nonstrict`` function (whose
Python runs once, on fake tensors), a call of a disabled function (``trace_watch``); a
call that fails on fake tensors after recording ops restarts the capture before it
(:func:`restart_if`).
"""

from __future__ import annotations

import types
from typing import Any

import torch
from ember.frontend._torch import (
    data_dependent_output_types,
    has_unbacked_symbols,
    higher_order_op_name,
    is_fake,
    is_view,
    quiet_fake_tensor_errors,
)
from ember.frontend.autocast_cache import real_casts_uncached
from ember.frontend.bytecode.breaks import GraphBreak, failure_hint
from ember.frontend.bytecode.escape import is_nonstrict
from ember.frontend.bytecode.frame import location_of
from ember.frontend.bytecode.grad_mode import CALL_TURNED_GRAD_ON, program_call
from ember.frontend.bytecode.opaque_modules import guard_handed_modules
from ember.frontend.custom_functions import function_in_call, recorded_break_reason
from ember.frontend.declined_sizes import symbolic_failure
from ember.frontend.free_layouts import note_read
from ember.frontend.guard_model import GLOBAL_STATE_QUERIES
from ember.frontend.symbolic_calls import call_rewritten, symbolic_calls
from ember.frontend.trace_watch import PythonWatch, watched_python
from ember.runtime.checked_calls import call_checked
from ember.runtime.custom_ops import MissingFakeKernelError
from torch import nn

__all__ = ["ITEM_BREAK", "callable_name", "record_call", "restart_if"]

# Tensor methods and torch functions that need real data or touch global state.
_DATA_DEPENDENT = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__",
                   "__index__", "data_ptr", "backward", "register_hook", "retain_grad",
                   "nonzero_static",
                   "__repr__", "__str__", "__format__"}
# the calls of _DATA_DEPENDENT that break for another reason than the data
_NOT_DATA = {
    "backward": ("Tensor.backward() runs autograd's backward pass, which is not captured "
                 "(the forward before it and the code after it are compiled)",
                 "this break is expected in a training step"),
    "register_hook": ("Tensor.register_hook() on a tensor of the graph (a hook on a "
                      "gradient is not captured)", "register the hook outside the compiled "
                      "function, or on a module (register_full_backward_hook)"),
    "retain_grad": ("Tensor.retain_grad() on a tensor of the graph (its .grad after "
                    "backward() is autograd's, not captured: run on the fake tensor it "
                    "would be lost)", "this break is needed for correctness"),
}


# the most items a ``.tolist()`` gives unbacked symbols for (each is a graph node and a
# symbol bound at run time); a larger tensor breaks
_MAX_TOLIST_ITEMS = 1024


def _unbacked_item(interp: Any, fn: Any) -> bool:
    """Whether ``fn`` is ``.item()`` or ``.tolist()`` of an integer tensor in a symbolic
    capture: it runs on the fake tensor and gives unbacked symbols (``u0``; ``tolist``:
    one per element, through ``aten::unbind``), each bound at run time by its
    ``aten::_local_scalar_dense`` node. In a static capture it asks for a symbolic one
    (``data_dependent``) and breaks if that is not allowed. Raises the break of a
    ``.tolist()`` that cannot give symbols (a float/bool tensor, a symbolic number of
    elements, too many)."""
    owner = getattr(fn, "__self__", None)
    name = getattr(fn, "__name__", "")
    if name not in ("item", "tolist") or not isinstance(owner, torch.Tensor):
        return False
    if owner.dtype.is_floating_point or owner.dtype.is_complex or owner.dtype == torch.bool:
        if name == "tolist":
            raise interp.fail(
                f"Tensor.tolist() needs the tensor's data (a {owner.dtype} tensor: only "
                "an integer tensor's items can be unbacked symbolic ints)",
                "keep the values as a tensor, or move this code out of the compiled "
                "function")
        return False  # only an integer can be a size
    if name == "tolist":
        _refuse_tolist_shape(interp, owner)
    if interp.capture.recorder.shape_env is None:
        interp.capture.data_dependent = True
        return False
    frame = root = interp.current_frame
    while root.parent is not None:
        root = root.parent
    line = frame.instructions[frame.ip - 1].line
    interp.capture.unbacked_items.append((root.ip - 1, location_of(frame, line), name))
    return True


def _refuse_tolist_shape(interp: Any, owner: torch.Tensor) -> None:
    """The break of an integer ``.tolist()`` whose number of items depends on the data
    (an unbacked size) or is larger than :data:`_MAX_TOLIST_ITEMS`. (A symbolic size of
    an input is specialised: the list's length is a Python int.)"""
    if any(has_unbacked_symbols(d) for d in owner.shape):
        raise interp.fail(
            f"Tensor.tolist() of a tensor of data-dependent shape {tuple(owner.shape)} "
            "(its number of items must be known to give one unbacked int each)",
            "keep the values as a tensor")
    if owner.numel() > _MAX_TOLIST_ITEMS:
        raise interp.fail(
            f"Tensor.tolist() of {owner.numel()} items (more than {_MAX_TOLIST_ITEMS} "
            "unbacked symbols)", "keep the values as a tensor")


ITEM_BREAK = ("Tensor.{}() needs the tensor's data (its value is a data-dependent size "
              "the code after a graph break would need)")
"""The break at an integer ``.item()`` (or ``.tolist()``) when a later break in the same capture would
leave its unbacked symbol live at the break (segment.py retries breaking here); ``{}``:
the method's name."""


def record_call(interp: Any, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run ``fn`` on fake tensors; the recorder records the ATen ops it runs."""
    higher_order = higher_order_op_name(fn)
    if higher_order is not None:
        # NOTE: never run on fake tensors: torch compiles a higher-order op's eager
        # call with Dynamo, which, once it failed under the recorder's dispatch mode,
        # keeps failing for the real call at the break too
        raise interp.fail(f"{higher_order} (a higher-order op: control flow or a "
                          "subgraph, which Ember's graphs do not hold)",
                          "the call runs eagerly; the code around it is compiled")
    query = (GLOBAL_STATE_QUERIES.get(fn) if not args and not kwargs and isinstance(
        fn, (types.FunctionType, types.BuiltinFunctionType)) else None)
    if query is not None:  # a flag of torch's global state: the same at every call
        value = fn()
        interp.capture.guard("global", None, (query, value))
        return value
    name = getattr(fn, "__name__", "")
    if name in _DATA_DEPENDENT and not _unbacked_item(interp, fn):
        raise interp.fail(*_NOT_DATA.get(name, (
            f"Tensor.{name}() needs the tensor's data", "keep the value as a tensor, "
            "or move this code out of the compiled function")))
    if name == "requires_grad_":
        _refuse_input_flag_change(interp, fn, args, kwargs)
    if name == "__deepcopy__" and is_fake(getattr(fn, "__self__", None)):
        # (copy_rules handles copy.deepcopy; run for real it makes another fake mode's
        # tensor, reading the fake's data pointer)
        raise interp.fail("Tensor.__deepcopy__ of a tensor of the graph",
                          "use copy.deepcopy(t) or t.clone()")
    guard_handed_modules(interp, fn, args, kwargs)  # what the Python inside reads
    interp.capture.pin([getattr(fn, "__self__", None), *args, *kwargs.values()])
    note_read(interp.capture, name, fn, args)  # a free layout's stride or offset
    nodes = interp.capture.recorder.graph.nodes
    recorded = len(nodes)
    watch = PythonWatch()
    try:
        # (torch's own grad-mode switches stay inside the call; a failing op's log too;
        # real weights it reaches stay out of autocast's cache: ..autocast_cache)
        nonstrict = is_nonstrict(fn)
        with program_call() as call, quiet_fake_tensor_errors(), \
                real_casts_uncached(fn, args, kwargs, nonstrict):
            if nonstrict:  # its Python runs once: a disabled call in it is refused
                with watched_python() as watch:
                    result = _run_for_real(interp, fn, args, kwargs)
            else:
                result = _run_for_real(interp, fn, args, kwargs)
    except GraphBreak:
        raise
    except Exception as e:
        if watch.refused is None:
            raise _failed(interp, fn, e, len(nodes) > recorded) from e
    if watch.refused is not None:  # (also when the code caught it)
        reason = str(watch.refused).partition("\n")[0]
        raise restart_if(len(nodes) > recorded, interp.fail(
            f"{reason.split(':')[0]} inside {callable_name(fn)}, marked "
            "ember.frontend.nonstrict (run once on fake tensors)",
            "the nonstrict call runs eagerly, the disabled call at every call"))
    if call.turned_grad_on():
        raise restart_if(True, interp.fail(f"{callable_name(fn)}: {CALL_TURNED_GRAD_ON}"))
    function = function_in_call(result, args, kwargs)
    if function is not None:  # the call runs for real, with the Function's backward
        raise restart_if(len(nodes) > recorded, interp.fail(
            *recorded_break_reason(function, callable_name(fn))))
    if _new_grad_leaf(interp, result, () if name == "requires_grad_" else
                      (getattr(fn, "__self__", None), *args)):
        # NOTE: restarted (stops before the call) even without recorded ops: the call
        # already made the fake require grad
        raise restart_if(True, interp.fail(
            f"{callable_name(fn)} makes a new tensor that requires grad (a leaf of "
            "autograd, which a graph's output cannot be)",
            "create it outside the compiled function, or pass it in"))
    interp.capture.note_made(result)
    return result


def _new_grad_leaf(interp: Any, result: Any, passed: tuple[Any, ...]) -> bool:
    """Whether ``result`` is (or holds, one level deep) a tensor made by this call that
    requires grad and is a leaf (``torch.zeros(..., requires_grad=True)``,
    ``t.detach().requires_grad_()``): the graph's output would not require grad.
    ``passed``: the call's own tensors, which an in-place call returns and did not make
    (empty for ``requires_grad_``, whose point is to flag its own tensor)."""
    items = result if isinstance(result, (tuple, list)) else (result,)
    items = tuple(t for t in items if not any(t is p for p in passed))
    # NOTE: a view made under no_grad of a tensor that requires grad (a parameter's
    # ``expand`` in an inference call) is a leaf that requires grad in eager too: its
    # flag comes from its base, and it is no new leaf
    return any(isinstance(t, torch.Tensor) and is_fake(t) and t.requires_grad and t.is_leaf
               and not is_view(t) and interp.capture.is_input_fake(t) is None for t in items)


def _refuse_input_flag_change(interp: Any, fn: Any, args: list[Any],
                              kwargs: dict[str, Any]) -> None:
    """``x.requires_grad_(flag)`` that changes a graph input's flag: a change of the real
    tensor, which the graph does not make."""
    owner = getattr(fn, "__self__", None)
    rest = list(args)
    if not isinstance(owner, torch.Tensor) and rest:
        owner = rest.pop(0)
    flag = rest[0] if rest else kwargs.get("requires_grad", True)
    if (isinstance(owner, torch.Tensor) and is_fake(owner) and isinstance(flag, bool)
            and flag != owner.requires_grad and interp.capture.is_input_fake(owner) is not None):
        raise interp.fail("requires_grad_() changing whether an input requires grad",
                          "set it outside the compiled function")


def _failed(interp: Any, fn: Any, e: Exception, recorded: bool) -> GraphBreak:
    """The break of a recorded call that raised ``e`` on fake tensors."""
    if isinstance(e, data_dependent_output_types()):
        interp.capture.data_dependent = True  # a symbolic capture gets unbacked sizes
        op = getattr(e, "func", None) or str(e).splitlines()[0]
        # NOTE: with dynamic=None or True a capture with symbolic shapes has been, or is
        # about to be, tried: a break reported then is one that did not help either
        hint = ("keep the code outside the compiled function (even a capture with "
                "symbolic shapes cannot give this op an unbacked size)"
                if interp.capture.policy.unbacked_allowed else
                "compile with dynamic=None or True (symbolic shapes give it an unbacked "
                "size), or keep the code outside")
        return restart_if(recorded, interp.fail(
            f"data-dependent size of {op} in {callable_name(fn)}: its output size (or value) "
            "depends on the data", hint))
    hint = ("register the operator's fake kernel" if isinstance(e, MissingFakeKernelError)
            else failure_hint(e) or "keep the code outside the compiled function")
    brk = restart_if(recorded, interp.fail(
        f"{callable_name(fn)} could not run on fake tensors ({type(e).__name__}: "
        f"{str(e).splitlines()[0] if str(e) else ''})", hint))
    brk.symbolic_sizes = interp.capture.policy.may_be_dynamic and symbolic_failure(e)
    return brk


def _run_for_real(interp: Any, fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """``fn(*args, **kwargs)``; writes it makes into outside objects it was given
    (``self`` included) are captured as attribute writes (:meth:`capture_writes`)."""
    cap = interp.capture
    owner = getattr(fn, "__self__", None)
    cap.refuse_dirty([owner, *args, *kwargs.values()], callable_name(fn))
    watched = [(o, dict(o.__dict__)) for o in (owner, *args)
               if o is not None and cap.source_of(o) is not None
               and isinstance(getattr(o, "__dict__", None), dict)
               and not isinstance(o, (type, types.ModuleType, nn.Module))]
    # (iteration read inside it, of a generator it was given, stays the call's own:
    # iteration._read_item)
    interp.calls_run_for_real += 1
    try:
        shape_env = cap.recorder.shape_env
        if shape_env is None:
            return call_checked(fn, args, kwargs)  # eager's value checks (one_hot)
        with symbolic_calls(shape_env, mode=False):  # sizes stay symbolic (dynamic)
            return call_rewritten(fn, args, kwargs)
    finally:
        interp.calls_run_for_real -= 1
        for obj, before in watched:
            cap.capture_writes(obj, before)


def restart_if(recorded: bool, err: GraphBreak) -> GraphBreak:
    """``err``, made to restart the capture when the failed call had recorded ops: the
    capture then stops before the call, so that its ops (which run again for real at
    the break) never enter the graph (a random op's draw would shift eager's stream)."""
    err.from_inlined_call = err.from_inlined_call or recorded
    return err


def callable_name(fn: Any) -> str:
    """``module.qualname`` of a callable, for break reasons."""
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if qual is None:
        return type(fn).__name__
    if isinstance(getattr(fn, "__self__", None), torch.Tensor):
        return f"Tensor.{fn.__name__}"  # never the interpreter's FakeTensor
    if qual.startswith("_VariableFunctionsClass."):
        return f"torch.{fn.__name__}"
    module = getattr(fn, "__module__", None)
    return f"{module}.{qual}" if module and module not in ("builtins",) else qual
