"""Guards on the modules a recorded torch function is handed.

A torch function written in Python (``torch.utils.checkpoint.checkpoint``,
``torch.func.functional_call``, a ``torch.nn.utils.parametrize`` weight getter) is not
interpreted: it runs once on fake tensors and the recorder keeps its ops
(:func:`.recorded_calls.record_call`). The user code it calls (a submodule's forward, a
parametrization) reads Python state that no guard then watches: after ``m.eval()`` or
``m.sub.scale = 5.0`` the graph kept the first call's branch (spectral norm kept running
its power iteration in ``eval()``).

:func:`guard_handed_modules` reads, through the interpreter (so with guards), every
module of the trees handed to such a call: each one's ``training`` flag and its plain
attributes (numbers, strings, booleans, None) — what a forward or a parametrization
branches on. A change then compiles the graph again, as a change read by interpreted
code does.
"""

from __future__ import annotations

import types
from typing import Any

from torch import nn

_PLAIN = (bool, int, float, str, type(None))


def guard_handed_modules(interp: Any, fn: Any, args: list[Any],
                         kwargs: dict[str, Any]) -> None:
    """Guard the modules among ``fn``'s owner and arguments (a bound method's owner
    too), and their submodules (module doc). Modules without a source are left alone."""
    capture = interp.capture
    seen: set[int] = set()
    for value in (getattr(fn, "__self__", None), *args, *kwargs.values()):
        if isinstance(value, types.MethodType):
            value = value.__self__
        if isinstance(value, nn.Module) and capture.source_of(value) is not None:
            _guard_tree(interp, value, seen)


def _guard_tree(interp: Any, module: nn.Module, seen: set[int]) -> None:
    if id(module) in seen:
        return
    seen.add(id(module))
    interp.load_attr(module, "training")
    for name, value in list(vars(module).items()):
        if not name.startswith("_") and isinstance(value, _PLAIN):
            interp.load_attr(module, name)
    for name in list(module._modules):
        child = interp.load_attr(module, name)  # the child with its source
        if isinstance(child, nn.Module):
            _guard_tree(interp, child, seen)
