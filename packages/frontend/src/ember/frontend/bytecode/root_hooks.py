"""Hooks of the compiled module itself (``ember.frontend.compile(model)`` in strict
capture).

The strict capture compiles the module's ``forward``; ``nn.Module.__call__``, which runs
the module's hooks, is not part of it (hooks of submodules are: ``calls.call_module``).
So a compiled module with forward pre-hooks or forward hooks runs them here, in Python,
around the compiled forward, as ``nn.Module.__call__`` does; one with backward hooks (or
global module hooks), whose machinery wraps the inputs and outputs in autograd
Functions, runs each call eagerly through ``nn.Module.__call__`` (logged under
``graph_breaks``, counted in ``stats.eager_fallback_calls``). Before, the strict
capture silently skipped all of them.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from ember.frontend._torch import module_call_impl
from ember.frontend.torch_substitutes import substitute_for
from torch import nn


def has_hooks(module: nn.Module) -> bool:
    """Whether calling ``module`` runs any hook (its own or a global one)."""
    return bool(module._forward_pre_hooks or module._forward_hooks
                or needs_module_call(module))


def needs_module_call(module: nn.Module) -> bool:
    """Hooks only ``nn.Module.__call__`` runs correctly: backward hooks, hooks that
    run even when forward raises, global module hooks."""
    from ember.frontend._torch import global_module_hooks_registered

    return bool(module._backward_hooks or getattr(module, "_backward_pre_hooks", None)
                or getattr(module, "_forward_hooks_always_called", None)
                or global_module_hooks_registered())


def call_with_forward_hooks(module: nn.Module, forward: Callable[..., Any],
                            args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``module(*args, **kwargs)`` with ``forward`` (the compiled forward) in place of
    ``module.forward``: forward pre-hooks, ``forward``, forward hooks."""
    for hook_id, hook in list(module._forward_pre_hooks.items()):
        if hook_id in module._forward_pre_hooks_with_kwargs:
            result = hook(module, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError("forward pre-hook must return None or a tuple of "
                                       f"(new_args, new_kwargs), but got {result}.")
                args, kwargs = result
        else:
            result = hook(module, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
    out = forward(*args, **kwargs)
    for hook_id, hook in list(module._forward_hooks.items()):
        if hook_id in module._forward_hooks_with_kwargs:
            result = hook(module, args, kwargs, out)
        else:
            result = hook(module, args, out)
        if result is not None:
            out = result
    return out


__all__ = ["call_with_forward_hooks", "has_hooks", "needs_module_call"]


def replaced_forward(module: nn.Module, compiled: Any) -> Any | None:
    """What ``module.forward`` is now when it is no longer the function ``compiled``
    (the one compiled: ``forward`` replaced after compiling, on the instance, e.g.
    ``m.forward = other``, or on the class), else None. Checked at every call of a
    compiled module, as ``nn.Module.__call__`` looks ``forward`` up at every call."""
    # (``compiled`` is the substitute of a torch forward that has one: torch_substitutes)
    own = module.__dict__.get("forward")
    if own is not None:
        if substitute_for(getattr(own, "__func__", None)) is compiled and getattr(
                own, "__self__", None) is module:
            return None
        return own
    current = getattr(type(module), "forward", None)
    return None if substitute_for(current) is compiled else getattr(module, "forward", None)


MODULE_CALLS = (nn.Module.__call__, module_call_impl())
"""``nn.Module``'s own call: hooks and ``forward`` (``CallHandler.call_module``)."""


def custom_module_call(mod: nn.Module) -> types.FunctionType | None:
    """The ``__call__`` a module's class defines in Python over ``nn.Module``'s (it calls
    ``super().__call__``), or None."""
    call = type(mod).__call__
    if any(call is c for c in MODULE_CALLS) or not isinstance(call, types.FunctionType):
        return None
    module = getattr(call, "__module__", None) or ""
    return None if module == "torch" or module.startswith("torch.") else call
