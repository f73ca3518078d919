"""Scalar arguments that hold a tensor's value, recorded as tensor arguments.

Passing a 0-dim tensor where an op takes a ``Scalar`` (``param.add_(grad, alpha=-lr)``
with ``lr`` a tensor, as ``torch.optim.SGD``, ``RMSprop``, ``Adagrad`` and ``Adadelta`` do
with ``lr=torch.tensor(...)``) makes torch's argument parser read the tensor's value
(``aten::_local_scalar_dense``). On a fake tensor that value is a data-dependent
``SymFloat``, which the IR cannot hold, so the call could not be recorded. A
:class:`TensorScalars` remembers which tensor each such value was read from, and
:meth:`TensorScalars.rewrite` records the op as tensor ops that read that tensor instead
(``add_(mul(grad, t))``): the graph reads the tensor's current value at every call, as
eager reads it, with no recompile when a scheduler changes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from ember.runtime.tracing_size_floats import SizeFloats, named_arguments

__all__ = ["TensorScalars"]

_aten = torch.ops.aten
Args = dict[str, Any]


def _scaled_other(op: Any) -> Callable[[Args], Any]:
    """The rule of ``op(self, other, alpha=t)`` (add, sub and their in-place forms):
    ``op(self, other * t)``."""
    return lambda a: op(a["self"], _aten.mul.Tensor(a["other"], a["alpha"]))


def _addcdiv_term(a: Args) -> Any:
    return _aten.mul.Tensor(_aten.div.Tensor(a["tensor1"], a["tensor2"]), a["value"])


def _addcmul_term(a: Args) -> Any:
    return _aten.mul.Tensor(_aten.mul.Tensor(a["tensor1"], a["tensor2"]), a["value"])


def _full_like(a: Args) -> Any:
    like = _aten.empty_like.default(
        a["self"], dtype=a["dtype"], layout=a["layout"], device=a["device"],
        pin_memory=a["pin_memory"], memory_format=a["memory_format"])
    return _aten.fill_.Tensor(like, a["fill_value"])


# op -> how to compute it when (some of) its Scalar arguments are 0-dim tensors; each
# rule gets the op's arguments by name, the Scalars read from tensors replaced by them.
# Only ops whose Scalar argument has no Tensor overload that Python's argument parser
# would pick instead (mul, div, lerp, fill_ take the tensor as it is)
_RULES: dict[Any, Callable[[Args], Any]] = {
    **{op: _scaled_other(op) for op in (_aten.add.Tensor, _aten.add_.Tensor,
                                        _aten.sub.Tensor, _aten.sub_.Tensor)},
    _aten.addcdiv.default: lambda a: _aten.add.Tensor(a["self"], _addcdiv_term(a)),
    _aten.addcdiv_.default: lambda a: _aten.add_.Tensor(a["self"], _addcdiv_term(a)),
    _aten.addcmul.default: lambda a: _aten.add.Tensor(a["self"], _addcmul_term(a)),
    _aten.addcmul_.default: lambda a: _aten.add_.Tensor(a["self"], _addcmul_term(a)),
    _aten.full_like.default: _full_like,
}

# the Scalar arguments that _RULES accept as tensors; any other one keeps its number
_TENSOR_SCALARS = {"alpha", "value", "fill_value"}


class TensorScalars:
    """The tensors that data-dependent float values were read from, by the value's
    symbol, and the rewrite of an op that takes such values as Scalars."""

    def __init__(self, size_floats: SizeFloats | None = None) -> None:
        self._sources: dict[Any, torch.Tensor] = {}
        self._size_floats = size_floats  # rewrites the ops taking floats made from sizes

    def note(self, func: Any, args: tuple[Any, ...] | list[Any], result: Any) -> bool:
        """Remember the tensor of ``_local_scalar_dense(t)`` giving a ``SymFloat``; True
        for such a call, which is then not recorded: the IR cannot hold its value, an op
        reading it is rewritten to read the tensor, any other use of it fails as before
        (an op without a rule: the ``RecordingError`` of a symbolic argument)."""
        if (func is _aten._local_scalar_dense.default and isinstance(result, torch.SymFloat)
                and args and isinstance(args[0], torch.Tensor)):
            self._sources[result.node.expr] = args[0]
            return True
        return False

    def rewrite(self, func: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Callable[[], Any] | None:
        """A function computing ``func(*args, **kwargs)`` with tensor ops that read the
        tensors the ``SymFloat`` arguments came from; None when there is nothing to
        rewrite (no such argument, an op without a rule, a value of another origin)."""
        if self._size_floats is not None and not any(
                isinstance(a, torch.SymFloat) and a.node.expr in self._sources
                for a in (*args, *kwargs.values())):
            return self._size_floats.rewrite(func, args, kwargs)
        if not self._sources:
            return None
        rule = _RULES.get(func)
        if rule is None:
            return None
        named = named_arguments(func, args, kwargs)
        read: dict[str, torch.Tensor] = {}
        for name, value in named.items():
            if not isinstance(value, torch.SymFloat):
                continue
            source = self._sources.get(value.node.expr)
            if source is None or name not in _TENSOR_SCALARS:
                return None
            read[name] = source
        if not read:
            return None

        # NOTE: torch's parser refuses a tensor that requires grad as a Scalar, so no
        # gradient could flow to it through the rewrite
        named.update(read)
        return lambda: rule(named)
