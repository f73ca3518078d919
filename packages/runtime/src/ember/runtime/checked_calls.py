"""Torch functions whose eager kernels check their tensors' values, which a recording
on fake tensors skips: each records the check as ``aten::_assert_async.msg`` (a side
effect no pass removes; it raises when the compiled program runs, as eager raises).

| function    | eager's check                                   | recorded               |
|-------------|-------------------------------------------------|------------------------|
| ``one_hot`` | every class in ``[0, num_classes)``             | ``_assert_async`` of it |

torch's ``one_hot`` of a tensor without data compares the classes with
``arange(num_classes)``: a class out of range gave an all-zero row, silently. The
recorders apply the table: ``record_fx`` and the trace capture through
:class:`CheckedCalls` (a torch function mode), the strict capture through
:func:`call_checked` at each call it records.

Adding a function: write its checked version (NotImplemented where it does not apply)
and put it in :data:`CHECKED_CALLS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from ember.runtime._torch import assert_async, is_fake
from torch.overrides import TorchFunctionMode

ONE_HOT_MESSAGE = "Class values must be non-negative and smaller than num_classes (one_hot)."


def _one_hot(tensor: Any, num_classes: Any = -1) -> Any:
    if (not isinstance(tensor, torch.Tensor) or not is_fake(tensor)
            or tensor.dtype != torch.int64 or isinstance(num_classes, bool)
            or not isinstance(num_classes, int) or num_classes < 0):
        # (num_classes=-1 reads the data: the op's own error; a symbolic num_classes
        # is the frontend's symbolic rewrite, a scatter that checks its indices)
        return NotImplemented
    assert_async(((tensor >= 0) & (tensor < num_classes)).all(), ONE_HOT_MESSAGE)
    return F.one_hot(tensor, num_classes)


CHECKED_CALLS: dict[Any, Callable[..., Any]] = {
    F.one_hot: _one_hot,
}
"""Torch function -> its version that records eager's value check."""


def call_checked(fn: Any, args: Any, kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, through its checked version when it has one that applies."""
    try:
        checked = CHECKED_CALLS.get(fn)
    except TypeError:  # unhashable
        checked = None
    if checked is not None:
        result = checked(*args, **kwargs)
        if result is not NotImplemented:
            return result
    return fn(*args, **kwargs)


class CheckedCalls(TorchFunctionMode):
    """Runs the functions of :data:`CHECKED_CALLS` through their checked versions."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        return call_checked(func, args, kwargs or {})
