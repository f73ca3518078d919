"""Resolving qualified operator names (``aten::add.Tensor``) through ``torch.ops``."""

from __future__ import annotations

import functools
import importlib

import torch

from ember.runtime.ir._torch import OpOverload, is_op_overload, op_schema, overload_name
from ember.runtime.ir.errors import IRFormatError


def qualified_name(op: OpOverload) -> str:
    """``torch.ops.aten.add.Tensor`` -> ``aten::add.Tensor``."""
    schema_name = op_schema(op).name  # "aten::add"
    return f"{schema_name}.{overload_name(op)}"


EMBER_OPERATORS: dict[str, str] = {"triton_kernel": "ember.runtime.user_kernels"}
"""Operators of the ``ember`` namespace -> the module that registers it."""


BUILTIN_NAMESPACES = ("aten", "prims", "ember")
"""Namespaces whose operators torch or Ember register on import."""


def unknown_operator_message(target: str) -> str:
    """Why ``target`` (``ns::op.overload``) does not resolve: for a custom operator's
    namespace, which registration is missing and how to get it into this process."""
    namespace = target.partition("::")[0]
    if namespace in BUILTIN_NAMESPACES:
        return f"unknown operator {target!r}: not registered in torch.ops"
    return (f"unknown operator {target!r}: the custom operator namespace {namespace!r} "
            "has no such operator in this process. Import the module that registers it "
            "(torch.library.custom_op / torch.library.Library, or torch.ops.load_library "
            "of the C++ extension that declares TORCH_LIBRARY("
            f"{namespace}, ...)) before loading or running the program")


@functools.lru_cache(maxsize=None)
def resolve_op(target: str) -> OpOverload:
    """``aten::add.Tensor`` -> ``torch.ops.aten.add.Tensor``.

    Raises:
        IRFormatError: if the name is malformed or no such operator is registered.
    """
    namespace, sep, rest = target.partition("::")
    if not sep or not namespace or not rest:
        raise IRFormatError(f"malformed operator name {target!r}: expected 'ns::op.overload'")
    name, dot, overload = rest.partition(".")
    if not dot:
        overload = "default"
    if namespace == "ember":  # Ember's own operators register when first named
        importlib.import_module(EMBER_OPERATORS.get(name, "ember.runtime"))
    try:
        packet = getattr(getattr(torch.ops, namespace), name)
        op = getattr(packet, overload)
    except (AttributeError, RuntimeError) as e:
        raise IRFormatError(unknown_operator_message(target)) from e
    if not is_op_overload(op):
        raise IRFormatError(f"unknown operator {target!r}: not an operator overload")
    return op
