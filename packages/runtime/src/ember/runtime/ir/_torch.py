"""The private torch APIs the IR layer uses, in one place.

``ember.runtime.ir`` imports nothing from the runtime above it, so it cannot share
``ember.runtime._torch`` (which re-exports these names for the rest of the runtime). A
torch upgrade that moves one of these touches only this file.
"""

from __future__ import annotations

import functools
from typing import Any, TypeGuard

import torch

OpOverload = torch._ops.OpOverload
"""One overload of an operator (``torch.ops.aten.add.Tensor``)."""


def fake_tensor_mode() -> Any:
    """A fake tensor mode (no data) that also takes real tensors (a program's stored
    constants): ``metadata_checks`` runs a loaded program's operators in it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)

__all__ = ["OpOverload", "fake_tensor_mode", "is_dispatcher_op", "is_op_overload",
           "op_schema", "overload_name"]


def is_op_overload(value: object) -> TypeGuard[OpOverload]:
    """True for one overload of a registered operator (not a packet, not a function)."""
    return isinstance(value, OpOverload)


def op_schema(op: OpOverload) -> torch.FunctionSchema:
    """The schema of ``op``: its arguments, returns and their alias annotations."""
    return op._schema


def overload_name(op: OpOverload) -> str:
    """The overload part of ``op``'s name (``Tensor`` for ``aten::add.Tensor``;
    ``default`` for the unnamed overload)."""
    return op._overloadname or "default"


@functools.cache
def _dispatcher_ops() -> frozenset[str]:
    return frozenset(torch._C._dispatch_get_all_op_names())


def is_dispatcher_op(qualified: str) -> bool:
    """Whether ``ns::name.overload`` (``.default`` for the unnamed one) is an operator of
    torch's dispatcher, not a TorchScript builtin that ``torch.ops`` also resolves
    (``aten::save``, ``aten::manual_seed``, ``aten::set_grad_enabled``: Python-level
    effects on files and the process's state)."""
    name, _, overload = qualified.partition(".")
    ops = _dispatcher_ops()
    if overload in ("", "default"):
        return name in ops
    return f"{name}.{overload}" in ops
