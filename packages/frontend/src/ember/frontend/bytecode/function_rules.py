"""``MyFunction.apply(*args)`` with gradients flowing: one operator whose backward is the
Function's own (:mod:`ember.frontend.function_ops`), or a graph break that says why."""

from __future__ import annotations

from typing import Any

from ember.frontend.function_ops import FunctionNotCaptured, function_op


def apply_function(h: Any, interp: Any, function: type, args: list[Any],
                   kwargs: dict[str, Any]) -> Any:
    """The result of ``function.apply(*args, **kwargs)`` in the graph (``h``: the call
    handler); a graph break when the Function cannot be one operator."""
    cap = interp.capture
    name = f"{function.__module__}.{function.__qualname__}"
    try:
        # the probe runs the forward on the fake arguments outside the graph
        cap.recorder.__exit__(None, None, None)
        try:
            op = function_op(function, args, kwargs, args)
        finally:
            cap.recorder.__enter__()
    except FunctionNotCaptured as e:
        raise interp.fail(f"custom autograd.Function {name}.apply with inputs that require "
                          f"grad: {e}, which its operator cannot stand for (the call runs "
                          "eagerly with its backward)", "under torch.no_grad() its "
                          "forward is captured") from e
    except Exception as e:  # the forward failed on fake tensors
        raise interp.fail(f"custom autograd.Function {name}.apply: its forward could not "
                          f"run on fake tensors ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''})",
                          "the call runs eagerly with its backward") from e
    tensors = [a for a in args if hasattr(a, "requires_grad")]
    return op.outputs_of(h.record(interp, op.op, tensors, {}))
