"""Which pointer arguments a ``@triton.jit`` kernel writes, read from its source.

A kernel writes memory through ``tl.store``, the ``tl.atomic_*`` operations and the
``store`` method of a block pointer or tensor descriptor. Each writes through a pointer
*derived from* one or more of the kernel's parameters: ``out_ptr + offs``, a variable
assigned from such an expression, ``tl.make_block_ptr(base=out_ptr, ...)``,
``tl.advance(block, ...)``. The analysis follows those derivations (a forward data flow
over the function's assignments, iterated to a fixed point so that loops are covered)
and names the parameters that reach a written pointer.

Rules (table :data:`WRITING_CALLS` / :data:`DATA_CALLS`):

- a value loaded from memory (``tl.load``, an atomic's old value, ``tl.program_id``,
  ``tl.arange``, ...) is data, not a pointer: an index loaded through ``idx_ptr`` does
  not make ``idx_ptr`` written;
- a call of another ``@triton.jit`` function is analysed too, its written parameters
  mapped back to the caller's arguments (its result derives from all its arguments);
- anything the analysis cannot follow (a call it cannot resolve that receives a derived
  pointer, source it cannot parse, recursion) counts as a write of every parameter
  involved: when unsure, an argument is written.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from ember.runtime.user_kernel_spec import base_function

__all__ = ["DATA_CALLS", "WRITING_CALLS", "written_parameters"]

WRITING_CALLS: dict[str, str] = {
    "store": "tl.store(pointer, value) / block_ptr.store / descriptor.store",
    "atomic_add": "tl.atomic_add(pointer, value)",
    "atomic_and": "tl.atomic_and(pointer, value)",
    "atomic_cas": "tl.atomic_cas(pointer, cmp, value)",
    "atomic_max": "tl.atomic_max(pointer, value)",
    "atomic_min": "tl.atomic_min(pointer, value)",
    "atomic_or": "tl.atomic_or(pointer, value)",
    "atomic_xchg": "tl.atomic_xchg(pointer, value)",
    "atomic_xor": "tl.atomic_xor(pointer, value)",
    "store_tensor_descriptor": "tl.store_tensor_descriptor(desc, offsets, value)",
    "scatter": "descriptor.scatter(value, offsets...)",
}
"""Calls (by attribute or function name) that write through their first argument, or
through the object whose method they are."""

DATA_CALLS = frozenset({
    "load", "load_tensor_descriptor", "gather", "program_id", "num_programs", "arange",
    "zeros", "zeros_like", "full", "rand", "randn", "randint", "randint4x",
    *(name for name in WRITING_CALLS if name.startswith("atomic_")),
})
"""Calls whose result is data read or made by the kernel, never a pointer."""

_MAX_DEPTH = 8


class _Unsure(Exception):
    """The analysis cannot follow the kernel: treat every pointer parameter as written."""


def written_parameters(kernel: Any) -> frozenset[str] | None:
    """The names of ``kernel``'s parameters it may write through, or None when the
    analysis cannot tell (then every pointer argument must be taken as written). A
    scalar parameter used in a written pointer's offsets is named too (capture looks
    only at the tensor arguments); ``tl.constexpr`` parameters are not.

    ``kernel`` is a ``@triton.jit`` function or a ``triton.autotune`` /
    ``triton.heuristics`` object wrapping one.
    """
    try:
        return frozenset(_analyse(base_function(kernel), 0, set()))
    except (_Unsure, OSError, TypeError, SyntaxError):
        return None


def _analyse(fn: Any, depth: int, active: set[int]) -> set[str]:
    if depth > _MAX_DEPTH or id(fn) in active:
        raise _Unsure(f"{fn.__qualname__}: recursive or deeply nested calls")
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    func = tree.body[0]
    if not isinstance(func, ast.FunctionDef):
        raise _Unsure(f"{fn.__qualname__} is not a function definition")
    arguments = (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)
    params = [a.arg for a in arguments]
    flow = _Flow(fn, params, depth, active | {id(fn)})
    before = -1
    while before != flow.size():  # assignments inside loops feed earlier statements
        before = flow.size()
        for stmt in func.body:
            flow.visit(stmt)
    # a tl.constexpr (a block size in the offsets) is never written through
    constexprs = {a.arg for a in arguments if a.annotation is not None
                  and ast.unparse(a.annotation).endswith("constexpr")}
    return flow.written - constexprs


class _Flow(ast.NodeVisitor):
    """Which parameters each local variable derives from; which ones are written."""

    def __init__(self, fn: Any, params: list[str], depth: int, active: set[int]) -> None:
        self.fn = fn
        self.scope = dict(fn.__globals__)
        if fn.__closure__:
            self.scope.update(zip(fn.__code__.co_freevars,
                                  (c.cell_contents for c in fn.__closure__)))
        self.derived: dict[str, set[str]] = {p: {p} for p in params}
        self.written: set[str] = set()
        self.depth = depth
        self.active = active

    def size(self) -> int:
        return sum(len(v) for v in self.derived.values()) + len(self.written)

    # ---- assignments ------------------------------------------------------------------

    def _assign(self, target: ast.expr, sources: set[str]) -> None:
        if isinstance(target, ast.Name):
            self.derived.setdefault(target.id, set()).update(sources)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._assign(element, sources)
        elif isinstance(target, ast.Starred):
            self._assign(target.value, sources)
        # attribute / subscript targets: no local variable to follow

    def visit_Assign(self, node: ast.Assign) -> None:
        sources = self.sources(node.value)
        for target in node.targets:
            self._assign(target, sources)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assign(node.target, self.sources(node.value))

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._assign(node.target, self.sources(node.value))

    def visit_For(self, node: ast.For) -> None:
        self._assign(node.target, self.sources(node.iter))
        for stmt in (*node.body, *node.orelse):
            self.visit(stmt)

    def visit_Expr(self, node: ast.Expr) -> None:
        self.sources(node.value)

    def generic_visit(self, node: ast.AST) -> None:
        # statements: visit nested statements, and the calls in their expressions
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                self.visit(child)
            elif isinstance(child, ast.expr):
                self.sources(child)

    # ---- expressions ------------------------------------------------------------------

    def sources(self, expr: ast.expr) -> set[str]:
        """The parameters ``expr``'s value derives from; records the writes of the calls
        inside it."""
        if isinstance(expr, ast.Name):
            return set(self.derived.get(expr.id, ()))
        if isinstance(expr, ast.Call):
            return self._call(expr)
        if isinstance(expr, ast.Lambda):
            raise _Unsure("a lambda inside a kernel")
        found: set[str] = set()
        for child in ast.iter_child_nodes(expr):
            if isinstance(child, ast.expr):
                found |= self.sources(child)
            elif isinstance(child, ast.comprehension):
                found |= self.sources(child.iter)
                for cond in child.ifs:
                    found |= self.sources(cond)
        return found

    def _call(self, call: ast.Call) -> set[str]:
        name, receiver, callee = self._callee(call.func)
        arg_sources = [self.sources(a) for a in call.args]
        kw_sources = {k.arg: self.sources(k.value) for k in call.keywords}
        everything = set().union(*arg_sources, *kw_sources.values())
        if receiver is not None:
            everything |= receiver
        if callee is not None:  # another @triton.jit function
            return self._jit_call(callee, call, arg_sources, kw_sources) | everything
        if name in WRITING_CALLS:
            if receiver is not None:  # block_ptr.store(value), desc.store(offsets, value)
                self.written |= receiver
            else:
                pointer = arg_sources[0] if arg_sources else set()
                for key in ("pointer", "ptr", "desc", "base"):
                    pointer |= kw_sources.get(key, set())
                self.written |= pointer
            return set()
        if name in DATA_CALLS:
            return set()
        if name is None and everything:
            raise _Unsure("a call the analysis cannot resolve receives a pointer")
        return everything

    def _callee(self, func: ast.expr) -> tuple[str | None, set[str] | None, Any]:
        """(called name, the derivation of the object whose method it is, the jit
        function it resolves to)."""
        if isinstance(func, ast.Name):
            value = self.scope.get(func.id)
            return func.id, None, value if _is_jit(value) else None
        if isinstance(func, ast.Attribute):
            root = func.value
            if isinstance(root, ast.Name) and root.id not in self.derived:
                owner = self.scope.get(root.id)
                if inspect.ismodule(owner):
                    value = getattr(owner, func.attr, None)
                    if _is_jit(value):
                        return func.attr, None, value
                    return func.attr, None, None
            # a method of a value: x.to(...), block_ptr.store(...)
            return func.attr, self.sources(root), None
        return None, None, None

    def _jit_call(self, callee: Any, call: ast.Call, arg_sources: list[set[str]],
                  kw_sources: dict[str | None, set[str]]) -> set[str]:
        inner = base_function(callee)
        written = _analyse(inner, self.depth + 1, self.active)
        names = list(inspect.signature(inner).parameters)
        for i, sources in enumerate(arg_sources):
            if i < len(names) and names[i] in written:
                self.written |= sources
        for key, sources in kw_sources.items():
            if key is None or key in written:
                self.written |= sources
        return set()


def _is_jit(value: Any) -> bool:
    module = type(value).__module__ or ""
    return module.startswith("triton.") and inspect.isfunction(getattr(value, "fn", None))
