"""Dead-code elimination: drop pure calls and constants whose results nobody reads.

The rule (which calls are pure, why random calls stay) is the runtime's:
:mod:`ember.runtime.ir.cleanup`.
"""

from __future__ import annotations

from ember.runtime.ir import Program, drop_unreferenced_tensors, eliminate_dead_code


def dead_code_elimination(program: Program) -> Program:
    """A copy of ``program`` without unused pure ``call``/``constant``/``get_attr`` nodes
    (placeholders always stay: they are the graph's interface), and without the tensors
    no node or input names any more."""
    result = program.copy()
    result.graphs = {name: eliminate_dead_code(g) for name, g in result.graphs.items()}
    return drop_unreferenced_tensors(result)
