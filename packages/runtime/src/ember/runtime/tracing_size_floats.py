"""Float Scalars computed from sizes (``torch.SymFloat``), recorded as 0-dim tensors.

A backward formula or a decomposition may scale a tensor by a float made from sizes:
``var``'s backward multiplies the gradient by ``2 / (N - correction)``, a mean over a
symbolic dim by ``1 / N``. In a dynamic recorder that float is a ``SymFloat`` over the
size symbols (``FloatTrueDiv(2.0, ToFloat(s0) - 1.0)``), which the IR cannot hold: its
symbolic values are ints. :class:`SizeFloats` records such a call as tensor ops instead.

* The value is built in float64 from ``aten::scalar_tensor`` of the int sizes it is made
  of (``ToFloat(s0 - 1)``: ``scalar_tensor(sym(s0 - 1))``), with 0-dim tensor ops for its
  arithmetic (:data:`_FLOAT_FUNCTIONS`), on the device of the op's tensor.
* The op becomes its Tensor overload (:data:`_RULES`), computed in the precision eager's
  Scalar overload computes in: a 16-bit float tensor in float32 and the result rounded
  once, an integer tensor in the default float dtype (a Python float promotes it so).

An op without a rule, or a value using a function with no tensor form, is not
rewritten: the recorder's ``SymbolicValueError`` names the op and the value as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import sympy
import torch
from ember.runtime._torch import op_schema
from ember.runtime.tracing_errors import RecordingError

__all__ = ["SizeFloats", "named_arguments"]

_aten = torch.ops.aten
Args = dict[str, Any]
Value = float | torch.Tensor


def _opmath(op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
            ) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``op(self, s)`` (``s`` a float64 0-dim tensor) computed as eager computes
    ``op(self, float(s))``."""

    def compute(self: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        dtype = self.dtype
        if dtype in (torch.float16, torch.bfloat16):
            wide = op(_aten._to_copy.default(self, dtype=torch.float32),
                      _aten._to_copy.default(s, dtype=torch.float32))
            return _aten._to_copy.default(wide, dtype=dtype)  # type: ignore[no-any-return]
        if not (dtype.is_floating_point or dtype.is_complex):
            dtype = torch.get_default_dtype()  # an int tensor and a float: a float result
            self = _aten._to_copy.default(self, dtype=dtype)
        return op(self, _aten._to_copy.default(s, dtype=dtype))
    return compute


def _scaled(value: Any, alpha: Any) -> Any:
    """``value * alpha``: a float, a 0-dim tensor, or a tensor when either is one."""
    if isinstance(alpha, (int, float)) and alpha == 1:
        return value
    return _mul(value, alpha)


def _in_place(rule: Callable[[Args], torch.Tensor]) -> Callable[[Args], torch.Tensor]:
    return lambda a: _aten.copy_.default(a["self"], rule(a))


_mul_t = _opmath(_aten.mul.Tensor)
_div_t = _opmath(_aten.div.Tensor)
_add_t = _opmath(_aten.add.Tensor)
_sub_t = _opmath(_aten.sub.Tensor)
_rsub_t = _opmath(lambda t, s: _aten.sub.Tensor(s, t))
_pow_t = _opmath(_aten.pow.Tensor_Tensor)
_clamp_min_t = _opmath(_aten.clamp_min.Tensor)
_clamp_max_t = _opmath(_aten.clamp_max.Tensor)


def _clamp(a: Args) -> torch.Tensor:
    """``clamp(self, min, max)``: either bound may be None (rounding a clamped 16-bit
    value again leaves it as it is)."""
    x: torch.Tensor = a["self"]
    if a.get("min") is not None:
        x = _clamp_min_t(x, _scalar(a["min"], x.device))
    if a.get("max") is not None:
        x = _clamp_max_t(x, _scalar(a["max"], x.device))
    return x


_RULES: dict[Any, Callable[[Args], torch.Tensor]] = {
    _aten.mul.Scalar: lambda a: _mul_t(a["self"], _scalar(a["other"], a["self"].device)),
    _aten.div.Scalar: lambda a: _div_t(a["self"], _scalar(a["other"], a["self"].device)),
    _aten.add.Scalar: lambda a: _add_t(
        a["self"], _scalar(_scaled(a["other"], a["alpha"]), a["self"].device)),
    _aten.sub.Scalar: lambda a: _sub_t(
        a["self"], _scalar(_scaled(a["other"], a["alpha"]), a["self"].device)),
    _aten.rsub.Scalar: lambda a: _rsub_t(
        _aten.mul.Scalar(a["self"], a["alpha"]) if not isinstance(a["alpha"], torch.Tensor)
        else _mul_t(a["self"], a["alpha"]), _scalar(a["other"], a["self"].device)),
    _aten.pow.Tensor_Scalar: lambda a: _pow_t(a["self"], _scalar(a["exponent"], a["self"].device)),
    _aten.clamp.default: _clamp,
    _aten.clamp_min.default: _clamp,
    _aten.clamp_max.default: _clamp,
}


def _filled(a: Args) -> torch.Tensor:
    """``full(size, s)``: a float fill value makes a default-dtype tensor."""
    dtype = a["dtype"] if a["dtype"] is not None else torch.get_default_dtype()
    empty = _aten.empty.memory_format(a["size"], dtype=dtype, layout=a["layout"],
                                      device=a["device"], pin_memory=a["pin_memory"])
    return _aten.fill.Tensor(empty, _to(a["fill_value"], dtype))  # type: ignore[no-any-return]


def _to(s: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return _aten._to_copy.default(s, dtype=dtype)  # type: ignore[no-any-return]


_RULES.update({  # ops whose Scalar has no tensor place of the same name
    _aten.full.default: _filled,
    _aten.fill.Scalar: lambda a: _aten.fill.Tensor(a["self"], _to(a["value"], a["self"].dtype)),
    _aten.fill_.Scalar: lambda a: _aten.fill_.Tensor(a["self"],
                                                     _to(a["value"], a["self"].dtype)),
    _aten.masked_fill.Scalar: lambda a: _aten.masked_fill.Tensor(
        a["self"], a["mask"], _to(a["value"], a["self"].dtype)),
    _aten.masked_fill_.Scalar: lambda a: _aten.masked_fill_.Tensor(
        a["self"], a["mask"], _to(a["value"], a["self"].dtype)),
    # composites wrap a Scalar with it (``torch.where(c, x, 1 / n)``)
    _aten.scalar_tensor.default: lambda a: _to(
        a["s"], a["dtype"] if a["dtype"] is not None else torch.get_default_dtype()),
})
_RULES.update({  # a Python float given to a Tensor overload (``x * (1.0 / x.size(0))``)
    _aten.mul.Tensor: _RULES[_aten.mul.Scalar],
    _aten.div.Tensor: _RULES[_aten.div.Scalar],
    _aten.add.Tensor: _RULES[_aten.add.Scalar],
    _aten.sub.Tensor: _RULES[_aten.sub.Scalar],
    _aten.mul_.Scalar: _in_place(_RULES[_aten.mul.Scalar]),
    _aten.div_.Scalar: _in_place(_RULES[_aten.div.Scalar]),
    _aten.add_.Scalar: _in_place(_RULES[_aten.add.Scalar]),
    _aten.sub_.Scalar: _in_place(_RULES[_aten.sub.Scalar]),
    _aten.mul_.Tensor: _in_place(_RULES[_aten.mul.Scalar]),
    _aten.div_.Tensor: _in_place(_RULES[_aten.div.Scalar]),
})
"""Scalar overload -> its computation with the ``SymFloat`` arguments as 0-dim float64
tensors (or floats where they are constant)."""


def _device_of(named: Args) -> torch.device:
    """Where the call's float belongs: its first tensor's device, else its ``device``
    argument (``full``), else the CPU."""
    for value in named.values():
        if isinstance(value, torch.Tensor):
            return value.device
    device = named.get("device")
    return torch.device(device) if device is not None else torch.device("cpu")


def _scalar(value: Any, device: torch.device) -> torch.Tensor:
    """``value`` (a tensor, a float or a SymInt) as a tensor: a float64 0-dim one on
    ``device`` where it is no tensor yet."""
    if isinstance(value, torch.Tensor):
        return value
    return _aten.scalar_tensor.default(  # type: ignore[no-any-return]
        value, dtype=torch.float64, device=device)


def _binary(op: Any, scalar_op: Any, reverse: Any | None = None) -> Callable[[Value, Value],
                                                                           Value]:
    """A float op over floats and 0-dim tensors: Python's where both are floats,
    ``scalar_op`` (or ``reverse`` with the operands swapped) with one tensor."""

    def apply(a: Value, b: Value) -> Value:
        if not isinstance(a, torch.Tensor) and not isinstance(b, torch.Tensor):
            return float(op(a, b))
        if not isinstance(b, torch.Tensor):
            return scalar_op(a, b)  # type: ignore[no-any-return]
        if not isinstance(a, torch.Tensor) and reverse is not None:
            return reverse(b, a)  # type: ignore[no-any-return]
        if not isinstance(a, torch.Tensor):
            a = _scalar(a, b.device)
        return op(a, b)  # type: ignore[no-any-return]
    return apply


_add = _binary(lambda a, b: a + b, _aten.add.Scalar, _aten.add.Scalar)
_mul = _binary(lambda a, b: a * b, _aten.mul.Scalar, _aten.mul.Scalar)
_div = _binary(lambda a, b: a / b, _aten.div.Scalar)
_pow = _binary(lambda a, b: a ** b, _aten.pow.Tensor_Scalar)

_FLOAT_FUNCTIONS: dict[str, Callable[..., Value]] = {
    "FloatTrueDiv": _div,
    "IntTrueDiv": _div,
    "FloatPow": _pow,
    "PowByNatural": _pow,
    "OpaqueUnaryFn_sqrt": lambda a: (float(a) ** 0.5 if not isinstance(a, torch.Tensor)
                                     else _aten.sqrt.default(a)),
}
"""Torch's float size function (by class name) -> its computation over floats and 0-dim
tensors."""


def named_arguments(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Args:
    """The arguments of a call of op ``func`` by their schema names, defaults filled."""
    named: Args = {}
    for i, arg in enumerate(op_schema(func).arguments):
        if i < len(args):
            named[arg.name] = args[i]
        elif arg.name in kwargs:
            named[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            named[arg.name] = arg.default_value
    return named


class _NoTensorForm(Exception):
    pass


class SizeFloats:
    """Rewrites ops taking ``SymFloat`` Scalars (see the module docstring).

    Args:
        symint: the SymInt of an int size expression over torch's symbols (the
            recorder's :meth:`RecordedSymbols.symint`); raises ``KeyError`` or the
            recorder's ``RecordingError`` where it has none.
    """

    def __init__(self, symint: Callable[[sympy.Basic], Any]) -> None:
        self._symint = symint

    def rewrite(self, func: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Callable[[], Any] | None:
        """A function computing ``func(*args, **kwargs)`` with tensor ops in place of its
        ``SymFloat`` arguments; None where there is none, no rule, or no tensor form."""
        rule = _RULES.get(func)
        if rule is None or not any(isinstance(a, torch.SymFloat)
                                   for a in (*args, *kwargs.values())):
            return None
        named = named_arguments(func, args, kwargs)
        device = _device_of(named)
        floats = {k: v.node.expr for k, v in named.items() if isinstance(v, torch.SymFloat)}
        try:
            for expr in floats.values():
                self._check(expr)
        except _NoTensorForm:
            return None

        def run() -> Any:  # under the recorder's mode: the value's ops are recorded
            for name, expr in floats.items():
                named[name] = _scalar(self._value(expr, device), device)
            return rule(named)
        return run

    def _check(self, expr: sympy.Basic) -> None:
        """Raise :class:`_NoTensorForm` where :meth:`_value` could not build ``expr``."""
        name = type(expr).__name__
        if expr.is_Number:
            return
        if name == "ToFloat" or expr.is_integer:
            self._symint_of(expr.args[0] if name == "ToFloat" else expr)
            return
        if not (isinstance(expr, (sympy.Add, sympy.Mul)) or name in _FLOAT_FUNCTIONS):
            raise _NoTensorForm(name)
        for a in expr.args:
            self._check(a)

    def _symint_of(self, expr: sympy.Basic) -> Any:
        try:
            return self._symint(expr)
        except (KeyError, RecordingError) as e:  # a size it cannot express
            raise _NoTensorForm(str(e)) from None

    def _value(self, expr: sympy.Basic, device: torch.device) -> Value:
        """``expr`` as a float (constant) or a float64 0-dim tensor on ``device``."""
        name = type(expr).__name__
        if expr.is_Number:
            return float(expr)
        if name == "ToFloat" or expr.is_integer:
            size = self._symint_of(expr.args[0] if name == "ToFloat" else expr)
            return float(size) if isinstance(size, int) else _scalar(size, device)
        args = [self._value(a, device) for a in expr.args]
        if isinstance(expr, sympy.Add):
            return functools.reduce(_add, args)
        if isinstance(expr, sympy.Mul):
            return functools.reduce(_mul, args)
        return _FLOAT_FUNCTIONS[name](*args)
