"""``x.is_inference()`` and ``torch.is_inference(x)`` during capture.

The fake tensor of a graph input (an argument, a parameter, a buffer) is made once,
from the tensor of the call that captured; later calls pass other tensors. So on a
graph input the flag is read from the real tensor, through the input's source, and
guarded (``x.is_inference() is True`` under ``EMBER_LOGS=guards``): a call with a
tensor whose flag differs captures again. On a tensor the captured code made, the
fake's own flag is eager's: the capture runs in inference mode where the code does
(:mod:`.inference_blocks`; the mode at the capture's start is guarded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from ember.frontend._torch import is_fake
from ember.frontend.bytecode.frame import Frame
from ember.frontend.guard_model import CodeWriter, Source

__all__ = ["INFERENCE_FLAG_RULES", "TENSOR_METHOD_RULES", "InferenceFlagSource",
           "is_inference_rule"]


@dataclass(frozen=True)
class InferenceFlagSource(Source):
    """Whether the tensor at ``base`` is an inference tensor."""

    base: Source

    def expr(self) -> str:
        return f"{self.base.expr()}.is_inference()"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return self.base.fetch(state, ctx).is_inference()

    def fetch_code(self, w: CodeWriter) -> str:
        return f"{w.ref(self.base)}.is_inference()"


def is_inference_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                      kwargs: dict[str, Any]) -> Any:
    """``torch.is_inference(t)``, ``Tensor.is_inference(t)``, ``t.is_inference()``."""
    t: Any = args[0] if args else next(iter(kwargs.values()), None)
    if len(args) + len(kwargs) != 1 or not is_fake(t):
        return h.direct(interp, torch.is_inference, args, kwargs)  # torch's own error
    cap = interp.capture
    source = cap.is_input_fake(t)
    real = cap.real_input(t) if source is not None else None
    if real is None:
        return t.is_inference()
    flag = real.is_inference()
    cap.guard("equals", InferenceFlagSource(source), flag)
    return flag


INFERENCE_FLAG_RULES = {torch.is_inference: is_inference_rule,
                        torch.Tensor.is_inference: is_inference_rule}
"""The functions of the flag, for ``BUILTIN_RULES``."""

TENSOR_METHOD_RULES = {"is_inference": is_inference_rule}
"""Methods bound to a tensor of the graph, by name: the rule gets the tensor first."""
