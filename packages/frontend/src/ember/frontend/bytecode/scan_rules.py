"""``associative_scan`` (torch's higher-order scan) in strict capture: inlined as a scan.

torch's ``associative_scan(combine_fn, xs, dim, reverse=False, combine_mode=...)`` is a
higher-order op, which Ember's graphs do not hold: the generic call broke the graph and
ran eagerly (transformers' Mamba calls it in every layer when it sees a compiler). Its
result is defined by ``combine_fn`` alone: the inclusive scan
``out[i] = xs[0] (+) xs[1] (+) ... (+) xs[i]`` along ``dim`` for an associative
``(+)``, which any evaluation order computes. So the rule interprets :func:`_scan`, a
log-step scan written with ordinary tensor ops: at step ``s = 1, 2, 4, ...`` every
position ``i >= s`` becomes ``combine(out[i - s], out[i])`` (the left operand is the
earlier one, so a non-commutative ``(+)`` is kept in order), ``ceil(log2(n))`` calls of
``torch.vmap(combine_fn)`` over the positions, as the generic mode batches them. The
combine function is interpreted like the user's other code (guarded, its ops recorded),
and aot differentiates the ops as any others.

Handled: ``xs`` a tensor or a plain tuple/list of tensors; ``combine_mode="generic"``,
or ``"pointwise"`` with every tensor on CUDA/XPU (on the CPU eager raises). Anything
else is recorded as before: a graph break naming the higher-order op.
"""

from __future__ import annotations

from typing import Any

import torch
from ember.frontend._torch import associative_scan_function
from ember.frontend.bytecode.builtin_rules import BUILTIN_RULES
from ember.frontend.bytecode.frame import Frame

_PARAMETERS = ("combine_fn", "xs", "dim", "reverse", "combine_mode")
_DEFAULTS: dict[str, Any] = {"reverse": False, "combine_mode": "pointwise"}


def _bind(args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The call's arguments by parameter name, None where they do not bind."""
    if len(args) > len(_PARAMETERS) or any(k not in _PARAMETERS for k in kwargs):
        return None
    bound = dict(zip(_PARAMETERS, args))
    if any(k in bound for k in kwargs):
        return None
    bound = {**_DEFAULTS, **bound, **kwargs}
    return bound if all(p in bound for p in _PARAMETERS) else None


def _leaves(xs: Any) -> list[torch.Tensor] | None:
    if isinstance(xs, torch.Tensor):
        return [xs]
    if type(xs) in (tuple, list) and xs and all(isinstance(x, torch.Tensor) for x in xs):
        return list(xs)
    return None


def _scannable(bound: dict[str, Any]) -> bool:
    """Whether :func:`_scan` computes what eager's call returns (eager's argument errors
    are left to eager, through the break)."""
    leaves, dim, mode = _leaves(bound["xs"]), bound["dim"], bound["combine_mode"]
    if leaves is None or not callable(bound["combine_fn"]):
        return False
    if type(dim) is not int or type(bound["reverse"]) is not bool:
        return False
    if mode != "generic" and not (mode == "pointwise" and all(
            x.device.type in ("cuda", "xpu") for x in leaves)):
        return False
    ndim = leaves[0].dim()
    return all(x.dim() == ndim for x in leaves) and -ndim <= dim < ndim


def _pack(kind: str, items: list[Any]) -> Any:
    """``items`` in the structure of ``xs`` (``kind``: ``"tensor"``, ``"tuple"``, ``"list"``)."""
    if kind == "tensor":
        return items[0]
    return tuple(items) if kind == "tuple" else list(items)


def _scan(combine_fn: Any, leaves: list[torch.Tensor], kind: str, dim: int,
          reverse: bool) -> Any:
    """The inclusive scan of ``leaves`` along ``dim`` by ``combine_fn`` (interpreted by the
    capture: see the module docstring)."""
    combine = torch.vmap(combine_fn, in_dims=0, out_dims=0)
    xs = [torch.movedim(x, dim, 0) for x in leaves]
    if reverse:
        xs = [torch.flip(x, [0]) for x in xs]
    n = xs[0].shape[0]
    if n == 0:
        raise ValueError("associative_scan: the scanned dimension has size 0")
    step = 1
    while step < n:
        left = _pack(kind, [x[: n - step] for x in xs])
        right = _pack(kind, [x[step:] for x in xs])
        combined = combine(left, right)
        parts = [combined] if isinstance(combined, torch.Tensor) else list(combined)
        xs = [torch.cat([x[:step], part], 0) for x, part in zip(xs, parts)]
        step *= 2
    if reverse:
        xs = [torch.flip(x, [0]) for x in xs]
    return _pack(kind, [torch.movedim(x, 0, dim) for x in xs])


def _associative_scan_rule(h: Any, interp: Any, frame: Frame, args: list[Any],
                           kwargs: dict[str, Any]) -> Any:
    bound = _bind(args, kwargs)
    if bound is None or not _scannable(bound):
        return h.record(interp, _ASSOCIATIVE_SCAN, args, kwargs)  # the break, named
    xs = bound["xs"]
    kind = "tensor" if isinstance(xs, torch.Tensor) else type(xs).__name__
    leaves = _leaves(xs)
    return h.inline(interp, frame, _scan, [bound["combine_fn"], leaves, kind,
                                           bound["dim"], bound["reverse"]], {}, None)


_ASSOCIATIVE_SCAN = associative_scan_function()
if _ASSOCIATIVE_SCAN is not None:
    BUILTIN_RULES[_ASSOCIATIVE_SCAN] = _associative_scan_rule
