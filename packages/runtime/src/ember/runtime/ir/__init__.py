"""Ember IR: the one graph format the four stages exchange (docs/ir-contract.md)."""

from ember.runtime.ir import symbolic
from ember.runtime.ir.cleanup import (
    drop_unreferenced_tensors,
    eliminate_common_subexpressions,
    eliminate_dead_code,
)
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
from ember.runtime.ir.parser import parse_program
from ember.runtime.ir.printer import print_graph, print_program
from ember.runtime.ir.program_json import program_from_json, program_to_json
from ember.runtime.ir.schema import SCHEMA_VERSION
from ember.runtime.ir.serialize import load, save
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
