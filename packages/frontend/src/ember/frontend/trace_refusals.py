"""Calls the trace capture refuses while it runs the user's function on fake tensors.

The trace capture (``capture="trace"``) runs the function once on fake tensors and
records its tensor ops as one forward graph. A backward pass started inside it
(``loss.backward()``, ``torch.autograd.backward`` / ``grad``) would run once, at capture
time, on the fake tensors: it left a fake tensor as each parameter's ``.grad`` after the
first call and no gradient at all on later ones, silently. :class:`RefuseAutograd`, a
torch function mode active during the trace, stops such a call before it runs, with an
error the trace names the user's line in (``trace.CaptureError``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode


class AutogradInTrace(RuntimeError):
    """A backward pass was started inside the traced function."""


def _refused() -> dict[Any, str]:
    return {
        torch.Tensor.backward: "Tensor.backward()",
        torch.autograd.backward: "torch.autograd.backward()",
        torch.autograd.grad: "torch.autograd.grad()",
    }


class RefuseAutograd(TorchFunctionMode):
    """Raise :class:`AutogradInTrace` at a backward pass started under it; every other
    call runs as it would."""

    def __init__(self) -> None:
        super().__init__()
        self._refused = _refused()

    def __torch_function__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        name = self._refused.get(func)
        if name is not None:
            raise AutogradInTrace(
                f"{name} inside the traced function: the trace capture records the "
                "forward only (the backward would run once, at capture time, on fake "
                "tensors)\n  hint: call it outside the compiled function, or use the "
                "strict capture (the default), which runs it at a graph break")
        return func(*args, **(kwargs or {}))


__all__ = ["AutogradInTrace", "RefuseAutograd"]
