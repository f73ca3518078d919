"""What an operator does, read from torch's registration: the questions a graph pass
asks before it removes, merges or reorders a call. Every stage asks them here.

==================  ======================================================================
query               true when
==================  ======================================================================
writes_arguments    the schema marks an argument as written (``Tensor(a!)``)
mutated_arguments   which arguments of one call are written: the schema positions
                    annotated ``(a!)`` whose value in the call is not None
is_random           torch tags the op ``nondeterministic_seeded`` (it draws from the
                    generator: two calls give different values and each advances the
                    generator state)
is_view             a result aliases an argument without writing it (``-> Tensor(a)``)
has_side_effects    it writes an argument, or it is in :data:`SIDE_EFFECT_OPS` or
                    :data:`~ember.runtime.ir.effects.EFFECTFUL_OPS`, or it is not a
                    registered operator (nothing is known about it)
is_pure             no side effects and not random: a call whose result nobody reads
                    may be removed, and two calls with equal arguments may be merged
==================  ======================================================================

Operators of other namespaces (custom ops) are judged by their schema and tags like
ATen's: a ``custom_op`` that declares no mutated argument is functional by contract.
"""

from __future__ import annotations

import functools

import torch
from ember.runtime.ir._torch import op_schema
from ember.runtime.ir.effects import EFFECTFUL_OPS
from ember.runtime.ir.errors import IRFormatError
from ember.runtime.ir.graph import Argument, Node
from ember.runtime.ir.ops import resolve_op

SIDE_EFFECT_OPS: dict[str, str] = {
    "aten::_assert_async": "fails the program when its condition is false",
    "aten::_assert_scalar": "fails the program when its condition is false",
    "aten::_assert_tensor_metadata": "fails the program when a tensor's metadata differs",
    "aten::_functional_assert_async": "fails the program when its condition is false",
    "aten::_functional_assert_scalar": "fails the program when its condition is false",
    "aten::_linalg_check_errors": "raises torch.linalg's error when a factorization's "
                                  "info is nonzero (a singular matrix to linalg.inv)",
    "aten::sym_constrain_range": "constrains the range of a size symbol",
    "aten::sym_constrain_range_for_size": "constrains the range of a size symbol",
    "aten::_functional_sym_constrain_range": "constrains the range of a size symbol",
    "aten::_functional_sym_constrain_range_for_size": "constrains the range of a size symbol",
}
"""``namespace::name`` (every overload) -> the effect that makes a call worth keeping
although nobody reads its result (its schema writes no argument). Operators whose
effects reach outside the process's tensors are in ``EFFECTFUL_OPS`` instead."""

__all__ = [
    "SIDE_EFFECT_OPS",
    "argument_at",
    "has_side_effects",
    "is_pure",
    "is_random",
    "is_view",
    "mutated_arguments",
    "operator_schema",
    "writes_arguments",
    "written_positions",
]


def operator_schema(target: str) -> torch.FunctionSchema:
    """The schema of operator ``target`` (``aten::add.Tensor``): its arguments, returns
    and their alias annotations.

    Raises:
        IRFormatError: if no such operator is registered.
    """
    return op_schema(resolve_op(target))


@functools.cache
def writes_arguments(target: str) -> bool:
    """True if a call of ``target`` writes into one of its arguments.

    Raises:
        IRFormatError: if no such operator is registered.
    """
    return bool(operator_schema(target).is_mutable)


@functools.cache
def written_positions(target: str) -> tuple[int, ...]:
    """Indices into ``target``'s schema arguments of those it writes in place (the
    alias annotation ``Tensor(a!)``; keyword-only ``out=`` arguments included).

    Raises:
        IRFormatError: if no such operator is registered.
    """
    schema = operator_schema(target)
    return tuple(i for i, a in enumerate(schema.arguments)
                 if a.alias_info is not None and a.alias_info.is_write)


def argument_at(node: Node, index: int) -> Argument:
    """The value call ``node`` passes for schema argument ``index``: positional if it
    was passed by position, else by keyword; None when omitted (its default).

    Raises:
        IRFormatError: if ``node.target`` is not a registered operator.
    """
    if index < len(node.args):
        return node.args[index]
    name = operator_schema(node.target).arguments[index].name
    return node.kwargs.get(name)


def mutated_arguments(node: Node) -> tuple[int, ...]:
    """The schema argument indices call ``node`` writes in place: the positions its
    schema annotates as written (:func:`written_positions`) that the call passes a value
    to (an omitted or None optional tensor is not written). The one rule every stage
    asks for "which arguments does this call mutate" (custom operators declared with
    ``mutates_args`` included); ATen ops that write arguments their schema does not
    annotate are the aot stage's business (``ember.aot.op_effects``).

    Raises:
        IRFormatError: if ``node.target`` is not a registered operator.
    """
    if node.op != "call":
        return ()
    return tuple(i for i in written_positions(node.target)
                 if argument_at(node, i) is not None)


@functools.cache
def is_random(target: str) -> bool:
    """True if ``target`` draws random numbers (torch's ``nondeterministic_seeded`` tag).

    Raises:
        IRFormatError: if no such operator is registered.
    """
    return torch.Tag.nondeterministic_seeded in resolve_op(target).tags


@functools.cache
def is_view(target: str) -> bool:
    """True if ``target`` returns a view of (one of) its arguments without writing it.

    Raises:
        IRFormatError: if no such operator is registered.
    """
    for ret in operator_schema(target).returns:
        info = ret.alias_info
        if info is not None and not info.is_write:
            return True
    return False


@functools.cache
def has_side_effects(target: str) -> bool:
    """True if a call of ``target`` does something besides computing its results (see
    the table in this module's docstring); True for an operator that is not registered."""
    base = target.partition(".")[0]
    if base in SIDE_EFFECT_OPS or base in EFFECTFUL_OPS:
        return True
    try:
        return writes_arguments(target)
    except IRFormatError:
        return True


@functools.cache
def is_pure(target: str) -> bool:
    """True if a call of ``target`` may be removed when unused and merged with an equal
    call: no side effects and not random. False for an operator that is not registered."""
    return not has_side_effects(target) and not is_random(target)
