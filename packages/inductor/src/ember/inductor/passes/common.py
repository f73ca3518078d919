"""Facts about ops the graph passes need: purity and determinism."""

from __future__ import annotations

import functools

import torch
from ember.inductor._torch import is_mutable
from ember.runtime.ir import IRFormatError, resolve_op

# Ops kept even when their result is unused.
SIDE_EFFECT_PREFIXES = ("aten::_assert", "aten::sym_constrain", "aten::_print")


@functools.cache
def is_pure(target: str) -> bool:
    """Whether a call to ``target`` may be removed or merged: not mutating, not random,
    no side effects."""
    if target.startswith(SIDE_EFFECT_PREFIXES):
        return False
    try:
        op = resolve_op(target)
    except IRFormatError:
        return False
    if is_mutable(op):
        return False
    return torch.Tag.nondeterministic_seeded not in op.tags
