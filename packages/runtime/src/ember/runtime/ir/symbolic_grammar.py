"""The text grammar of symbolic sizes and guards, checked without sympy: parsing into
Python's ``ast`` and refusing every node outside the grammar (never ``eval`` of unchecked
text). :mod:`~ember.runtime.ir.symbolic_text` reads checked text into sympy; the public
API is :mod:`ember.runtime.ir.symbolic`.

NOTE: no sympy here: evaluating, binding and checking sizes at run time (a compiled
program's wrapper, a cache hit) must not pay for importing it.

Grammar (docs/ir-contract.md, "Symbolic shapes"): integer literals; symbol names;
binary ``+ - *``; unary ``-``; ``//`` floor division; ``%`` Python modulo; ``Max(a, b,
...)``, ``Min(...)``; parentheses. Relations add ``== != < <= > >=``, ``and``, ``or``,
``not``.
"""

from __future__ import annotations

import ast
import functools
import re

from ember.runtime.ir.errors import IRFormatError

__all__ = ["BINARY_OPS", "COMPARE_OPS", "FUNCTION_NAMES", "MAX_TEXT_LENGTH",
           "SYMBOL_NAME_RE", "checked_tree"]

MAX_TEXT_LENGTH = 10_000
"""Longest expression text accepted: bounds parsing work and recursion depth."""

SYMBOL_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
"""A symbol name: an identifier that does not start with ``_``."""

FUNCTION_NAMES = frozenset({"Max", "Min"})
"""Calls allowed in the grammar."""

BINARY_OPS: frozenset[type[ast.operator]] = frozenset(
    {ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod})
"""Binary operators allowed in the grammar."""

COMPARE_OPS: frozenset[type[ast.cmpop]] = frozenset(
    {ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE})
"""Comparisons allowed in relations."""


class _Checker:
    """Walks a parsed expression and refuses every node outside the grammar."""

    def __init__(self, text: str, relation: bool) -> None:
        self.text = text
        self.relation = relation
        self.names: set[str] = set()

    def fail(self, what: str) -> IRFormatError:
        kind = "relation" if self.relation else "size expression"
        return IRFormatError(f"{kind} {self.text!r}: {what}")

    def boolean(self, node: ast.expr) -> None:
        if isinstance(node, ast.BoolOp) and isinstance(node.op, (ast.And, ast.Or)):
            for v in node.values:
                self.boolean(v)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            self.boolean(node.operand)
        elif isinstance(node, ast.Compare):
            if not all(type(op) in COMPARE_OPS for op in node.ops):
                raise self.fail("only == != < <= > >= compare sizes")
            self.arith(node.left)
            for c in node.comparators:
                self.arith(c)
        else:
            raise self.fail("expected a comparison (==, !=, <, <=, >, >=), 'and', 'or' "
                            "or 'not'")

    def arith(self, node: ast.expr) -> None:
        if isinstance(node, ast.Constant):
            if type(node.value) is not int:
                raise self.fail(f"{node.value!r} is not an integer literal")
        elif isinstance(node, ast.Name):
            if not SYMBOL_NAME_RE.fullmatch(node.id) or node.id in FUNCTION_NAMES:
                raise self.fail(f"{node.id!r} is not a symbol name")
            self.names.add(node.id)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in BINARY_OPS:
                raise self.fail(f"operator {type(node.op).__name__} is not allowed "
                                "(only + - * // %)")
            self.arith(node.left)
            self.arith(node.right)
            if isinstance(node.op, (ast.FloorDiv, ast.Mod)) and _is_zero(node.right):
                raise self.fail("division by zero")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub):
                raise self.fail("only unary '-' is allowed")
            self.arith(node.operand)
        elif isinstance(node, ast.Call):
            func = node.func
            if not (isinstance(func, ast.Name) and func.id in FUNCTION_NAMES):
                raise self.fail("the only calls allowed are Max(...) and Min(...)")
            if node.keywords or not node.args:
                raise self.fail(f"{func.id}(...) takes one or more positional arguments")
            for a in node.args:
                if isinstance(a, ast.Starred):
                    raise self.fail(f"{func.id}(...) takes no *arguments")
                self.arith(a)
        else:
            raise self.fail(f"{type(node).__name__} is not allowed in a size expression")


def _is_zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == 0


@functools.lru_cache(maxsize=8192)
def checked_tree(text: str, relation: bool) -> tuple[ast.Expression, frozenset[str]]:
    """``text`` parsed and checked against the grammar; with the symbol names it uses.

    Raises:
        IRFormatError: for text outside the grammar, naming the text.
    """
    kind = "relation" if relation else "size expression"
    if not isinstance(text, str):
        raise IRFormatError(f"{kind} {text!r} is not a string")
    if len(text) > MAX_TEXT_LENGTH:
        raise IRFormatError(f"{kind} {text[:40]!r}... is longer than {MAX_TEXT_LENGTH} "
                            "characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise IRFormatError(f"{kind} {text!r} does not parse: {exc}") from None
    checker = _Checker(text, relation)
    try:
        if relation:
            checker.boolean(tree.body)
        else:
            checker.arith(tree.body)
    except RecursionError:
        raise IRFormatError(f"{kind} {text!r} is nested too deeply") from None
    return tree, frozenset(checker.names)
