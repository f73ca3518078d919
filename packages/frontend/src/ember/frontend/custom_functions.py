"""Custom ``torch.autograd.Function`` s: their backward is user code, so a capture that
records only the forward's ops must not differentiate them itself.

Ember records ATen ops below autograd; a custom Function's forward would be recorded
like any other code, and the aot stage would then derive a backward from those ops,
silently replacing the user's ``backward`` (and, when the forward runs in a no-grad
region as ``Function.apply`` runs it, dropping the gradient altogether). So:

- the strict capture makes ``MyFunction.apply(...)`` one operator whose backward is the
  user's when gradients can flow through it (grad mode on and a tensor argument
  requiring grad; :mod:`ember.frontend.function_ops`), or breaks the graph there when
  the operator cannot stand for it: the call runs eagerly between two compiled graphs,
  with the user's backward (logged under ``EMBER_LOGS=graph_breaks``, counted in
  ``ember.frontend.stats``). Without gradients its forward is captured like any code;
- the tracing capture, which always produces one graph, raises ``CaptureError`` naming
  the Function when a traced output depends on one through autograd.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from ember.frontend._torch import custom_function_class
from ember.frontend.pytree import flatten

_APPLY = torch.autograd.Function.apply.__func__  # type: ignore[attr-defined]


def applied_function(fn: Any) -> type | None:
    """The ``torch.autograd.Function`` subclass when ``fn`` is its bound ``apply``."""
    if getattr(fn, "__func__", None) is not _APPLY:
        return None
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, type) and issubclass(owner, torch.autograd.Function):
        return owner
    return None


def gradients_flow(args: Iterable[Any], kwargs: dict[str, Any]) -> bool:
    """Whether grad mode is on and a tensor among ``args``/``kwargs`` (nested) requires
    grad: then a custom Function's backward would run."""
    if not torch.is_grad_enabled():
        return False
    leaves, _ = flatten((list(args), kwargs))
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in leaves)


def custom_function_in(outputs: Iterable[Any], known: Iterable[Any] = ()) -> str | None:
    """The name of a custom autograd.Function that ``outputs`` (tensors) were computed
    through, found by walking their autograd graph; None when there is none. The walk
    stops at the ``grad_fn`` of the tensors ``known`` (made before: their history was
    checked when they were made)."""
    seen: dict[int, Any] = {}  # the nodes themselves: their ids stay theirs
    for t in known:
        if isinstance(t, torch.Tensor) and t.grad_fn is not None:
            seen[id(t.grad_fn)] = t.grad_fn
    stack: list[Any] = [t.grad_fn for t in outputs if isinstance(t, torch.Tensor)]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        cls = custom_function_class(node)
        if cls is not None:
            return f"{cls.__module__}.{cls.__qualname__}"
        stack.extend(next_fn for next_fn, _ in node.next_functions)
    return None


def function_in_call(result: Any, args: Iterable[Any], kwargs: dict[str, Any]) -> str | None:
    """The custom autograd.Function that a call of torch code run on fake tensors (the
    strict capture's recorded calls) applied with gradients flowing to its ``result``:
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)`` applies one inside,
    which no ``Function.apply`` rule of the interpreter sees. None when there is none."""
    if not torch.is_grad_enabled():
        return None
    outputs, _ = flatten(result)
    inputs, _ = flatten((list(args), kwargs))
    return custom_function_in(outputs, known=inputs)


def recorded_break_reason(function: str, call: str) -> tuple[str, str]:
    """The graph break's reason and hint for a recorded call that applied ``function``."""
    return (f"{call} applies the custom autograd.Function {function} to inputs that "
            "require grad: its backward is user code, which Ember does not capture (the "
            "call runs eagerly with it)",
            "the break is needed for the Function's own backward (for checkpoint, "
            "use_reentrant=False is captured in the graph)")


__all__ = ["applied_function", "custom_function_in", "function_in_call", "gradients_flow",
           "recorded_break_reason"]
