"""Common-subexpression elimination: one node per distinct pure call.

When two calls are equal (argument types, NaN, ``-0.0``) is the runtime's rule:
:mod:`ember.runtime.ir.cleanup`.
"""

from __future__ import annotations

from ember.runtime.ir import Program, eliminate_common_subexpressions


def common_subexpression_elimination(program: Program) -> Program:
    """A copy of ``program`` where a pure call repeating an earlier one (same target,
    same arguments after replacement) is replaced by the earlier node's result."""
    result = program.copy()
    result.graphs = {name: eliminate_common_subexpressions(g)
                     for name, g in result.graphs.items()}
    return result
