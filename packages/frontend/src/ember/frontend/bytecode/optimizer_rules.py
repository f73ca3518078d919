"""Compiled optimizer steps: ``ember.frontend.compile(optimizer.step)``.

Other torch Python code is *recorded* (run for real on the capture's fake tensors, its
ATen ops recorded), but an optimizer's ``step`` reads Python state the graph must
depend on: ``param_groups`` (lr, betas, flags), ``self.state[p]`` (step counters,
moment buffers) and ``p.grad``. Run for real, it would see the real parameters and
bake their gradients and state into the graph as constants. So the code of the
packages in :data:`INLINED_TORCH_PACKAGES` is *inlined* like user code: every read of
the optimizer's state is guarded or made a graph input, and its tensor updates are
in-place writes of graph inputs (aot writes them back; the graph runs without grad,
see ``grad_mode.graph_grad_mode``).

Three of ``torch.optim``'s calls get a rule here (:data:`OPTIMIZER_RULES`, registered in
``BUILTIN_RULES``):

* ``torch._dynamo.graph_break()``, which ``Optimizer.step``'s grad-mode wrapper calls
  so that torch.compile's aot sees a graph without grad: a no-op when called from the
  inlined packages (Ember's grad-mode tracking gives the same result without a break);
  elsewhere it stays the deliberate break a user asked for.
* ``typing.cast(T, v)`` gives ``v`` (run for real, it would refuse an object written
  in the capture);
* ``torch.autograd.profiler.record_function`` blocks are captured without their range
  (``exception_ops.ProfilerRangeExit``).

An LR scheduler wraps ``optimizer.step`` in a function that reads the optimizer through
a weak reference and binds the original ``step`` with ``func.__get__(opt, cls)``: the
weak reference's call is read through :class:`~.sources.RefTargetSource` (guarded like
any object) and ``function.__get__`` binds a method (:func:`function_get_rule`), so the
wrapper is captured with the step.

The optimizers' functional forms (``adam``, ``sgd``, ...) called with ``foreach=True``
are inlined with ``foreach=False``: the aot stage decomposes ``_foreach_`` ops into
the same per-parameter ops, so the graph is the same, and the per-parameter form is the
one whose compiled step was measured on the H200 (the inductor fuses the updates). The
per-parameter math functions (``_single_tensor_adam``, ``_multi_tensor_sgd``, ...)
are inlined with ``capturable=True`` (:func:`tensor_step_math`): their non-capturable
form turns the step count into a Python number (``value=-step_size`` of
``addcdiv_``: a ``.item()``), which no graph holds; the capturable form computes the
same update with the step count as a tensor (eager's and the compiled step's results
agree to rounding). The state is still made as ``capturable=False`` makes it (the
group's flag is unchanged), and eager's device check for ``capturable=True`` is skipped
under compilation, as torch.compile skips it.
"""

from __future__ import annotations

import types
import typing
import weakref
from typing import Any

from ember.frontend._torch import dynamo_graph_break
from ember.frontend.bytecode.builtin_rules import BUILTIN_RULES
from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.sources import RefTargetSource
from ember.runtime.logs import log

__all__ = ["INLINED_TORCH_PACKAGES", "OPTIMIZER_RULES", "function_get_rule",
           "inlined_torch_code", "recorded_torch_code", "tensor_step_math",
           "weakref_target"]

INLINED_TORCH_PACKAGES = ("torch.optim", "torch.amp.grad_scaler")
"""torch packages whose Python functions are inlined, not recorded."""


def _in_packages(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in INLINED_TORCH_PACKAGES)


def inlined_torch_code(fn: Any) -> bool:
    """A function or class of one of :data:`INLINED_TORCH_PACKAGES`."""
    return _in_packages(getattr(fn, "__module__", None) or "")


def recorded_torch_code(fn: Any) -> bool:
    """torch code that is recorded (run on fake tensors), not inlined."""
    module = getattr(fn, "__module__", None) or ""
    return (module == "torch" or module.startswith("torch.")) and not _in_packages(module)


def _graph_break_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                      kwargs: dict[str, Any]) -> Any:
    if _in_packages(str(frame.f_globals.get("__name__", ""))):
        return None
    raise interp.fail("call to torch._dynamo.graph_break()", "this break is deliberate")


OPTIMIZER_RULES: dict[Any, Any] = {}
"""Callable -> rule (the ``BUILTIN_RULES`` signature) for the calls above."""

_graph_break = dynamo_graph_break()
if _graph_break is not None:
    OPTIMIZER_RULES[_graph_break] = _graph_break_rule
# typing.cast(T, v) is v (Optimizer.step's wrapper casts self): not run for real, which
# refuses an object the capture wrote (the scheduler's wrapper sets opt._opt_called)
OPTIMIZER_RULES[typing.cast] = lambda h, interp, frame, args, kwargs: (
    args[1] if len(args) == 2 else kwargs.get("val", args[-1] if args else None))
BUILTIN_RULES.update(OPTIMIZER_RULES)


_STEP_MATH_PREFIXES = ("_single_tensor_", "_multi_tensor_")


def tensor_step_math(interp: Any, fn: Any, values: dict[str, Any]) -> None:
    """Bound arguments ``values`` of an inlined ``torch.optim`` function: a per-parameter
    math function called with ``capturable=False`` (and not ``differentiable``) gets
    ``capturable=True``, a functional form called with ``foreach=True`` gets
    ``foreach=False`` (see the module docstring; both logged under ``graphs``); the
    ``fused=True`` form breaks."""
    name = getattr(fn, "__name__", "")
    if name.startswith("_fused_"):
        raise interp.fail(f"{fn.__module__}.{name}: a fused=True optimizer step (its "
                          "torch._fused_* ops write lists of tensors, which the aot stage "
                          "does not functionalize)",
                          "leave fused unset: the compiled step fuses the per-parameter "
                          "updates itself")
    if "foreach" in values and values["foreach"] and not name.startswith(_STEP_MATH_PREFIXES):
        # NOTE: aot decomposes _foreach_ ops into these per-parameter ops anyway (its
        # FOREACH_ELEMENT_OPS); the per-parameter form is the one measured on the H200
        values["foreach"] = False
        log("graphs", f"{fn.__module__}.{name}: captured with foreach=False (the "
            "per-parameter form; the inductor fuses the updates)")
    if (name.startswith(_STEP_MATH_PREFIXES) and values.get("capturable") is False
            and not values.get("differentiable")):
        values["capturable"] = True
        log("graphs", f"{fn.__module__}.{name}: captured with capturable=True (the step "
            "count stays a tensor of the graph)")


def weakref_target(interp: Any, ref: weakref.ReferenceType[Any]) -> Any:
    """``ref()`` of a weak reference the captured code called: its object, read through
    the reference's source when it has one (guards then hold on what it refers to)."""
    target = ref()
    source = interp.capture.source_of(ref)
    return target if source is None else interp.wrap(target, RefTargetSource(source))


def function_get_rule(fn: Any) -> Any:
    """The rule of ``func.__get__`` (a ``method-wrapper`` bound to a Python function):
    ``func.__get__(obj, cls)`` binds a method, None for other callables."""
    if not (isinstance(fn, types.MethodWrapperType) and fn.__name__ == "__get__"
            and isinstance(fn.__self__, types.FunctionType)):
        return None
    func = fn.__self__

    def rule(h: Any, interp: Any, frame: Frame, args: list[Any],
             kwargs: dict[str, Any]) -> Any:
        if not args or args[0] is None or kwargs:
            return func
        return types.MethodType(func, args[0])

    return rule
