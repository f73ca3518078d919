"""Ember IR: the one graph format the four stages exchange (DESIGN.md §3)."""

from ember.runtime.ir.errors import IRError, IRFormatError, VerificationError
from ember.runtime.ir.graph import (
    DIALECTS,
    OPCODES,
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
    Signature,
    SourceLocation,
    SymbolRange,
    SymInt,
    TensorMeta,
    ValueRef,
    normalize_argument,
)
from ember.runtime.ir.ops import qualified_name, resolve_op

__all__ = [
    "DIALECTS", "OPCODES", "Argument", "Graph", "InputKind", "InputSpec", "IRError",
    "IRFormatError", "Meta", "Node", "OutputKind", "OutputSpec", "Program", "ScalarMeta",
    "Signature", "SourceLocation", "SymbolRange", "SymInt", "TensorMeta", "ValueRef",
    "VerificationError", "normalize_argument", "qualified_name", "resolve_op",
]
