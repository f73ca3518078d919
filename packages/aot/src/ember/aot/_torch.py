"""The private torch APIs the aot stage uses, in one place (docs/architecture.md).

A torch upgrade that moves one of these touches only this file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch._decomp import core_aten_decompositions  # torch's Core ATen decomposition table
from torch._decomp import decomposition_table as _all_decompositions  # every registered one
from torch._ops import OpOverload  # one overload of an operator: torch.ops.aten.add.Tensor
from torch._subclasses.fake_tensor import (  # fake tensors cannot compute these
    DataDependentOutputException,
    DynamicOutputShapeException,
    UnsupportedOperatorException,
)
from torch.fx.experimental.symbolic_shapes import (  # a branch on a data-dependent size
    GuardOnDataDependentSymNode,
)
from torch.utils._python_dispatch import TorchDispatchMode  # a Python dispatch hook
from torch.utils._sympy.numbers import int_oo  # torch's "no bound" for a symbol's range

# Raised on fake tensors by an op whose output values or shape depend on data.
DATA_DEPENDENT_ERRORS: tuple[type[Exception], ...] = (
    DataDependentOutputException, DynamicOutputShapeException)

# Raised on symbolic fake tensors by an op that must know the value of an unbacked
# (data-dependent) size to go on, e.g. to count the pieces of a split.
SYMBOLIC_SHAPE_ERRORS: tuple[type[Exception], ...] = (GuardOnDataDependentSymNode,)


def lacks_symbolic_kernel(e: BaseException) -> bool:
    """Whether ``e`` says an op has no kernel for symbolic fake tensors (no meta
    function: ``UnsupportedOperatorException``; a TensorIterator kernel, which takes
    static sizes only: a RuntimeError saying so), e.g. ``multi_margin_loss_backward``;
    a C++ kernel reading sizes as plain ints (``affine_grid``'s backward: "SymIntArrayRef
    expected to contain only concrete integers")."""
    return isinstance(e, UnsupportedOperatorException) or (
        isinstance(e, RuntimeError) and any(m in str(e) for m in _STATIC_ONLY_MESSAGES))


_STATIC_ONLY_MESSAGES = ("does not support symbolic shapes",
                         "expected to contain only concrete integers",
                         # a kernel's int-list argument given SymInts (the meta kernel of
                         # _upsample_bicubic2d_aa_backward)
                         "Expected IntList but got GenericList")


__all__ = [
    "DATA_DEPENDENT_ERRORS",
    "SYMBOLIC_SHAPE_ERRORS",
    "OpOverload",
    "TorchDispatchMode",
    "current_autograd_node",
    "decomposition_table_for_core_aten",
    "has_composite_implicit_kernel",
    "is_core_op",
    "lacks_symbolic_kernel",
    "qualified_name",
]

Decomposition = Callable[..., Any]


def is_core_op(op: torch._ops.OpOverload) -> bool:
    """True when ``op`` belongs to torch's Core ATen opset (it carries the ``core`` tag)."""
    return torch.Tag.core in op.tags


# Batch norm: decomposed even where the verifier would accept the op whole (the
# functional form is in ``keep``), so that backends fuse its arithmetic.
ALWAYS_DECOMPOSED: tuple[str, ...] = (
    "native_batch_norm.default",
    "_native_batch_norm_legit.default",
    "_native_batch_norm_legit.no_stats",
    "_native_batch_norm_legit_no_training.default",
    "_native_batch_norm_legit_functional.default",
    "_batch_norm_with_update_functional.default",
)


def decomposition_table_for_core_aten(
    keep: frozenset[str] = frozenset(),
) -> dict[torch._ops.OpOverload, Decomposition]:
    """A copy of :func:`_build_decomposition_table`'s table, built once per ``keep`` and
    per set of registered operators and decompositions (a library that registers ops
    or decompositions later, e.g. a ``custom_op`` with a composite kernel, rebuilds it): building it walks every
    registered op (about 0.2 s), which every compile used to pay."""
    registered = (len(torch._C._dispatch_get_all_op_names()), len(_all_decompositions))
    return dict(_build_decomposition_table(keep, registered))


@functools.lru_cache(maxsize=8)
def _build_decomposition_table(
    keep: frozenset[str], registered: tuple[int, int],
) -> dict[torch._ops.OpOverload, Decomposition]:
    """Decompositions that bring a program down to Core ATen: torch's own Core ATen
    table plus every other decomposition torch registers (``torch._decomp``) for an op
    outside the Core ATen opset, less the ops named in ``keep`` (qualified names a
    backend wants whole, e.g. fused attention; batch norm, :data:`ALWAYS_DECOMPOSED`,
    is decomposed all the same) and the random ops outside the core table.
    A decomposition calls other ops, which
    the decomposing mode decomposes again until only Core ATen ops (or ops with no
    decomposition at all) remain."""
    table: dict[torch._ops.OpOverload, Decomposition] = dict(core_aten_decompositions())
    for op, fn in _all_decompositions.items():
        # NOTE: random ops (cauchy, geometric, exponential, ...) stay whole: decomposed,
        # they draw other numbers than eager's kernels under the same seed.
        if (isinstance(op, torch._ops.OpOverload) and not is_core_op(op)
                and torch.Tag.nondeterministic_seeded not in op.tags):
            table.setdefault(op, fn)
    kept = {op: fn for op, fn in table.items()
            if not (isinstance(op, torch._ops.OpOverload) and qualified_name(op) in keep)}
    for name in ALWAYS_DECOMPOSED:
        packet, _, overload = name.partition(".")
        always = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if isinstance(always, torch._ops.OpOverload) and always in _all_decompositions:
            kept[always] = _all_decompositions[always]
    return kept


def current_autograd_node() -> Any:
    """The autograd graph node whose backward is running now (None outside backward)."""
    return torch._C._current_autograd_node()


def qualified_name(op: torch._ops.OpOverload) -> str:
    """``aten::name.overload``, as IR nodes name their targets."""
    return f"{op._schema.name}.{op._overloadname or 'default'}"


def has_composite_implicit_kernel(op: torch._ops.OpOverload) -> bool:
    """True for an op torch implements by calling other ops (CompositeImplicitAutograd):
    a dispatch mode below autograd still sees it and must decompose it itself."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(
            op.name(), "CompositeImplicitAutograd"))  # type: ignore[no-untyped-call]
    except RuntimeError:  # prim:: ops that the dispatcher does not register
        return False


def narrow_unbacked(value: object, lower: int, upper: int | None) -> None:
    """Narrow the range torch's shape environment knows for the data-dependent symbol
    ``value`` stands for (a ``SymInt`` whose expression is one unbacked symbol: an
    ``.item()``, a ``nonzero`` count) to ``[lower, upper]`` (``upper`` None: unbounded),
    intersected with what it knew. Anything else is left alone."""
    if not isinstance(value, torch.SymInt):
        return
    node = value.node
    env = node.shape_env
    expr = node.expr
    if env is None or not getattr(expr, "is_Symbol", False):
        return  # an expression
    # NOTE: newer torch keeps the example values of backed symbols in backed_var_to_val
    backed = getattr(env, "backed_var_to_val", None)
    if expr in (backed if backed is not None else env.var_to_val):
        return  # a backed (input) size
    env.constrain_symbol_range(expr, compiler_min=lower,
                               compiler_max=int_oo if upper is None else upper)
