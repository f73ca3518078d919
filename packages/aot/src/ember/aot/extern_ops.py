"""Ops left whole: what decomposition could not bring down to Core ATen.

An ``aten`` op outside the Core ATen opset that neither torch's decomposition tables,
Ember's own (:mod:`ember.aot.decompositions`) nor a CompositeImplicitAutograd kernel
can decompose (``median``, ``kthvalue``, ``cummax``, ...) stays one call. The stage
declares these ops in ``program.metadata["aot"]["extern_ops"]``
(:class:`ember.runtime.ir.contracts.AotMetadata`); the core-functional
verifier accepts a non-mutating non-Core op only when so declared. A backend lowers it
if it has a rule for it (the inductor: ``lgamma``, ``digamma``, ``erfinv``, ...) or runs
it as an extern call to eager ATen (the inductor counts those in
``metadata["fallbacks"]`` and logs them itself).
"""

from __future__ import annotations

import collections
import dataclasses

from ember.aot._torch import is_core_op
from ember.aot.kept_whole import take_reasons
from ember.runtime.ir import IRFormatError, Program, resolve_op
from ember.runtime.ir.contracts import AotMetadata
from ember.runtime.ir.verifier import CORE_FUNCTIONAL_EXTRA_OPS
from ember.runtime.logs import log


def find_extern_ops(program: Program) -> collections.Counter[str]:
    """How many calls of each non-Core ``aten`` op (outside
    :data:`CORE_FUNCTIONAL_EXTRA_OPS`) the graphs of ``program`` make."""
    found: collections.Counter[str] = collections.Counter()
    for graph in program.graphs.values():
        for node in graph.nodes:
            if node.op != "call" or not node.target.startswith("aten::"):
                continue
            if node.target in CORE_FUNCTIONAL_EXTRA_OPS:
                continue
            try:
                op = resolve_op(node.target)
            except IRFormatError:
                continue  # the verifier names it
            if not is_core_op(op):
                found[node.target] += 1
    return found


def declare_extern_ops(program: Program) -> None:
    """Write the extern ops of ``program`` into ``metadata["aot"]["extern_ops"]`` and log
    each one under ``EMBER_LOGS=fallbacks``."""
    found = find_extern_ops(program)
    reasons = take_reasons()
    for target, count in sorted(found.items()):
        why = ("is kept whole by its decomposition: " + "; ".join(reasons[target])
               if target in reasons else "has no decomposition to Core ATen")
        log("fallbacks", f"aot: {target} {why}; "
                         f"{count} call(s) stay whole for the backend (which lowers them or "
                         "runs them as extern eager ATen calls)")
    aot = AotMetadata.from_program(program) or AotMetadata()
    dataclasses.replace(aot, extern_ops=tuple(sorted(found))).write_to(program)
