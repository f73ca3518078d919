"""Results made under ``torch.inference_mode()`` are inference tensors, as in eager.

Eagerly, a tensor made in inference mode is an inference tensor (``t.is_inference()``):
an in-place write to it outside inference mode raises, and autograd refuses to save it
for backward. Both capture modes run the code on fake tensors under the real inference
mode (the strict capture enters a ``with torch.inference_mode():`` block for real while
capturing, ``bytecode/inference_blocks.py``; the trace runs the code itself), so a fake
result made in it is an inference tensor, and a view made there of a normal tensor is
not, as eagerly.

A graph runs under the caller's mode (guarded: ``torch.is_inference_mode_enabled()``).
Called in inference mode, its results are inference tensors already. Otherwise the
results whose fake is an inference tensor (:func:`inference_outputs`, found at capture)
are handed back as inference tensors: a tensor made in inference mode over the same
memory, with the same sizes, strides and offset (:func:`as_inference`; no copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["as_inference", "inference_outputs"]


def inference_outputs(outputs: Sequence[Any], graph_in_inference: bool) -> tuple[int, ...]:
    """The positions of the graph outputs (fake tensors) that the code made as inference
    tensors; none when the graph runs in inference mode (``graph_in_inference``), where
    every result it makes is one."""
    if graph_in_inference:
        return ()
    return tuple(i for i, t in enumerate(outputs)
                 if isinstance(t, torch.Tensor) and t.is_inference())


def as_inference(outputs: list[Any], positions: tuple[int, ...]) -> list[Any]:
    """``outputs`` (a graph's results, changed in place) with those at ``positions``
    made inference tensors over their own memory; returns ``outputs``."""
    with torch.inference_mode():
        for i in positions:
            t = outputs[i]
            if type(t) is torch.Tensor and t.layout == torch.strided and not t.is_inference():
                alias = torch.empty(0, dtype=t.dtype, device=t.device)
                outputs[i] = alias.set_(t.untyped_storage(), t.storage_offset(), t.size(),
                                        t.stride())
    return outputs
