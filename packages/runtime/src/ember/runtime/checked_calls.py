"""Torch functions whose eager C++ reads what a recording on fake tensors lacks: the
values of its tensors (a check), or data it builds itself. Each is recorded another way
that computes the same.

- ``one_hot`` checks every class is in ``[0, num_classes)``: recorded, the check as
  ``aten::_assert_async.msg`` (a side effect no pass removes; it raises when the
  compiled program runs, as eager raises).
- ``ctc_loss`` with Python-list lengths and the mean reduction divides the per-sample
  losses by ``at::tensor(target_lengths)``, a tensor with data: recorded, the
  per-sample losses (``reduction="none"``) over the lengths as a constant tensor (at
  least 1), averaged.
- ``cosine_similarity`` with an input that requires grad clamps the two norms to
  ``eps`` in place under ``no_grad``: the values are clamped, the gradient flows as if
  they were not. A recording cannot hold a write under ``no_grad`` to a value with
  autograd history (the strict capture broke the graph there): recorded out of place,
  each norm as ``norm.detach().clamp_min(eps) + (norm - norm.detach())`` (the clamped
  value exactly, for a finite norm; the norm's gradient).

torch's ``one_hot`` of a tensor without data compares the classes with
``arange(num_classes)``: a class out of range gave an all-zero row, silently. Its
``ctc_loss`` with the mean reduction raised on fake tensors ("data is not allocated"):
the graph broke at the loss. The recorders apply the tables: ``record_fx`` and the trace
capture through :class:`CheckedCalls` (a torch function mode), the strict capture
through :func:`call_checked` at each call it records.

Adding a function: write its checked version (NotImplemented where it does not apply)
and put it in :data:`CHECKED_CALLS` (a value check) or :data:`REBUILT_CALLS` (data built
from Python values).
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


def _int_lists(*values: Any) -> bool:
    return all(isinstance(v, (list, tuple)) and all(type(n) is int for n in v)
               for v in values)


def _ctc_loss(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any,
              blank: int = 0, reduction: Any = None, zero_infinity: bool = False) -> Any:
    """``torch.ctc_loss`` with the mean reduction (the enum 1; its binding's default is
    none, which builds no data)."""
    if reduction != 1 or not isinstance(log_probs, torch.Tensor) or not \
            is_fake(log_probs) or not _int_lists(input_lengths, target_lengths):
        return NotImplemented
    losses = torch.ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, 0,
                            zero_infinity)
    lengths = torch.tensor(target_lengths, dtype=losses.dtype, device=losses.device)
    return (losses / lengths.clamp_min(1)).mean()


def _functional_ctc_loss(log_probs: Any, targets: Any, input_lengths: Any,
                         target_lengths: Any, blank: int = 0, reduction: str = "mean",
                         zero_infinity: bool = False) -> Any:
    """``F.ctc_loss`` (the reduction a name, mean by default): :func:`_ctc_loss`."""
    if reduction != "mean":
        return NotImplemented
    return _ctc_loss(log_probs, targets, input_lengths, target_lengths, blank, 1,
                     zero_infinity)


CHECKED_CALLS: dict[Any, Callable[..., Any]] = {
    F.one_hot: _one_hot,
}
"""Torch function -> its version that records eager's value check."""

def _cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Any:
    """``cosine_similarity`` computed as eager's C++ computes it (broadcast, the norms
    along ``dim`` kept, each input over its norm, multiplied, summed), each norm clamped
    out of place with eager's gradient (see the module docstring)."""
    if not (isinstance(x1, torch.Tensor) and isinstance(x2, torch.Tensor)
            and (x1.requires_grad or x2.requires_grad) and torch.is_grad_enabled()
            and is_fake(x1) and x1.dtype.is_floating_point and x1.dtype == x2.dtype):
        return NotImplemented  # (no write under no_grad to stop at, or eager's errors)
    a, b = torch.broadcast_tensors(x1, x2)  # type: ignore[no-untyped-call]
    norms = [torch.linalg.vector_norm(t, 2, dim=dim, keepdim=True) for t in (a, b)]
    n1, n2 = (n.detach().clamp_min(eps) + (n - n.detach()) for n in norms)
    return ((a / n1) * (b / n2)).sum(dim)


REBUILT_CALLS: dict[Any, Callable[..., Any]] = {
    torch.ctc_loss: _ctc_loss,
    F.ctc_loss: _functional_ctc_loss,
    torch.cosine_similarity: _cosine_similarity,
}
"""Torch function -> its version that records what eager's C++ does in a way a
recording can hold: data it builds, as constants; a write under ``no_grad``, out of
place (``integration_tests/test_ctc_loss.py`` and ``test_cosine_similarity.py`` cover
each)."""


def call_checked(fn: Any, args: Any, kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, through its checked version when it has one that applies."""
    try:
        checked = CHECKED_CALLS.get(fn) or REBUILT_CALLS.get(fn)
    except TypeError:  # unhashable
        checked = None
    return call_through(checked, fn, args, kwargs)


def call_through(rule: Callable[..., Any] | None, fn: Any, args: Any, kwargs: Any) -> Any:
    """``rule(*args, **kwargs)`` when there is a rule and it applies (not
    NotImplemented), else ``fn(*args, **kwargs)``: how every table of calls a recording
    makes another way is applied."""
    if rule is not None:
        result = rule(*args, **kwargs)
        if result is not NotImplemented:
            return result
    return fn(*args, **kwargs)


class CheckedCalls(TorchFunctionMode):
    """Runs the functions of :data:`CHECKED_CALLS` and :data:`REBUILT_CALLS` through
    their versions there."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        return call_checked(func, args, kwargs or {})
