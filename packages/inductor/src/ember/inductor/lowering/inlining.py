"""When a ``Lazy`` value is stored in a buffer instead of inlined into its consumers.

Inlining (recomputing an element function in every consumer) is the default: it saves a
store and a load per element. These cases cost more than they save:

- **too large**: an element function past ``MAX_INLINED_STATEMENTS`` statements or
  ``MAX_INLINED_BUFFERS`` buffers (a residual stream ``x = x + f(x)`` would otherwise grow
  with the depth of the model), or one whose loads index through more than
  ``MAX_INLINED_INDEX_TERMS`` terms (chained reshapes over symbolic sizes);
- **costly and broadcast**: a value computed with a costly op (``COSTLY_OPS``: ``exp``,
  ``cos``, ...) that a consumer reads broadcast over at least ``BROADCAST_STORE_FACTOR``
  times as many elements, through any chain of views. Rotary position embeddings are the
  case: ``cos``/``sin`` of a (batch, seq, head_dim) angle, read by the queries and keys of
  every head of every layer; inlined, each element's ``cos`` was computed
  heads x layers x 2 times;
- **shared and wide**: a value with several consumers that loads ``SHARED_STORE_LOADS``
  or more buffers of its own size. A residual stream ``h = h + f(h)`` is read by the next
  layer's norm and by the next residual add; inlined, every layer re-read the embedding
  and every earlier layer's output (kernels grew with the depth until ``too_large``).
  Stored, the norm's kernel computes it and stores it on the way (one store, no re-reads);
- **stored anyway**: a concatenation of at least ``STORED_CAT_PIECES`` tensors that a
  matmul reads (through views: the matmul stores it, as an extern's operand or a
  template's, a prologue taking at most two buffers) and another consumer reads too. The
  other consumers read the stored buffer instead of recomputing the concatenation's
  masked loads, one per piece, per element: a GPT's qkv bias gradient sums the
  concatenated ``dq``, ``dk``, ``dv`` that its weight gradient's matmul reads (on the CPU
  machine 113 us a call for 128 x 384 floats, recomputed).
"""

from __future__ import annotations

import sympy
from ember.inductor.loop_ir import COSTLY_OPS, Add, Compute, FloorDiv, IndexExpr, Mod, Mul, Sym
from ember.inductor.loop_ir.symbolic_index import from_ir, hint
from ember.inductor.lowering.values import Lazy, numel, probe
from ember.runtime.ir import Graph, Node, TensorMeta, ValueRef

MAX_INLINED_STATEMENTS = 96
MAX_INLINED_BUFFERS = 8
# A value whose loads index through more terms than this is stored: each reshape of an
# inlined value over symbolic sizes nests the floor divisions and remainders of the view
# before it, so a chain of them grows the index without bound (LongT5's blocks of a
# padded symbolic length printed 20,000-character indices; lowering took minutes)
MAX_INLINED_INDEX_TERMS = 400

BROADCAST_STORE_FACTOR = 2
# Division and square roots (a batch norm's per-channel ``1 / sqrt(var + eps)``): on a
# device listed here, a value computed with one of these and read broadcast over at
# least this many times its elements is stored too. Inlined, every element of a CPU
# activation ran a vector square root and division (MobileNet-v2's batch norm + relu6
# kernels were bound by them, one thread: its kernels 6.4 -> 4.4 ms a call). Not on a
# GPU, whose memory-bound kernels hide them (and whose split reductions it would change).
DIVISION_OPS = frozenset({"sqrt", "rsqrt", "reciprocal", "truediv"})
DIVISION_STORE_FACTOR: dict[str, int] = {"cpu": 16}
# A value with several consumers that loads this many buffers of its own size is stored.
SHARED_STORE_LOADS = 3
# A concatenation of at least this many pieces that a matmul reads, read by another
# consumer too, is stored at its definition (the "stored anyway" case above).
STORED_CAT_PIECES = 3
CAT_TARGETS = frozenset({"aten::cat.default"})
MATMUL_TARGETS = frozenset({
    "aten::mm.default", "aten::addmm.default", "aten::bmm.default", "aten::baddbmm.default",
})

# Views of their first argument, and same-size copies: a broadcast behind them counts as a
# broadcast of the value itself.
VIEW_TARGETS = frozenset({
    "aten::view.default", "aten::_unsafe_view.default", "aten::reshape.default",
    "aten::unsqueeze.default", "aten::squeeze.dim", "aten::squeeze.dims",
    "aten::squeeze.default", "aten::expand.default", "aten::permute.default",
    "aten::t.default", "aten::transpose.int", "aten::slice.Tensor", "aten::select.int",
    "aten::alias.default", "aten::clone.default", "aten::_to_copy.default",
})


def too_large(value: Lazy) -> bool:
    """Whether inlining ``value`` into its consumers would cost too much code."""
    b = probe(value)
    buffers = {buf for buf, _ in b.external_loads}
    return (len(b.stmts) > MAX_INLINED_STATEMENTS or len(buffers) > MAX_INLINED_BUFFERS
            or any(index_terms(i) > MAX_INLINED_INDEX_TERMS for _, i in b.external_loads))


def index_terms(index: IndexExpr) -> int:
    """How many terms ``index`` prints (variables, constants, the operations of its
    symbolic sizes), each shared subexpression counted where it prints."""
    seen: dict[int, int] = {}

    def count(x: IndexExpr | int) -> int:
        if id(x) in seen:
            return seen[id(x)]
        if isinstance(x, Sym):
            n = sum(1 for _ in sympy.preorder_traversal(x.expr))
        elif isinstance(x, Add):
            n = 1 + sum(count(t) for t in x.terms)
        elif isinstance(x, Mul):
            n = 1 + sum(count(f) for f in x.factors)
        elif isinstance(x, (FloorDiv, Mod)):
            n = 1 + count(x.expr) + count(x.divisor)
        else:
            n = 1
        seen[id(x)] = n
        return n

    return count(index)


def costly(value: Lazy, ops: frozenset[str] = COSTLY_OPS) -> bool:
    """Whether computing one element of ``value`` calls a costly op (``COSTLY_OPS``, or
    the given ``ops``)."""
    return any(isinstance(s, Compute) and s.op in ops for s in probe(value).stmts)


class Uses:
    """The consumers of each node of a graph, and how many elements they compute."""

    def __init__(self, graph: Graph, device: str = "cpu") -> None:
        self._division_factor = DIVISION_STORE_FACTOR.get(device)
        self._users: dict[str, list[Node]] = {n.name: [] for n in graph.nodes}
        for n in graph.nodes:
            for name in sorted(_referenced(n.args) | _referenced(tuple(n.kwargs.values()))):
                if name in self._users:
                    self._users[name].append(n)
        self._widest: dict[str, int] = {}
        self._nodes = {n.name: n for n in graph.nodes}

    def stored_anyway(self, name: str) -> bool:
        """Whether node ``name`` is a concatenation of ``STORED_CAT_PIECES`` or more
        tensors that a matmul reads and another consumer reads too (through views; see
        the module docstring)."""
        node = self._nodes.get(name)
        if node is None or node.target not in CAT_TARGETS or not node.args:
            return False
        pieces = node.args[0]
        if not isinstance(pieces, (tuple, list)) or len(pieces) < STORED_CAT_PIECES:
            return False
        consumers = self.consumers(name)
        return len(consumers) >= 2 and any(c.target in MATMUL_TARGETS for c in consumers)

    def consumers(self, name: str, views: frozenset[str] = VIEW_TARGETS) -> list[Node]:
        """The nodes reading node ``name``'s value (each once), the consumers of its views
        (ops of ``views``) in their place."""
        stack, seen, found = [name], set(), []
        while stack:
            for user in self._users.get(stack.pop(), []):
                if user.name in seen:
                    continue
                seen.add(user.name)
                if user.target in views:
                    stack.append(user.name)
                else:
                    found.append(user)
        return found

    def count(self, name: str) -> int:
        """How many nodes consume node ``name``."""
        return len(self._users.get(name, []))

    def users(self, name: str) -> list[Node]:
        """The nodes that consume node ``name`` (each once)."""
        return self._users.get(name, [])

    def widest(self, name: str) -> int:
        """The most elements any consumer of node ``name`` computes, looking through
        views (0: no tensor consumer)."""
        if name not in self._widest:
            self._widest[name] = 0  # a cycle cannot happen in SSA; this guards recursion
            best = 0
            for user in self._users.get(name, []):
                best = max(best, _numel_of(user))
                if user.target in VIEW_TARGETS:
                    best = max(best, self.widest(user.name))
            self._widest[name] = best
        return self._widest[name]

    def broadcast_costly(self, name: str, value: Lazy) -> bool:
        """Whether ``value`` (node ``name``'s result) should be stored because a
        consumer broadcasts it and recomputing it per element costs more (see the module
        docstring)."""
        n = hint(numel(value.sizes))  # symbolic sizes: compared at their hints
        if n <= 0 or self.widest(name) < BROADCAST_STORE_FACTOR * n:
            return False
        factor = self._division_factor
        return costly(value) or (factor is not None and self.widest(name) >= factor * n
                                 and costly(value, DIVISION_OPS))


def _referenced(args: tuple[object, ...]) -> set[str]:
    found: set[str] = set()
    for a in args:
        if isinstance(a, ValueRef):
            found.add(a.node)
        elif isinstance(a, (tuple, list)):
            found |= _referenced(tuple(a))
    return found


def _numel_of(node: Node) -> int:
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    best = 0
    for m in metas:
        if isinstance(m, TensorMeta):
            best = max(best, hint(numel(tuple(from_ir(s) for s in m.sizes))))
    return best
