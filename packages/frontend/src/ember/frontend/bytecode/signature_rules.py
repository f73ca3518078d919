"""``inspect.signature`` during capture: a module's bound method is guarded by its
function, not pinned by the module's identity.

Code run for real pins the modules handed to it (an identity guard: what it computed
from the object is a constant of the graph). ``inspect.signature(layer.method)`` reads
only the method's function (its code, defaults, ``__wrapped__``, ``__signature__``),
never the instance: HF's ``apply_chunking_to_forward(self.feed_forward_chunk, ...)``
would otherwise pin every ``BertLayer`` by identity, which no other process can check
(the capture cache could not store BERT's capture) and which gives each layer its own
compiled code. The rule guards ``<module source>.<name>.__func__`` by identity and its
``__code__`` (a code-fingerprint check in the capture cache); the module's type is
guarded where it was read. Any other argument runs as before (stdlib code run for real,
its module arguments pinned).

The table: ``SIGNATURE_RULES[fn] = rule``, added to the builtin rules.
"""

from __future__ import annotations

import inspect
import types
from typing import Any

from ember.frontend.bytecode.frame import Frame
from ember.frontend.bytecode.sources import AttrSource, MethodFuncSource
from torch import nn


def _signature(h: Any, interp: Any, frame: Frame, args: list[Any],
               kwargs: dict[str, Any]) -> Any:
    cap = interp.capture
    method = args[0] if len(args) == 1 and not kwargs else None
    source = None
    if (cap is not None and isinstance(method, types.MethodType)
            and isinstance(method.__self__, nn.Module)
            and isinstance(method.__func__, types.FunctionType)):
        name = method.__func__.__name__
        owner = method.__self__
        if (getattr(type(owner), name, None) is method.__func__
                and name not in vars(owner)):
            source = cap.source_of(owner)
    if source is None or method is None:
        if cap is not None:
            cap.refuse_dirty([*args, *kwargs.values()], "inspect.signature")
        return h.direct(interp, inspect.signature, args, kwargs)
    # NOTE: the function the method is bound to, as a module's method read is guarded
    # (capture.py): the guard fast path's stamp covers it
    func = MethodFuncSource(source, method.__func__.__name__)
    cap.guard("id", func, method.__func__)
    cap.guard("id", AttrSource(func, "__code__"), method.__func__.__code__)
    return inspect.signature(method)


SIGNATURE_RULES = {inspect.signature: _signature}
"""The rules of this module, by function."""
