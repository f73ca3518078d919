"""Masks of the attention rewrite known at compile time: a mask computed from constants
only (``arange``, comparisons, ``full``, ``tril`` as the aot stage decomposes it) is
evaluated here, so that a causal one becomes SDPA's ``is_causal=True``."""

from __future__ import annotations

import math
from typing import Any

import torch
from ember.runtime.ir import Argument, Node, Program, TensorMeta, ValueRef, is_pure, resolve_op

MAX_EVALUATED_NUMEL = 1 << 22
"""Evaluate masks (and every value on the way) up to this many elements."""


class ConstantEvaluator:
    """Evaluates values of one graph that depend on constants only, on the CPU."""

    def __init__(self, program: Program, nodes: dict[str, Node]) -> None:
        self.program = program
        self.nodes = nodes
        self._values: dict[str, Any] = {}
        self._unknown: set[str] = set()

    def value(self, ref: ValueRef) -> torch.Tensor | None:
        """The value of ``ref`` if it depends on no graph input, else None."""
        result = self._node_value(ref.node)
        if result is not None and ref.index is not None:
            result = result[ref.index] if isinstance(result, (tuple, list)) else None
        return result if isinstance(result, torch.Tensor) else None

    def _node_value(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        if name in self._unknown:
            return None
        value = self._compute(self.nodes[name])
        if value is None:
            self._unknown.add(name)
        else:
            self._values[name] = value
        return value

    def _compute(self, node: Node) -> Any:
        if node.op in ("constant", "get_attr"):
            tensor = self.program.tensors.get(node.target)
            return tensor.detach().cpu() if tensor is not None else None
        if node.op != "call" or not is_pure(node.target) or not _small(node.meta):
            return None
        args = [self._argument(a) for a in node.args]
        kwargs = {k: self._argument(v) for k, v in node.kwargs.items()}
        if any(a is _UNKNOWN for a in (*args, *kwargs.values())):
            return None
        return resolve_op(node.target)(*args, **kwargs)

    def _argument(self, a: Argument) -> Any:
        if isinstance(a, ValueRef):
            value = self.value(a)
            return _UNKNOWN if value is None else value
        if isinstance(a, torch.device):
            return torch.device("cpu")  # NOTE: values only; the device does not change them
        if isinstance(a, tuple):
            items = [self._argument(x) for x in a]
            return _UNKNOWN if any(x is _UNKNOWN for x in items) else items
        return a


_UNKNOWN = object()


def _small(meta: object) -> bool:
    metas = meta if isinstance(meta, tuple) else (meta,)
    return all(isinstance(m, TensorMeta) and m.is_static and m.numel <= MAX_EVALUATED_NUMEL
               for m in metas)


def causal_pattern(sizes: tuple[int, ...]) -> torch.Tensor:
    """SDPA's ``is_causal`` mask over scores of ``sizes`` (``[..., L, S]``): True on and
    below the diagonal (top-left aligned)."""
    rows, cols = sizes[-2], sizes[-1]
    return torch.ones(rows, cols, dtype=torch.bool).tril().expand(sizes)


def keep_is_causal(keep: torch.Tensor, sizes: tuple[int, ...]) -> bool:
    """Whether the boolean keep-mask ``keep`` (broadcast to ``sizes``) is causal."""
    try:
        full = torch.broadcast_to(keep, sizes)
    except RuntimeError:
        return False
    return bool(torch.equal(full, causal_pattern(sizes)))


def additive_is_causal(mask: torch.Tensor, sizes: tuple[int, ...], dtype: torch.dtype) -> bool:
    """Whether the additive float ``mask`` (broadcast to ``sizes``) is 0 on and below the
    diagonal and ``-inf`` or at most ``finfo(dtype).min`` above it."""
    try:
        full = torch.broadcast_to(mask.to(dtype), sizes)
    except RuntimeError:
        return False
    causal = causal_pattern(sizes)
    kept, dropped = full[causal], full[~causal]
    return bool((kept == 0).all()) and bool((dropped <= torch.finfo(dtype).min).all())


def fills_like_minus_infinity(fill: float, dtype: torch.dtype) -> bool:
    """Whether ``fill`` (rounded to ``dtype``) is ``-inf``, or at most ``finfo(dtype).min``
    with a unit in the last place of at least 2**64 (float32, bfloat16, float64; not
    float16, whose ``finfo.min`` has one of 32): then ``x + fill == fill`` for every
    score ``x`` below 2**63 in magnitude, so adding the fill equals writing it, also in
    a row where every position is masked."""
    rounded = float(torch.tensor(fill, dtype=torch.float64).to(dtype).item())
    if rounded == -math.inf:
        return True
    info = torch.finfo(dtype)
    return rounded <= float(info.min) and info.eps * abs(rounded) >= 2.0 ** 64
