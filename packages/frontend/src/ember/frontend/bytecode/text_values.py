"""Symbolic sizes made text.

With symbolic shapes (automatic dynamic, ``dynamic=True``, marks) ``x.shape`` holds
``SymInt`` s. Code that makes text of them (an f-string, ``str``/``repr``/``format``/
``ascii``, ``"%s" % ...``, ``"{}".format(...)``) ran on those symbols: the string was
``'torch.Size([s0, s1])'``, a constant of the graph, silently wrong at every call.
:func:`specialised_for_text` specialises each symbolic number such code reads (a guard:
the symbols become static, a new size recompiles), logged under ``EMBER_LOGS=dynamic``;
a data-dependent (unbacked) one is a graph break.
"""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend._torch import has_unbacked_symbols
from ember.frontend.bytecode.breaks import GraphBreak
from ember.runtime.logs import log

__all__ = ["specialised_for_text"]

_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool)


def specialised_for_text(value: Any) -> Any:
    """``value`` with each symbolic number in it (itself, or an item of a
    ``torch.Size``, tuple, list or dict value) specialised; other values unchanged.

    Raises:
        GraphBreak: a data-dependent (unbacked) size would be made text.
    """
    if isinstance(value, _SYMBOLIC):
        if has_unbacked_symbols(value):
            raise GraphBreak(f"the data-dependent size {value} made text (its value is "
                             "known only when the graph runs)")
        kind: type = int if isinstance(value, torch.SymInt) else (
            float if isinstance(value, torch.SymFloat) else bool)
        concrete: int | float | bool = kind(value)
        log("dynamic", f"specialised {value} = {concrete}: it is made text (an f-string, "
                       "str, format)")
        return concrete
    if isinstance(value, torch.Size):
        return torch.Size([specialised_for_text(v) for v in value])
    if type(value) in (tuple, list):
        return type(value)(specialised_for_text(v) for v in value)
    if type(value) is dict:
        return {k: specialised_for_text(v) for k, v in value.items()}
    return value
