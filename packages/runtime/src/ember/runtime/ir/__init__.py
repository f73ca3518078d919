"""Ember IR: the one graph format the four stages exchange (docs/ir-contract.md).

NOTE: the text printer and parser, the verifier and the cleanup passes are imported on
first use (PEP 562 ``__getattr__``, :data:`_LAZY`): a warm start, whose programs come
from the caches, never runs them, and importing them costs it time.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ember.runtime.ir import symbolic
from ember.runtime.ir.errors import IRError, IRFormatError, VerificationError
from ember.runtime.ir.graph import (
    DIALECTS,
    OPCODES,
    UNBOUNDED_LOWER,
    Argument,
    Graph,
    InputKind,
    InputSpec,
    Meta,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    ScalarMeta,
    ShapeGuard,
    Signature,
    SourceLocation,
    SymbolRange,
    SymExpr,
    SymInt,
    TensorMeta,
    ValueRef,
    normalize_argument,
)
from ember.runtime.ir.op_queries import (
    has_side_effects,
    is_pure,
    is_random,
    is_view,
    operator_schema,
    writes_arguments,
)
from ember.runtime.ir.ops import qualified_name, resolve_op
from ember.runtime.ir.program_json import program_from_json, program_to_json
from ember.runtime.ir.schema import SCHEMA_VERSION
from ember.runtime.ir.serialize import load, save

if TYPE_CHECKING:
    from ember.runtime.ir.cleanup import (
        drop_unreferenced_tensors,
        eliminate_common_subexpressions,
        eliminate_dead_code,
    )
    from ember.runtime.ir.parser import parse_program
    from ember.runtime.ir.printer import print_graph, print_program
    from ember.runtime.ir.verifier import verify

__all__ = [
    "DIALECTS",
    "OPCODES",
    "SCHEMA_VERSION",
    "Argument",
    "Graph",
    "IRError",
    "IRFormatError",
    "InputKind",
    "InputSpec",
    "Meta",
    "Node",
    "OutputKind",
    "OutputSpec",
    "Program",
    "ScalarMeta",
    "ShapeGuard",
    "Signature",
    "SourceLocation",
    "SymExpr",
    "SymInt",
    "SymbolRange",
    "UNBOUNDED_LOWER",
    "TensorMeta",
    "ValueRef",
    "VerificationError",
    "drop_unreferenced_tensors",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "has_side_effects",
    "is_pure",
    "is_random",
    "is_view",
    "load",
    "normalize_argument",
    "operator_schema",
    "parse_program",
    "print_graph",
    "print_program",
    "program_from_json",
    "program_to_json",
    "qualified_name",
    "resolve_op",
    "save",
    "symbolic",
    "verify",
    "writes_arguments",
]

_LAZY = {
    "drop_unreferenced_tensors": "ember.runtime.ir.cleanup",
    "eliminate_common_subexpressions": "ember.runtime.ir.cleanup",
    "eliminate_dead_code": "ember.runtime.ir.cleanup",
    "parse_program": "ember.runtime.ir.parser",
    "print_graph": "ember.runtime.ir.printer",
    "print_program": "ember.runtime.ir.printer",
    "verify": "ember.runtime.ir.verifier",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ember.runtime.ir' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
