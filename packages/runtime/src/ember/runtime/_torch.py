"""The private torch APIs the runtime uses, in one place (docs/architecture.md, "torch and Triton").

A torch upgrade that moves one of these touches only this file. Other modules of
``ember.runtime`` import them from here, never from ``torch._*`` directly. Other helpers
may add lines here; keep one import per name and say what it is for.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

import sympy
import torch
import torch.utils._pytree as pytree  # flatten/unflatten nested containers
import torch.utils._sympy.functions as sympy_functions  # torch's size functions (FloorDiv, ...)

# The IR layer's own private-API helpers (operator overloads and their schemas); the IR
# cannot import this module, so they live in ember.runtime.ir._torch.
from ember.runtime.ir._torch import OpOverload, is_op_overload, op_schema, overload_name
from torch._subclasses.fake_tensor import (  # tensors with metadata and no data
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,  # an operator with no meta/fake kernel
    unset_fake_temporarily,
)
from torch.fx.experimental.symbolic_shapes import (  # symbolic shapes (dynamic=True)
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
    StrictMinMaxConstraint,
)
from torch._dispatch.python import enable_python_dispatcher  # symbolic-aware meta kernels
from torch.utils._python_dispatch import TorchDispatchMode  # a Python dispatch hook
from torch.utils._sympy.numbers import int_oo  # torch's integer infinity in ranges
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy  # symbol ranges

__all__ = [
    "DimDynamic",
    "FakeTensor",
    "FakeTensorMode",
    "OpOverload",
    "ShapeEnv",
    "StatelessSymbolicContext",
    "StrictMinMaxConstraint",
    "TorchDispatchMode",
    "UnsupportedOperatorException",
    "ValueRanges",
    "assert_async",
    "bound_sympy",
    "can_revoke_storage",
    "heuristics_unguarded",
    "symbolic_meta_kernels",
    "input_source",
    "int_oo",
    "higher_order_name",
    "is_grad_mode_switch",
    "fixed_by_its_shape_env",
    "is_fake",
    "is_op_overload",
    "is_unbacked",
    "make_shape_env",
    "op_schema",
    "overload_name",
    "pytree",
    "revoke_storage",
    "runtime_asserts",
    "saved_tensors_hooks_set",
    "statically_true",
    "storage_alias",
    "symbol_hint",
    "symbol_range",
    "sympy_functions",
    "track_guards",
    "unset_fake_temporarily",
]


def fixed_by_its_shape_env(size: torch.SymInt) -> bool:
    """Whether the shape environment that made ``size`` (Dynamo's) has fixed it to one
    value: its expression is a number once that environment's replacements are applied
    (a guard of Dynamo's own tracing, ``s1 == 8`` for a matmul with an 8-wide weight,
    which Dynamo's guards then check)."""
    node = size.node
    env = getattr(node, "shape_env", None)
    expr = node.expr
    try:
        if env is not None:
            expr = env.replace(expr)
    except Exception:  # noqa: BLE001 - another torch: judge the expression as it is
        pass
    return bool(getattr(expr, "is_number", False))


def higher_order_name(target: object) -> str | None:
    """The name of an FX node's target when it is one of torch's higher-order operators
    (``torch.ops.higher_order.cond``, ``register_hook``, ``autograd_function_apply``:
    operators taking subgraphs), else None."""
    hop = getattr(torch._ops, "HigherOrderOperator", None)
    return str(target.name()) if hop is not None and isinstance(target, hop) else None


def is_grad_mode_switch(target: object) -> bool:
    """Whether an FX node's target is the grad-mode switch Dynamo writes for
    ``torch.no_grad()`` / ``torch.enable_grad()`` blocks (``torch._C._set_grad_enabled``)."""
    return target is torch._C._set_grad_enabled


def saved_tensors_hooks_set() -> bool:
    """Whether ``torch.autograd.graph.saved_tensors_hooks`` (or ``checkpoint``, or
    ``save_on_cpu``) has default hooks set in this thread."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def assert_async(condition: torch.Tensor, message: str) -> None:
    """An assert that runs on ``condition``'s device without synchronizing (CUDA: a
    device-side assert; CPU: checked at once)."""
    torch._assert_async(condition, message)


def is_fake(value: object) -> bool:
    """True for a FakeTensor (of any fake mode)."""
    return isinstance(value, FakeTensor)


# ---- symbolic shapes (GraphRecorder(dynamic=True)) --------------------------------------


def make_shape_env() -> ShapeEnv:
    """A ShapeEnv for recording: sizes 0 and 1 specialise, equal sizes share a symbol
    (duck sizing), data-dependent output shapes (``nonzero``) and scalar outputs
    (``item()``) get unbacked symbols."""
    return ShapeEnv(allow_scalar_outputs=True, allow_dynamic_output_shape_ops=True,
                    specialize_zero_one=True, duck_shape=True)


@dataclasses.dataclass(frozen=True)
class _InputSource(torch._guards.Source):
    """A named source of a symbolic input's sizes (torch's symbol machinery wants a
    ``Source``; torch's own named ones live in ``torch._dynamo``, which no stage
    imports)."""

    input_name: str

    @property
    def guard_source(self) -> Any:
        return torch._guards.GuardSource.CONSTANT

    @property
    def _name_template(self) -> str:
        return self.input_name


def input_source(name: str) -> Any:
    """A named torch ``Source`` for the sizes of a symbolic input."""
    return _InputSource(name)


def _backed_values(shape_env: ShapeEnv) -> Mapping[sympy.Symbol, Any]:
    """The example values of the backed symbols (``backed_var_to_val`` in newer torch,
    ``var_to_val`` before; an empty dict of the newer name is still the answer)."""
    backed: Mapping[sympy.Symbol, Any] | None = getattr(shape_env, "backed_var_to_val", None)
    return backed if backed is not None else shape_env.var_to_val


def is_unbacked(shape_env: ShapeEnv, symbol: sympy.Symbol) -> bool:
    """True for a data-dependent symbol (no example value), False for an input size."""
    return symbol not in _backed_values(shape_env)


def symbol_hint(shape_env: ShapeEnv, symbol: sympy.Symbol) -> int | None:
    """The example value of a backed symbol, None for an unbacked one."""
    backed = _backed_values(shape_env)
    value = backed.get(symbol)
    return None if value is None else int(value)


def symbol_range(shape_env: ShapeEnv, symbol: sympy.Symbol) -> tuple[int | None, int | None]:
    """The ShapeEnv's current range of ``symbol``: (lower, upper), None where infinite."""
    vr = shape_env.var_to_range.get(symbol)
    if vr is None:
        return None, None

    def finite(v: Any) -> int | None:
        return None if v in (int_oo, -int_oo, sympy.oo, -sympy.oo) else int(v)

    return finite(vr.lower), finite(vr.upper)


def statically_true(shape_env: ShapeEnv, expr: sympy.Basic,
                    ranges: Mapping[sympy.Symbol, tuple[int, int | None]]) -> bool:
    """Whether ``expr`` (a relation over torch's symbols) holds for every value in
    ``ranges``: by interval analysis, then by the ShapeEnv's static evaluation under
    those ranges (no guard is added)."""
    vrs = {s: ValueRanges(lo, int_oo if hi is None else hi) for s, (lo, hi) in ranges.items()}
    if not all(s in vrs for s in expr.free_symbols):
        return False
    bound = bound_sympy(expr, vrs)
    if bound.lower is sympy.true and bound.upper is sympy.true:
        return True
    static = shape_env._maybe_evaluate_static(expr, axioms=(),
                                              var_to_range=tuple(vrs.items()))
    return static is sympy.true


def track_guards(shape_env: ShapeEnv,
                 where: Callable[[], object]) -> Callable[[], list[tuple[sympy.Basic, object]]]:
    """Record ``where()`` each time ``shape_env`` adds a guard (the recorder passes its
    current source line); returns a function giving ``(guard expression, where)`` for
    every guard so far, in order. NOTE: replaces the ShapeEnv's guard list by a list that
    also notes the source on ``append`` (how torch adds guards)."""

    class _SourcedGuards(list):  # type: ignore[type-arg]
        def __init__(self) -> None:
            super().__init__()
            self.sources: list[object] = []

        def append(self, guard: Any) -> None:
            super().append(guard)
            self.sources.append(where())

    guards = _SourcedGuards()
    guards.extend(shape_env.guards)
    guards.sources.extend([None] * len(shape_env.guards))
    shape_env.guards = guards

    def current() -> list[tuple[sympy.Basic, object]]:
        return [(g.expr, src) for g, src in zip(guards, guards.sources)]

    return current


_BACKEND_CHOICE = ("_select_conv_backend", "_conv_determine_backend_memory_format")


@contextlib.contextmanager
def symbolic_meta_kernels(shape_env: ShapeEnv | None) -> Iterator[None]:
    """While a dynamic recorder runs one op on fake tensors: torch's Python dispatcher,
    whose Python meta kernels take symbolic sizes where some C++ kernels need concrete
    ones (``aten::constant_pad_nd`` would otherwise specialise every size it sees, or
    fail on CUDA). A no-op without a ShapeEnv (static recording is unchanged)."""
    if shape_env is None:
        yield
        return
    with enable_python_dispatcher():
        yield


@contextlib.contextmanager
def heuristics_unguarded(shape_env: ShapeEnv | None) -> Iterator[None]:
    """While recording one op: torch's convolution backend choice (its fake convolution
    calls ``torch._C._select_conv_backend``, whose ``use_mkldnn`` asks ``batch >= 16``, a
    performance heuristic) runs with the ShapeEnv's guards suppressed when input and
    weight are contiguous: every backend then makes the same contiguous output, so the
    recorded op and its metadata do not depend on the choice, and neither a guard nor a
    narrowed range (``s0`` in [2, 15]) may come of it. Otherwise (channels-last: the
    backend picks the output layout) the choice guards as before. NOTE: swaps the two
    ``torch._C`` functions for the duration; a no-op without a ShapeEnv."""
    if shape_env is None:
        yield
        return
    originals = {name: getattr(torch._C, name) for name in _BACKEND_CHOICE}

    def unguarded(original: Callable[..., Any]) -> Callable[..., Any]:
        def choose(input: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:
            if _contiguous(input) and _contiguous(weight):
                with shape_env.suppress_guards():
                    return original(input, weight, *args, **kwargs)
            return original(input, weight, *args, **kwargs)
        return choose

    for name, original in originals.items():
        setattr(torch._C, name, unguarded(original))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(torch._C, name, original)


def _contiguous(t: object) -> bool:
    """Whether ``t`` is a tensor whose strides are row-major for its sizes, decided on
    the size expressions (no guard is added)."""
    if not isinstance(t, torch.Tensor):
        return False
    expected: sympy.Expr = sympy.Integer(1)
    for size, stride in reversed(list(zip(t.shape, t.stride()))):
        size_e, stride_e = (sympy.sympify(v.node.expr if isinstance(v, torch.SymInt) else v)
                            for v in (size, stride))
        if size_e != 1 and sympy.expand(stride_e - expected) != 0:
            return False
        expected = expected * size_e
    return True


def runtime_asserts(shape_env: ShapeEnv) -> list[sympy.Basic]:
    """The relations torch defers to run time (on data-dependent symbols)."""
    return [ra.expr for ras in shape_env.deferred_runtime_asserts.values() for ra in ras]


@functools.cache
def can_revoke_storage() -> bool:
    """Whether this torch can make a storage raise on every access to its data, checked
    once on a one-element CUDA tensor (``torch._C._set_storage_data_ptr_access_error_msg``,
    which torch.compile's CUDA graphs use for the same purpose, is in CUDA builds only;
    the per-tensor ``_set_storage_access_error_msg`` leaves other tensors on the storage
    readable, found on the H200)."""
    setter = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)
    if setter is None or not torch.cuda.is_available():
        return False
    probe = torch.zeros(1, device="cuda")
    view = torch.empty(0, device="cuda").set_(storage_alias(probe))
    setter(view.untyped_storage()._cdata, "probe")
    try:
        view.sum()
    except RuntimeError:
        return probe.sum().item() == 0  # the owner's own storage still reads
    return False


def storage_alias(t: torch.Tensor) -> torch.UntypedStorage:
    """A second storage object over ``t``'s memory that does not own it (freeing it frees
    nothing; :func:`revoke_storage` on it leaves ``t``'s own storage readable)."""
    storage = t.untyped_storage()
    alias = torch._C._construct_storage_from_data_pointer(
        storage.data_ptr(), t.device, storage.nbytes())
    return cast(torch.UntypedStorage, alias)


def revoke_storage(storage: torch.UntypedStorage, message: str) -> None:
    """Every later access to the data of any tensor on ``storage`` raises ``message``
    (sizes and strides stay readable). Only where :func:`can_revoke_storage`."""
    getattr(torch._C, "_set_storage_data_ptr_access_error_msg")(storage._cdata, message)
