"""Traced NumPy arrays: NumPy values computed by the graph during strict capture.

A :class:`TracedArray` stands for an ``np.ndarray`` (or a NumPy scalar) that the
captured code computes from graph tensors (``t.numpy()``, ``np.asarray(t)``,
``np.mean(a)``, ``a.T @ a``). It holds a NumPy-compatible array over a fake tensor
(torch's private NumPy layer, reached through :mod:`ember.frontend._torch`), so every
NumPy operation on it records ATen ops. Which NumPy function, ndarray method and
attribute maps to which implementation is the table in :mod:`.numpy_rules`.

NumPy semantics the implementation layer does not give by itself are taken from NumPy
itself, at capture time (:func:`numpy_probe`): the same call runs on small real arrays
of the same dtypes and ranks (*probes*), and its result says which dtype NumPy gives
(``np.exp`` of ``int8`` is ``float16``, ``np.cumsum`` of ``int32`` is ``int64``) and
whether the result is a NumPy scalar (``np.mean(a)``) or an array (``np.asarray(t)``
of a 0-d tensor).

Where user code sees a traced value after the graph (returned, stored in an object,
live at a graph break), it is materialised as a real ``np.ndarray`` (or NumPy scalar)
over the graph's output tensor (:class:`ArrayRecipe`). NumPy arrays that enter the
compiled function from outside (arguments, globals, attributes) are graph inputs,
fetched with ``torch.from_numpy`` at every call (:class:`ArrayTensorSource`), behind a
type guard and the usual tensor guard (dtype, shape, strides).
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ember.frontend._torch import is_view, numpy_layer
from ember.frontend.bytecode.breaks import GraphBreak
from ember.frontend.bytecode.list_iterator import ListIterator
from ember.frontend.bytecode.recipes import Fetch, Rebuild, Recipe
from ember.frontend.bytecode.sources import Source

tnp = numpy_layer()
_LAYER_DTYPE = type(tnp.dtype("float32"))

_PROBE_ELEMENTS = 1 << 16  # probes up to this size have the real shape, else size 1
_NUMPY_HINT = "this NumPy operation runs eagerly; keep the values as tensors to capture it"


_ATTRIBUTE_RULE: list[Callable[[TracedArray, str], Any]] = []


def register_attribute_rule(rule: Callable[[TracedArray, str], Any]) -> None:
    """Set the rule behind ``a.<name>`` on a traced array (:mod:`.numpy_rules` registers
    ``array_attribute`` when imported: it builds on this module, so this module cannot
    import it)."""
    _ATTRIBUTE_RULE[:] = [rule]


class TracedArray:
    """A NumPy array (or, with ``scalar``, a NumPy scalar) computed by the graph.

    ``impl`` is the NumPy-compatible array over the fake tensor ``impl.tensor``.
    Operators, indexing, ``len`` and iteration are NumPy's; attributes and methods are
    looked up in :data:`.numpy_rules.ARRAY_ATTRIBUTES` / ``ARRAY_METHODS``; anything
    that needs the array's data (``bool``, ``float``, ``.tolist()``) breaks the graph.
    """

    __slots__ = ("impl", "scalar")
    __array_ufunc__ = None  # NumPy defers its operators on a traced array to ours
    __hash__ = None  # type: ignore[assignment]  # np.ndarray is unhashable

    def __init__(self, impl: Any, scalar: bool = False) -> None:
        self.impl = impl
        self.scalar = scalar

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        # NOTE: isinstance(a, np.ndarray) holds in user code, as in eager; Ember's own
        # checks use type(a). A scalar is not shown as a NumPy scalar type (that would
        # make it a float to isinstance checks that expect Python values).
        return TracedArray if self.scalar else np.ndarray

    @property
    def tensor(self) -> torch.Tensor:
        """The fake tensor holding the array's values."""
        t: torch.Tensor = self.impl.tensor
        return t

    def __getattr__(self, name: str) -> Any:
        if not _ATTRIBUTE_RULE:
            raise RuntimeError("no rule for the attributes of a traced NumPy array: "
                               "ember.frontend.bytecode.numpy_rules is not imported")
        return _ATTRIBUTE_RULE[0](self, name)

    # ---- operators ---------------------------------------------------------------------

    def __getitem__(self, key: Any) -> Any:
        return array_operator(operator.getitem, self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        array_operator(operator.setitem, self, key, value)

    def __copy__(self) -> Any:
        return self.__getattr__("copy")()

    def __deepcopy__(self, memo: Any) -> Any:
        return self.__getattr__("copy")()

    def __len__(self) -> int:
        if self.impl.ndim == 0:
            raise TypeError("len() of unsized object")
        return int(self.impl.shape[0])

    def __iter__(self) -> ListIterator:
        if self.impl.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return ListIterator([self[i] for i in range(len(self))])

    def _needs_data(self, what: str) -> Any:
        raise GraphBreak(f"{what} of a NumPy array computed in the graph needs its data",
                         _NUMPY_HINT)

    def __bool__(self) -> bool:
        return bool(self._needs_data("bool()"))

    def __float__(self) -> float:
        return float(self._needs_data("float()"))

    def __int__(self) -> int:
        return int(self._needs_data("int()"))

    def __index__(self) -> int:
        return int(self._needs_data("using it as an index"))

    def __complex__(self) -> complex:
        return complex(self._needs_data("complex()"))

    def __repr__(self) -> str:
        return str(self._needs_data("repr()"))

    __str__ = __repr__

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        return self._needs_data("converting to a real np.ndarray")


def _make_operator(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: TracedArray, *others: Any) -> Any:
        return array_operator(fn, self, *others)

    return method


def _make_reflected_operator(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: TracedArray, other: Any) -> Any:
        return array_operator(fn, other, self)

    return method


# NumPy's operators, by dunder name: the operator module function each one runs
ARRAY_OPERATORS: dict[str, Callable[..., Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul,
    "truediv": operator.truediv, "floordiv": operator.floordiv, "mod": operator.mod,
    "pow": operator.pow, "matmul": operator.matmul, "and": operator.and_,
    "or": operator.or_, "xor": operator.xor, "lshift": operator.lshift,
    "rshift": operator.rshift,
}
ARRAY_COMPARISONS: dict[str, Callable[..., Any]] = {
    "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
    "gt": operator.gt, "ge": operator.ge,
}
ARRAY_UNARY: dict[str, Callable[..., Any]] = {
    "neg": operator.neg, "pos": operator.pos, "abs": operator.abs,
    "invert": operator.invert,
}
_INPLACE: dict[str, Callable[..., Any]] = {
    "add": operator.iadd, "sub": operator.isub, "mul": operator.imul,
    "truediv": operator.itruediv, "floordiv": operator.ifloordiv, "mod": operator.imod,
    "pow": operator.ipow, "matmul": operator.imatmul, "and": operator.iand,
    "or": operator.ior, "xor": operator.ixor, "lshift": operator.ilshift,
    "rshift": operator.irshift,
}

for _name, _fn in ARRAY_OPERATORS.items():
    setattr(TracedArray, f"__{_name}__", _make_operator(_fn))
    setattr(TracedArray, f"__r{_name}__", _make_reflected_operator(_fn))
    setattr(TracedArray, f"__i{_name}__", _make_operator(_INPLACE[_name]))
for _name, _fn in {**ARRAY_COMPARISONS, **ARRAY_UNARY}.items():
    setattr(TracedArray, f"__{_name}__", _make_operator(_fn))


def array_operator(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` (a Python operator) with a traced array among ``args``.

    With a torch tensor on the other side and a NumPy scalar (``x * np.mean(a)``), the
    result is what eager gives: the tensor's operator takes the scalar. An array and a
    tensor break the graph (eager raises, or converts, depending on the operator).
    """
    if any(isinstance(a, torch.Tensor) for a in args):
        if fn in (operator.setitem, operator.getitem) or any(
                isinstance(a, TracedArray) and not a.scalar for a in args):
            raise GraphBreak(f"operator {fn.__name__} mixing a NumPy array and a tensor",
                             "convert the array with torch.from_numpy first")
        return fn(*[a.tensor if isinstance(a, TracedArray) else a for a in args])
    in_place = fn in _INPLACE.values() or fn is operator.setitem
    result = call_traced(fn, fn, list(args), {}, f"operator {fn.__name__}")
    if in_place:
        return args[0]
    return result


# ---- calls on traced values ----------------------------------------------------------

def call_traced(impl: Callable[..., Any], numpy_fn: Callable[..., Any] | None,
                args: list[Any], kwargs: dict[str, Any], what: str,
                array_result: bool = False) -> Any:
    """Run ``impl`` (the NumPy-compatible implementation) on ``args``: traced arrays,
    fake tensors and real NumPy arrays become implementation arrays, NumPy dtypes its
    dtypes. ``numpy_fn`` (NumPy's own function, same signature) runs on probes to
    give the result's dtype and scalar-ness (:func:`numpy_probe`).

    Raises:
        GraphBreak: the implementation cannot run this call on fake tensors (a
            data-dependent shape, an unsupported argument): it runs eagerly.
    """
    try:
        result = impl(*to_impl(args), **to_impl(kwargs))
    except GraphBreak:
        raise
    except Exception as e:
        # NOTE: not a silent fallback: the break is reported, and the call then runs
        # eagerly, where NumPy itself succeeds or raises its own error
        first = str(e).splitlines()[0] if str(e) else ""
        raise GraphBreak(f"{what} could not be traced ({type(e).__name__}: {first})",
                         _NUMPY_HINT) from e
    probe = NO_PROBE if numpy_fn is None else numpy_probe(numpy_fn, args, kwargs)
    if probe.result is not None:
        result = _copy_where_numpy_copies(result, probe, _tensors_in([args, kwargs]))
    return from_impl(result, probe.result, array_result)


def _copy_where_numpy_copies(result: Any, probe: Probe, inputs: list[torch.Tensor]) -> Any:
    """A result that NumPy makes as a new array (its probe shares no memory with the
    probe inputs) but the implementation gave as an input or a view of one (``conj``
    of a real array) is copied: writes to it must not reach the input."""
    if isinstance(result, (list, tuple)) and isinstance(probe.result, (list, tuple)):
        return type(result)(
            _copy_where_numpy_copies(r, Probe(p, probe.inputs), inputs)
            for r, p in zip(result, probe.result))
    if not (isinstance(result, tnp.ndarray) and isinstance(probe.result, np.ndarray)):
        return result
    if any(np.shares_memory(probe.result, p) for p in probe.inputs):
        return result
    t = result.tensor
    if is_view(t) or any(t is i for i in inputs):
        return tnp.ndarray(t.clone())
    return result


def _tensors_in(value: Any) -> list[torch.Tensor]:
    if isinstance(value, TracedArray):
        return [value.tensor]
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors_in(v)]
    return []


def to_impl(value: Any) -> Any:
    """An argument as the implementation layer takes it (containers recursively)."""
    if isinstance(value, TracedArray):
        return value.impl
    if isinstance(value, torch.Tensor):
        return tnp.asarray(array_tensor(value))
    if isinstance(value, np.ndarray):
        return tnp.asarray(torch.from_numpy(np.array(value)))  # a constant of the graph
    if isinstance(value, np.dtype) or (isinstance(value, type)
                                       and issubclass(value, np.generic)):
        return tnp.dtype(np.dtype(value).name)
    if isinstance(value, np.generic):
        return tnp.asarray(value.item(), dtype=tnp.dtype(value.dtype.name))
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(to_impl(v) for v in value)
    if isinstance(value, dict):
        return {k: to_impl(v) for k, v in value.items()}
    return value


def array_tensor(t: torch.Tensor) -> torch.Tensor:
    """The tensor under ``np.asarray(t)`` / ``t.numpy()``; eager NumPy refuses (and the
    graph breaks so that it does) a tensor that requires grad or is not on the CPU."""
    if t.requires_grad:
        raise GraphBreak("NumPy array of a tensor that requires grad (eager raises)",
                         "call .detach() first")
    if t.device.type != "cpu":
        raise GraphBreak(f"NumPy array of a {t.device.type} tensor (eager raises)",
                         "call .cpu() first")
    try:
        numpy_dtype(t.dtype)
    except TypeError as e:
        raise GraphBreak(f"NumPy array of a {t.dtype} tensor (eager raises)",
                         "convert it to a dtype NumPy has first") from e
    return t


def from_impl(value: Any, probe: Any, array_result: bool) -> Any:
    """A result of the implementation as user code sees it: arrays become
    :class:`TracedArray` (cast to the dtype NumPy gives, per ``probe``), dtypes NumPy
    dtypes, containers recursively."""
    if isinstance(value, tnp.ndarray):
        scalar = value.ndim == 0 and not array_result
        if isinstance(probe, (np.ndarray, np.generic)):
            scalar = isinstance(probe, np.generic) and value.ndim == 0
            try:
                want = tnp.dtype(probe.dtype.name)
            except TypeError as e:  # a dtype torch does not have (datetime64, str)
                raise GraphBreak(f"NumPy result of dtype {probe.dtype} ({e})",
                                 _NUMPY_HINT) from e
            if value.dtype != want:
                value = value.astype(want)
        return TracedArray(value, scalar)
    if isinstance(value, _LAYER_DTYPE):
        return np.dtype(value.name)
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        kind: type = type(value)
        probes: Any = [None] * len(value)
        if isinstance(probe, (list, tuple)) and len(probe) == len(value):
            kind, probes = type(probe), probe  # NumPy's container (meshgrid: a tuple)
        return kind(from_impl(v, p, array_result) for v, p in zip(value, probes))
    return value


@dataclass
class Probe:
    """NumPy's own ``result`` of a call on probes (None: the call failed on them) and
    the probe arrays given to it."""

    result: Any
    inputs: list[np.ndarray]


NO_PROBE = Probe(None, [])


def numpy_probe(numpy_fn: Callable[..., Any], args: list[Any],
                kwargs: dict[str, Any]) -> Probe:
    """Run ``numpy_fn`` on probes: arrays of ones with the dtype and rank (and, when
    small, the shape) of each traced argument. The result is None when the call fails
    on them (a reshape to the real size of a large array)."""
    try:
        probe_args, probe_kwargs = probe_values(args), probe_values(kwargs)
    except TypeError:  # a dtype NumPy does not have
        return NO_PROBE
    inputs = [p for p in _flatten([probe_args, probe_kwargs]) if isinstance(p, np.ndarray)]
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return Probe(numpy_fn(*probe_args, **probe_kwargs), inputs)
    except Exception:  # noqa: BLE001 - no probe: the implementation's dtype stands
        return Probe(None, inputs)


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _flatten(v)]
    return [value]


def probe_values(value: Any) -> Any:
    """``value`` with each traced array and tensor replaced by its probe (an array of
    ones of its dtype and rank; its shape when small; a NumPy scalar for a scalar)."""
    if isinstance(value, TracedArray):
        probe = np.ones(_probe_shape(value.tensor), dtype=numpy_dtype(value.tensor.dtype))
        return probe[()] if value.scalar else probe
    if isinstance(value, torch.Tensor):
        return np.ones(_probe_shape(value), dtype=numpy_dtype(value.dtype))
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(probe_values(v) for v in value)
    if isinstance(value, dict):
        return {k: probe_values(v) for k, v in value.items()}
    return value


def _probe_shape(t: torch.Tensor) -> tuple[int, ...]:
    shape = tuple(int(s) for s in t.shape)
    return shape if t.numel() <= _PROBE_ELEMENTS else (1,) * len(shape)


def numpy_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """The NumPy dtype of a torch dtype (``torch.float32`` -> ``float32``)."""
    return np.dtype(str(dtype).removeprefix("torch."))


def holds_traced_array(values: Any) -> bool:
    """Whether a traced array is among ``values`` (or one level into lists, tuples
    and dicts)."""
    for v in values:
        if isinstance(v, TracedArray):
            return True
        items = v.values() if isinstance(v, dict) else v if isinstance(v, (list, tuple)) \
            else ()
        if any(isinstance(x, TracedArray) for x in items):
            return True
    return False


# ---- arrays entering and leaving the graph -------------------------------------------

@dataclass(frozen=True)
class ArrayTensorSource(Source):
    """The tensor over the NumPy array at ``base`` (``torch.from_numpy``, no copy)."""

    base: Source

    def expr(self) -> str:
        return f"torch.from_numpy({self.base.expr()})"

    def fetch(self, state: Any, ctx: Any) -> Any:
        return torch.from_numpy(self.base.fetch(state, ctx))


def traceable_input_array(value: Any) -> bool:
    """An outside ``np.ndarray`` that can be a graph input: a plain, writeable array of
    a dtype torch has, with strides ``torch.from_numpy`` accepts."""
    if type(value) is not np.ndarray or not value.flags.writeable:
        return False
    try:
        torch.from_numpy(value)
    except (TypeError, ValueError):
        return False
    return True


def wrap_input_array(cap: Any, value: np.ndarray, source: Source) -> TracedArray:
    """The traced array of the outside array ``value`` read from ``source``: its tensor
    is a graph input (one per array object in a capture)."""
    known = cap.arrays.get(id(value))
    if known is not None and known[0] is value:
        first = known[2]
        if first != source:
            cap.guard("same", source, first)
        traced: TracedArray = known[1]
        return traced
    cap.guard("type", source, np.ndarray)
    fake = cap.wrap(_outside_tensor(cap, value), ArrayTensorSource(source))
    traced = TracedArray(tnp.asarray(fake))
    cap.arrays[id(value)] = (value, traced, source)
    cap.arrays[id(traced)] = (traced, traced, source)
    return traced


def _outside_tensor(cap: Any, value: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy(value)`` as a real tensor (inside the recorder it would be
    a constant of the graph)."""
    if not cap.recording:
        return torch.from_numpy(value)
    cap.recorder.__exit__(None, None, None)
    try:
        return torch.from_numpy(value)
    finally:
        cap.recorder.__enter__()


@dataclass
class ArrayRecipe(Recipe):
    """A real ``np.ndarray`` (a NumPy scalar with ``scalar``) over the tensor ``part``
    builds (a graph output)."""

    part: Recipe
    scalar: bool

    def build(self, rt: Rebuild) -> Any:
        array = self.part.build(rt).detach().numpy()
        return array[()] if self.scalar else array


def array_recipe(builder: Any, value: TracedArray) -> Recipe:
    """How the state after the graph gets ``value``: the outside array it is (when it
    is one, unchanged), else a real array over a graph output."""
    known = builder.cap.arrays.get(id(value))
    if known is not None and known[0] is value:
        return Fetch(known[2])
    return ArrayRecipe(builder.recipe(value.tensor), value.scalar)
