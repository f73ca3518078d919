"""NumPy in strict capture: which NumPy function, ndarray method and attribute is traced,
and by what.

NumPy code on tensors is traced as tensor operations (:mod:`.numpy_values` describes
the values). The tables below are the whole mapping; a NumPy callable that is not in
them breaks the graph with a reason naming it, and runs eagerly.

- :data:`NUMPY_FUNCTIONS`: ``np.<name>`` -> the function of the same role in torch's
  NumPy-compatible layer (by name), or an implementation of Ember's own.
- :data:`NUMPY_METADATA_FUNCTIONS`: ``np.<name>`` whose result depends only on the
  dtypes and ranks of its arguments (``np.result_type``, ``np.finfo``, ``np.dtype``):
  NumPy computes it at capture time (on probes for traced arrays); a constant of the
  graph, as the dtypes and ranks are guarded.
- :data:`ARRAY_METHODS`: ``ndarray.<name>(...)`` -> the layer's method.
- :data:`ARRAY_ATTRIBUTES`: ``ndarray.<name>`` -> how it is read.
- :data:`TORCH_CONVERSIONS`: torch functions that take a traced array back as a tensor
  (``torch.from_numpy``, ``torch.as_tensor``, ...), and ``Tensor.numpy()``.

A NumPy function called with no graph value among its arguments (``np.sqrt(64.0)``,
``np.prod((2, 3))``) runs in NumPy at capture time when its result is a scalar (a
constant of the graph, as eager computes it); an array result (``np.arange(3)``) is
traced, so that every call gets a fresh array. Any other ufunc (``np.lcm``, ``np.gcd``)
called on constant scalars only also runs at capture time: a ufunc is pure.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.numpy_values import (
    TracedArray,
    array_tensor,
    call_traced,
    holds_traced_array,
    probe_values,
    register_attribute_rule,
    tnp,
)

NOT_NUMPY = object()
"""What :func:`numpy_call` returns for a call these rules do not handle."""

_REDUCTIONS = ("sum", "prod", "mean", "std", "var", "max", "min", "amax", "amin", "argmax",
               "argmin", "any", "all", "cumsum", "cumprod", "median", "ptp", "average",
               "count_nonzero")
_UNARY_UFUNCS = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "square",
                 "abs", "absolute", "fabs", "sign", "negative", "reciprocal", "sin", "cos",
                 "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "tanh", "floor", "ceil",
                 "rint", "trunc", "isnan", "isinf", "isfinite", "logical_not", "deg2rad",
                 "rad2deg", "sinc")
_BINARY_UFUNCS = ("add", "subtract", "multiply", "divide", "true_divide", "floor_divide",
                  "power", "mod", "remainder", "maximum", "minimum", "fmax", "fmin",
                  "arctan2", "hypot", "logical_and", "logical_or", "logical_xor", "equal",
                  "not_equal", "less", "less_equal", "greater", "greater_equal")
_ELEMENTWISE = ("round", "clip", "where", "nan_to_num")
_CREATION = ("arange", "linspace", "logspace", "zeros", "ones", "full", "zeros_like",
             "ones_like", "full_like", "eye", "identity", "asarray", "array", "copy",
             "meshgrid", "broadcast_arrays")
_SHAPES = ("reshape", "transpose", "concatenate", "stack", "vstack", "hstack", "dstack",
           "column_stack", "expand_dims", "squeeze", "ravel", "broadcast_to", "tile",
           "repeat", "flip", "flipud", "fliplr", "rot90", "swapaxes", "moveaxis",
           "atleast_1d", "atleast_2d", "split", "roll", "diff", "take", "take_along_axis")
_LINALG = ("matmul", "dot", "einsum", "outer", "inner", "tensordot", "trace", "tril",
           "triu", "diag", "kron", "cross")
_SORTING = ("sort", "argsort")



def _median(a: Any, axis: Any = None, out: Any = None, overwrite_input: bool = False,
            keepdims: bool = False) -> Any:
    """``np.median`` without the layer's data-dependent checks (torch 2.11's layer
    compares values to find NaNs): the mean of the middle two of the sorted values,
    NaN where the values hold one."""
    if out is not None or isinstance(axis, (tuple, list)):
        return tnp.median(a, axis=axis, out=out, keepdims=keepdims)
    t = tnp.asarray(a).tensor
    if axis is None:
        shape, t, dim = t.shape, t.reshape(-1), 0
    else:
        shape, dim = t.shape, axis % max(t.dim(), 1)
    if not (t.is_floating_point() or t.is_complex()):
        t = t.to(torch.float64)  # NumPy's median of integers is float64
    n = t.shape[dim]
    ordered = t.sort(dim=dim).values
    middle = (ordered.narrow(dim, (n - 1) // 2, 1) + ordered.narrow(dim, n // 2, 1)) / 2
    middle = torch.where(t.isnan().any(dim=dim, keepdim=True),
                         torch.full_like(middle, float("nan")), middle)
    if axis is None:
        middle = middle.reshape((1,) * len(shape) if keepdims else ())
    elif not keepdims:
        middle = middle.squeeze(dim)
    return tnp.ndarray(middle)


NUMPY_FUNCTIONS: dict[str, str | Callable[..., Any]] = {
    **{name: name for group in (_REDUCTIONS, _UNARY_UFUNCS, _BINARY_UFUNCS, _ELEMENTWISE,
                                _CREATION, _SHAPES, _LINALG, _SORTING) for name in group},
    "median": _median,
    "shape": "shape",
    "size": "size",
}
"""``np.<key>`` is traced by the layer's function named ``<value>``, or by ``<value>``
itself when it is a function (an implementation of Ember's own)."""

NUMPY_METADATA_FUNCTIONS: tuple[str, ...] = (
    "dtype", "finfo", "iinfo", "result_type", "promote_types", "can_cast", "issubdtype",
    "isscalar", "ndim")
"""``np.<name>`` run by NumPy at capture time (see the module docstring)."""

# functions whose 0-d result is an array, not a NumPy scalar, when no probe decides
_ARRAY_RESULTS = frozenset(_CREATION) | frozenset(_SHAPES)

ARRAY_METHODS: dict[str, str] = {
    name: name for name in (
        "sum", "prod", "mean", "std", "var", "max", "min", "argmax", "argmin", "any",
        "all", "cumsum", "cumprod", "reshape", "transpose", "astype", "flatten",
        "ravel", "squeeze", "copy", "clip", "round", "dot", "swapaxes", "repeat",
        "argsort", "sort", "fill", "take", "diagonal", "trace", "conj", "conjugate")
}
"""``ndarray.<key>(...)`` is traced by the layer's method ``<value>``."""

_IN_PLACE_METHODS = frozenset({"sort", "fill"})  # they return None and change the array


def _dtype_attribute(a: TracedArray) -> Any:
    return np.dtype(a.impl.dtype.name)


ARRAY_ATTRIBUTES: dict[str, Callable[[TracedArray], Any]] = {
    "shape": lambda a: tuple(int(s) for s in a.impl.shape),
    "ndim": lambda a: int(a.impl.ndim),
    "size": lambda a: int(a.impl.size),
    "dtype": _dtype_attribute,
    "itemsize": lambda a: int(a.impl.itemsize),
    "nbytes": lambda a: int(a.impl.size) * int(a.impl.itemsize),
    "T": lambda a: call_traced(lambda x: x.T, lambda x: x.T, [a], {}, "ndarray.T"),
    "mT": lambda a: call_traced(lambda x: tnp.swapaxes(x, -1, -2), lambda x: x.mT, [a], {},
                                "ndarray.mT"),
    "real": lambda a: call_traced(lambda x: x.real, lambda x: x.real, [a], {}, "ndarray.real"),
    "imag": lambda a: call_traced(lambda x: x.imag, lambda x: x.imag, [a], {}, "ndarray.imag"),
}
"""``ndarray.<key>`` is read by ``<value>(array)``."""


def _torch_from_array(copy: bool) -> Callable[..., Any]:
    def convert(a: TracedArray, dtype: torch.dtype | None = None,
                device: Any = None, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("requires_grad"):
            raise GraphBreak("torch.tensor(..., requires_grad=True) of a NumPy array",
                             "make the tensor outside the compiled function")
        t = a.tensor
        if dtype is not None or device is not None:
            t = t.to(dtype=dtype, device=device)
        return t.clone() if copy and t is a.tensor else t

    return convert


TORCH_CONVERSIONS: dict[Any, Callable[..., Any]] = {
    torch.from_numpy: _torch_from_array(copy=False),
    torch.as_tensor: _torch_from_array(copy=False),
    torch.asarray: _torch_from_array(copy=False),
    torch.tensor: _torch_from_array(copy=True),
}
"""``torch.<fn>(traced_array, ...)`` -> the tensor (``from_numpy`` shares memory, as
eager does; ``tensor`` copies)."""


def _numpy_functions() -> dict[Any, str]:
    table: dict[Any, str] = {}
    for name in NUMPY_FUNCTIONS:
        fn = getattr(np, name, None)
        if fn is not None:
            table[fn] = name
    return table


_BY_FUNCTION = _numpy_functions()
_METADATA = {getattr(np, name) for name in NUMPY_METADATA_FUNCTIONS if hasattr(np, name)}


def _array_method(name: str) -> Callable[..., Any]:
    """The function behind ``array.<name>``, bound to the array as a method (so that a
    graph break rebuilds it as the method of the real array)."""

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if type(self) is not TracedArray:  # rebuilt after a graph break: a real array
            return getattr(self, name)(*args, **kwargs)
        if name == "astype":
            # NOTE: the layer refuses copy=False; NumPy's result is the same values
            kwargs = {k: v for k, v in kwargs.items() if k != "copy"}
        impl = getattr(type(self.impl), ARRAY_METHODS[name])
        result = call_traced(impl, getattr(np.ndarray, name), [self, *args], kwargs,
                             f"ndarray.{name}()")
        return None if name in _IN_PLACE_METHODS else result

    method.__name__ = method.__qualname__ = name
    return method


_METHOD_FUNCTIONS = {name: _array_method(name) for name in ARRAY_METHODS}


def array_attribute(a: TracedArray, name: str) -> Any:
    """``a.<name>`` (see :data:`ARRAY_ATTRIBUTES` and :data:`ARRAY_METHODS`).

    Raises:
        GraphBreak: an ndarray attribute these tables do not trace.
        AttributeError: a name ``np.ndarray`` does not have either.
    """
    attribute = ARRAY_ATTRIBUTES.get(name)
    if attribute is not None:
        return attribute(a)
    if name in ARRAY_METHODS:
        return types.MethodType(_METHOD_FUNCTIONS[name], a)
    if not name.startswith("_") and hasattr(np.ndarray, name):
        raise GraphBreak(f"ndarray.{name} is not supported on a NumPy array computed in "
                         "the graph", "keep the values as tensors to capture it")
    raise AttributeError(f"'numpy.ndarray' object has no attribute '{name}'")


register_attribute_rule(array_attribute)


def numpy_call(fn: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """The result of a call the NumPy rules handle, or :data:`NOT_NUMPY`.

    Raises:
        GraphBreak: a NumPy callable not in the tables (named in the reason), or a call
            that cannot be traced.
    """
    owner = getattr(fn, "__self__", None)
    if type(owner) is TracedArray or (args and type(args[0]) is TracedArray and getattr(
            fn, "__qualname__", "").startswith("TracedArray.")):
        return fn(*args, **kwargs)  # a dunder (__iter__, __getitem__): run, not inlined
    if isinstance(owner, torch.Tensor) and getattr(fn, "__name__", "") == "numpy":
        return _tensor_numpy(owner, *args, **kwargs)
    values = [*args, *kwargs.values()]
    if _is_torch_callable(fn):
        convert = TORCH_CONVERSIONS.get(fn) if isinstance(
            fn, types.BuiltinFunctionType) else None
        if convert is not None and args and type(args[0]) is TracedArray:
            return convert(*args, **kwargs)
        if holds_traced_array(values):
            raise GraphBreak(f"call to {_numpy_name(fn)} with a NumPy array computed in "
                             "the graph", "convert it with torch.from_numpy first")
        return NOT_NUMPY
    if not _is_numpy_callable(fn):
        return NOT_NUMPY
    try:
        name = _BY_FUNCTION.get(fn)
        metadata = fn in _METADATA
    except TypeError:  # an unhashable callable
        name, metadata = None, False
    if metadata:
        return fn(*probe_values(args), **probe_values(kwargs))
    if name is not None:
        return _call_function(fn, name, args, kwargs)
    if isinstance(fn, type) and issubclass(fn, np.generic):
        # np.float32(2.0) is a constant; np.float32(a) the value as a NumPy scalar (an
        # array of that dtype for an array)
        if not holds_traced_array(args) and not _holds_tensor(args):
            return fn(*args, **kwargs)
        return call_traced(lambda x: tnp.asarray(x, dtype=tnp.dtype(np.dtype(fn).name)),
                           fn, args, kwargs, f"numpy.{fn.__name__}")
    if isinstance(fn, np.ufunc) and all(_is_constant_scalar(v) for v in values):
        # a ufunc is a pure function of its arguments: on constants (np.lcm of two
        # config values) NumPy computes the constant now, as for a table entry
        return fn(*args, **kwargs)
    if holds_traced_array(values):
        raise GraphBreak(f"numpy function {_numpy_name(fn)} is not supported in capture",
                         "use a supported NumPy function or torch")
    return NOT_NUMPY  # the existing rules decide (a constant, or a break)


def _call_function(fn: Any, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    entry = NUMPY_FUNCTIONS[name]
    impl = getattr(tnp, entry) if isinstance(entry, str) else entry
    values = [*args, *kwargs.values()]
    array_result = name in _ARRAY_RESULTS
    if holds_traced_array(values) or _holds_tensor(values):
        return call_traced(impl, fn, args, kwargs, f"numpy.{name}", array_result)
    # no graph value in: NumPy computes a scalar now; an array is made by the graph
    # (fresh at every call), from NumPy's values when the layer cannot make it
    result = None
    if not array_result:
        result = fn(*args, **kwargs)
        if not isinstance(result, (np.ndarray, list, tuple)):
            return result
    try:
        return call_traced(impl, fn, args, kwargs, f"numpy.{name}", array_result)
    except GraphBreak:
        if result is None:
            result = fn(*args, **kwargs)
        return call_traced(_constant, None, [result], {}, f"numpy.{name}", True)


def _constant(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return type(value)(_constant(v) for v in value)
    return tnp.array(value)


def _tensor_numpy(t: torch.Tensor, *, force: bool = False) -> TracedArray:
    if force:
        t = t.detach()
    return TracedArray(tnp.asarray(array_tensor(t)))


def _holds_tensor(values: list[Any]) -> bool:
    for v in values:
        items = v if isinstance(v, (list, tuple)) else (v,)
        if any(isinstance(x, (torch.Tensor, np.ndarray)) for x in items):
            return True
    return False


def _is_constant_scalar(value: Any) -> bool:
    """A capture-time constant a ufunc may compute on: a Python or NumPy scalar, a
    dtype or a keyword string (a symbolic size, an array or a tensor is not)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, np.generic,
                                           np.dtype)):
        return True
    return isinstance(value, type) and issubclass(value, np.generic)


def _is_numpy_callable(fn: Any) -> bool:
    module = getattr(fn, "__module__", None)
    if not isinstance(module, str):
        owner = getattr(fn, "__self__", None)
        module = getattr(type(owner), "__module__", "") if owner is not None else ""
    return isinstance(module, str) and (module == "numpy" or module.startswith("numpy."))


def _is_torch_callable(fn: Any) -> bool:
    module = getattr(fn, "__module__", None)
    if isinstance(getattr(fn, "__self__", None), torch.Tensor):
        return True
    return isinstance(module, str) and (module == "torch" or module.startswith("torch."))


def _numpy_name(fn: Any) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if isinstance(module, str) else str(name)
