"""Writes autograd does not see: the new value of a tensor written through a view that
does not track gradients.

In eager torch, writing through ``x.detach()`` (or through a view taken under
``torch.no_grad()``) changes ``x``'s data but not its autograd history: later reads of
``x`` take their gradient to ``x`` itself, as if the write had not happened.
``nn.Embedding(max_norm=...)`` renormalizes its weight this way
(``embedding_renorm_(weight.detach(), ...)``), as do in-place initializers and
clipping.

Functionalization makes the write a value computed from the detached view, which has no
autograd link to ``x`` at all: every later read lost its gradient. The base's new value
is therefore wrapped as ``ember_aot::hidden_write(old, new)``: the value of ``new``,
with the gradient of ``old`` (identity to ``old``, none to ``new``). It exists only
inside the aot stage, between functionalization and the re-traces, which record it as a
``clone`` of ``new`` whose backward passes the gradient to ``old``
(:func:`record_hidden_write`); no program leaving the stage holds it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from ember.aot.builder import GraphBuilder
from ember.runtime.ir import TensorMeta, ValueRef
from ember.runtime.ir.graph import Meta

#: the marker's operator name in the IR
HIDDEN_WRITE = "ember_aot::hidden_write.default"
#: the view whose writes autograd keeps to itself
DETACH = "aten::detach.default"


@torch.library.custom_op("ember_aot::hidden_write", mutates_args=())
def hidden_write(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """The value of ``new``; its gradient goes to ``old`` (module doc)."""
    return new.clone()


@hidden_write.register_fake
def _hidden_write_fake(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(new)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    return grad, None


hidden_write.register_autograd(_backward)


class _HiddenWrite(torch.autograd.Function):
    """``hidden_write`` as the re-traces record it: a ``clone`` of ``new``, whose
    gradient is the identity to ``old``."""

    @staticmethod
    def forward(ctx: Any, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
        result: torch.Tensor = torch.ops.aten.clone.default(new)
        return result

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def hidden_write_call(b: GraphBuilder, old: ValueRef, new: ValueRef) -> ValueRef:
    """``new`` as the new value of ``old`` written where autograd does not see it: the
    marker, unless neither has autograd history (then ``new`` itself)."""
    old_meta, new_meta = b.meta_of(old), b.meta_of(new)
    if not (isinstance(old_meta, TensorMeta) and isinstance(new_meta, TensorMeta)) or not (
            old_meta.requires_grad or new_meta.requires_grad):
        return new
    meta = dataclasses.replace(new_meta, requires_grad=old_meta.requires_grad)
    return b.call(HIDDEN_WRITE, (old, new), meta=meta)


def without_grad_where_captured(inferred: Meta, captured: Meta) -> Meta:
    """``inferred``, the metadata of an in-place op's functional variant (which requires
    grad where an argument does), with ``requires_grad`` off when the capture saw the
    in-place op's result without it: the op ran under ``torch.no_grad()``
    (``with torch.no_grad(): buf.add_(w)`` from a graph Dynamo hands over), so the value
    it wrote is data, not history, and the re-trace detaches it."""
    if not isinstance(captured, TensorMeta) or captured.requires_grad:
        return inferred
    if isinstance(inferred, TensorMeta):
        return dataclasses.replace(inferred, requires_grad=False)
    if isinstance(inferred, tuple):
        return tuple(dataclasses.replace(m, requires_grad=False)
                     if isinstance(m, TensorMeta) else m for m in inferred)
    return inferred


def record_hidden_write(old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """Run the marker while a re-trace records: ``clone(new)``, differentiable to
    ``old``, when ``old`` requires grad; else ``new`` without its history (an inference
    program records nothing for it)."""
    if old.requires_grad and torch.is_grad_enabled():
        result = _HiddenWrite.apply(old, new.detach())  # type: ignore[no-untyped-call]
        assert isinstance(result, torch.Tensor)
        return result
    return new.detach() if new.requires_grad else new


__all__ = ["DETACH", "HIDDEN_WRITE", "hidden_write", "hidden_write_call",
           "record_hidden_write", "without_grad_where_captured"]
