"""The one table of lowering rules: ``aten::op.overload`` -> rule.

A rule is registered next to its definition::

    @lowering("aten::exp.default")
    def exp(ctx, node, x): ...

and is called with the lowering context (:class:`~.context.LoweringContext`, implemented
by :class:`~.graph_lowering.GraphLowering`), the graph node (its ``meta`` gives the result dtype and sizes) and the node's arguments,
where every ``ValueRef`` has been replaced by the lowered value (:mod:`.values`).
A rule returns a value or a tuple of values (for multi-result ops). A rule that cannot
handle a particular call (an unsupported dtype, a data-dependent shape) raises
:class:`NotLowerable`; the op then runs as an extern call to the eager ATen op. Any other
exception a rule raises is a bug: the lowering raises it as a ``LoweringError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# NOTE: ``Callable[..., Any]``: rules annotate their context as GraphLowering or as the
# LoweringContext protocol, and their arguments per op.
Rule = Callable[..., Any]

LOWERINGS: dict[str, Rule] = {}

# Ops lowered to extern calls on purpose (matmul, convolution, attention): not counted
# as fallbacks.
EXTERN_OPS: set[str] = set()


class NotLowerable(Exception):
    """This call cannot be lowered to loops; run it as an extern call."""


def lowering(*targets: str) -> Callable[[Rule], Rule]:
    """Register ``rule`` for each qualified op name in ``targets``.

    Raises:
        ValueError: if one of them already has a rule (one table, one rule per op).
    """

    def register(rule: Rule) -> Rule:
        for t in targets:
            if t in LOWERINGS:
                raise ValueError(f"two lowering rules for {t}")
            LOWERINGS[t] = rule
        return rule

    return register


def existing_overloads(name: str, overloads: tuple[str, ...]) -> list[str]:
    """``aten::name.overload`` for each of ``overloads`` that torch defines as a tensor
    op (``aten::eq.default`` exists too, but compares two Python scalars)."""
    from ember.inductor._torch import first_argument_type
    from ember.runtime.ir import IRFormatError, resolve_op

    found = []
    for o in overloads:
        try:
            op = resolve_op(f"aten::{name}.{o}")
        except IRFormatError:
            continue
        if first_argument_type(op) == "Tensor":
            found.append(f"aten::{name}.{o}")
    return found


def extern(*targets: str) -> None:
    """Mark ``targets`` as ops that always run as extern calls (not fallbacks)."""
    EXTERN_OPS.update(targets)
