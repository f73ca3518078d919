"""The helpers a generated wrapper may call, and the namespace it runs in.

A wrapper is plain Python executed with :func:`exec` in a fresh namespace holding only
``torch``, ``aten`` (``torch.ops.aten``), ``ops`` (``torch.ops``), ``empty_strided``,
the helpers below, ``constants`` and the artifact's kernels by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


def view(t: torch.Tensor, sizes: Sequence[int], strides: Sequence[int],
         offset: int) -> torch.Tensor:
    """``t`` viewed with ``sizes``/``strides``, ``offset`` elements past its start."""
    return t.as_strided(tuple(sizes), tuple(strides), t.storage_offset() + offset)


def layout(t: Any, sizes: Sequence[int], strides: Sequence[int]) -> Any:
    """``t`` if it has ``strides``, else a copy laid out with them (extern results
    whose eager strides differ from the traced ones)."""
    if not isinstance(t, torch.Tensor):
        return t
    if tuple(t.shape) == tuple(sizes) and _same_strides(t, sizes, strides):
        return t
    out = torch.empty_strided(tuple(sizes), tuple(strides), dtype=t.dtype, device=t.device)
    out.copy_(t.reshape(tuple(sizes)) if tuple(t.shape) != tuple(sizes) else t)
    return out


def _same_strides(t: torch.Tensor, sizes: Sequence[int], strides: Sequence[int]) -> bool:
    return all(s == 1 or a == b for s, a, b in zip(sizes, t.stride(), strides))


def check_input(t: Any, name: str, dtype: torch.dtype, sizes: Sequence[int],
                strides: Sequence[int]) -> torch.Tensor:
    """The input ``t`` in the layout the kernels were generated for.

    Raises:
        TypeError: ``t`` is not a tensor, or its dtype or shape differ from the traced
            ones (the artifact was compiled for another signature).
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"compiled graph input {name}: expected a tensor, got "
                        f"{type(t).__name__}")
    if t.dtype != dtype or tuple(t.shape) != tuple(sizes):
        raise TypeError(
            f"compiled graph input {name}: expected {dtype} {list(sizes)}, got "
            f"{t.dtype} {list(t.shape)}")
    result: torch.Tensor = layout(t, sizes, strides)
    return result


def make_namespace(kernels: dict[str, Callable[..., None]],
                   constants: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The globals a wrapper runs with."""
    ns: dict[str, Any] = {
        "torch": torch, "aten": torch.ops.aten, "ops": torch.ops,
        "empty_strided": torch.empty_strided, "_view": view, "_layout": layout,
        "_check_input": check_input, "constants": constants,
    }
    for name, k in kernels.items():
        if name in ns or not name.isidentifier():
            raise ValueError(f"bad kernel name {name!r} in compiled artifact")
        ns[name] = k
    return ns
