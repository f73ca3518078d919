"""Autocast's cache of cast weights while a capture runs code for real.

Under autocast, torch keeps the cast of a leaf float32 tensor that requires grad (a
weight) in a cache keyed by that tensor, until the outermost autocast block exits. A
capture inside the caller's block runs ops on fake tensors, so its casts are cached
under fake keys, which no eager code ever looks up. But code the capture runs for real
on the fakes can reach *real* weights: a custom ``autograd.Function``'s forward under
``no_grad`` calling the module it was given (HF Reformer's reversible layers), an
``ember.frontend.nonstrict`` function, a closure tensor in the tracing capture. Autocast
then casts the real weight above the recorder's dispatch mode, which makes it a graph
input (or constant) and returns a fake cast, and autocast caches that *fake* under the
real weight: eager code later in the same block (the caller's own eager call, the next
graph break) gets it ("Please convert all Tensors to FakeTensors first"). The other way
round, a real cast that eager code cached earlier in the block was returned to the
capture and became a constant of the graph, so every later call used the weight as it
was then.

A call that may reach real weights therefore runs under :class:`RealCastsUncached`, a
torch-function mode under which each torch call given such a tensor runs with the cache
off: the graph casts the weight itself, and the cache keeps only eager's casts (clearing
the whole cache would drop those, which eager code after the call reuses). The mode is
only pushed around such calls (:func:`real_casts_uncached`): a torch-function mode is
visible to torch code (``has_torch_function`` turns off ``MultiheadAttention``'s fast
path), so ordinary calls on fake tensors run without it. The tracing capture runs under
a torch-function mode of its own already and pushes this one for the whole trace.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from ember.frontend._torch import any_autocast_enabled, is_fake
from ember.frontend.custom_functions import applied_function
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["RealCastsUncached", "real_casts_uncached"]


def _cacheable_real(value: Any) -> bool:
    """Whether ``value`` is (or a list or tuple holds) a real tensor that autocast's
    cache may key a cast by: a leaf that requires grad (its dtype and device are
    autocast's to check)."""
    if isinstance(value, torch.Tensor):
        return value.requires_grad and value.is_leaf and not is_fake(value)
    if isinstance(value, (list, tuple)):
        return any(_cacheable_real(v) for v in value)
    return False


def _reaches_real(value: Any) -> bool:
    """Whether code given ``value`` can reach a real weight: a real tensor autocast may
    cache, or a module (whose parameters are real), also in a list or tuple."""
    if isinstance(value, nn.Module) or _cacheable_real(value):
        return True
    if isinstance(value, (list, tuple)):
        return any(_reaches_real(v) for v in value)
    return False


class RealCastsUncached(TorchFunctionMode):
    """Under it, a torch call given a real tensor that autocast's cache could key a cast
    by runs with that cache off; other calls, and every call with autocast or its cache
    off, run as they are (see the module docstring)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if not (any_autocast_enabled() and torch.is_autocast_cache_enabled()
                and (any(_cacheable_real(a) for a in args)
                     or any(_cacheable_real(v) for v in kwargs.values()))):
            return func(*args, **kwargs)
        torch.set_autocast_cache_enabled(False)
        try:
            return func(*args, **kwargs)
        finally:
            torch.set_autocast_cache_enabled(True)


def real_casts_uncached(fn: Any, args: list[Any], kwargs: dict[str, Any],
                        runs_python: bool) -> contextlib.AbstractContextManager[Any]:
    """What a strict capture runs ``fn(*args, **kwargs)`` under, for real on fake
    tensors: :class:`RealCastsUncached` when autocast is on and the call may reach a
    real weight (given one, or a module; a custom Function's ``apply``, a method of a
    module, or ``runs_python``: user Python run for real, such as a ``nonstrict``
    function); a null context otherwise."""
    if not any_autocast_enabled():
        return contextlib.nullcontext()
    owner = getattr(fn, "__self__", None)
    if (runs_python or applied_function(fn) is not None or _reaches_real(owner)
            or any(_reaches_real(a) for a in args)
            or any(_reaches_real(v) for v in kwargs.values())):
        return RealCastsUncached()
    return contextlib.nullcontext()
