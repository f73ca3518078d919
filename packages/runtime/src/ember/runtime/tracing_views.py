"""Symbolic inputs that are views into a larger tensor (one head sliced out of a fused
qkv projection, a tensor not starting at its storage's start).

Torch would give the strides and storage offset of such an input symbols of their own,
which the IR cannot bind (its binding rule: a symbol is bound by a plain *size*). Instead
the fake gets symbolic sizes and strides that are expressions of those sizes where the
example allows it, else the example's ints; its storage offset stays the example's int.
The ``symbolic_tensor`` guard checks every stride and the offset at each call, so the
choice is never wrong: it decides only which calls share the graph.

Walking the dimensions from the smallest stride out, a stride that equals the previous
dimension's ``stride * size`` is that expression (dense so far); any other stride (a
gap, as between the rows of one head of ``[B, T, 3*D]``) is the example's int, and the
walk goes on from it. One head of ``qkv[..., :64]`` with ``qkv: [s0, s1, 192]`` gets
strides ``(192*s1, 192, 1)``: a batch or sequence change is no recompile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from ember.runtime._torch import DimDynamic, FakeTensorMode, input_source

__all__ = ["strides_derivable", "view_fake", "view_strides"]


def view_strides(sizes: Sequence[Any], example: torch.Tensor) -> list[Any]:
    """The strides of a fake of the view ``example`` whose sizes are ``sizes`` (ints or
    SymInts): expressions of the sizes where ``example``'s strides follow its sizes
    (above), else ``example``'s ints. Dims of size 1 and stride 0 keep their int."""
    shape, stride = tuple(example.shape), tuple(example.stride())
    result: list[Any] = list(stride)
    order = sorted(range(len(shape)), key=lambda d: (stride[d], shape[d]))
    next_value: int | None = None  # stride * size of the previous dim, as an int ...
    next_expr: Any = None          # ... and as an expression of the sizes
    for d in order:
        if shape[d] == 1 or stride[d] == 0:
            continue
        if stride[d] == next_value:
            result[d] = next_expr
        next_value, next_expr = stride[d] * shape[d], result[d] * sizes[d]
    return result


def strides_derivable(example: torch.Tensor) -> bool:
    """Whether torch's ``from_tensor`` makes every stride of a symbolic fake of
    ``example`` from its sizes, with no stride symbol of its own (which the IR could not
    bind). Its rule, walking the dims from the smallest stride out (a later dim first
    among equal strides): a stride of 0 or 1 is that constant, unless it also equals the
    next dim's stride times size; any other stride must be the stride times the size of
    a dim already walked. Dims of size 1 count too: their strides take part."""
    shape, stride = tuple(example.shape), tuple(example.stride())
    walked: set[int] = set()
    for d in sorted(range(len(shape)), key=lambda d: (stride[d], -d)):
        follows_next = d + 1 < len(shape) and stride[d] == shape[d + 1] * stride[d + 1]
        if not (stride[d] in (0, 1) and not follows_next) and stride[d] not in walked:
            return False
        walked.add(shape[d] * stride[d])
    return True


def view_fake(fake_mode: FakeTensorMode, tensor: torch.Tensor, name: str,
              dynamic: Sequence[bool], constraints: Sequence[Any],
              shared: Callable[[int], torch.SymInt | None] = lambda dim: None
              ) -> torch.Tensor:
    """A fake of the view ``tensor``: dims flagged in ``dynamic`` are duck-sized symbols
    under ``constraints`` (one per dim, torch's ``StrictMinMaxConstraint`` or None):
    ``shared(dim)``, the symbol an earlier input's dim of the same size and range got,
    else a new one; strides from :func:`view_strides`, the storage offset ``tensor``'s
    int."""
    env = fake_mode.shape_env
    assert env is not None
    sizes: list[Any] = []
    for dim, (size, is_dynamic) in enumerate(zip(tensor.shape, dynamic)):
        if not is_dynamic:
            sizes.append(int(size))
            continue
        known = shared(dim)
        if known is not None:
            sizes.append(known)
            continue
        source = input_source(f"{name}.size({dim})")
        expr = env.create_symbol(int(size), source=source, dynamic_dim=DimDynamic.DUCK,
                                 constraint_dim=constraints[dim])
        sizes.append(env.create_symintnode(expr, hint=int(size), source=source))
    strides = view_strides(sizes, tensor)
    offset = int(tensor.storage_offset())
    # the storage the view needs: its last element's position plus one
    needed: Any = offset + 1
    for size, stride in zip(sizes, strides):
        needed = needed + (size - 1) * stride
    with fake_mode:
        base = torch.empty(needed, dtype=tensor.dtype, device=tensor.device)
        fake = base.as_strided(sizes, strides, offset)
        if tensor.requires_grad:
            fake.requires_grad_(True)
    return fake
