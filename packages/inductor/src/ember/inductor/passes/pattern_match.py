"""Pattern matching over the runtime IR graph: patterns are data, a match is anchored at
one node and binds names to values.

A pattern is a tree of these records:

=================  ==================================================================
pattern            matches
=================  ==================================================================
``Var(name)``      any value; binds it to ``name`` (a name bound twice must bind the
                   same value)
``Const(name)``    a constant number: a Python scalar argument, a 0-d ``constant``,
                   or the value of a 0-d ``scalar_tensor``/``full`` call, through
                   ``alias`` (its dtype's rounding applied);
                   binds the float to ``name``
``Op(...)``        a ``call`` node whose target is one of ``targets`` and whose
                   positional arguments match ``args`` (sub-patterns, or literals
                   compared by value: ``LAST_DIM`` is ``-1`` or the last dim);
                   ``commutative`` also tries the first two arguments swapped;
                   keyword arguments: none, unless ``kwargs`` names them (each
                   matched like an argument) or is None (any, not matched);
                   ``index``: the value is that result of a call with several
``Bind(name, p)``  ``p``, whose value is also bound to ``name`` (as ``Var``: a name
                   bound earlier must be the same value)
``Alt(options)``   the first option that matches (every option, on backtracking)
``Scaled(inner)``  ``inner``, or ``inner`` multiplied or divided by a ``Const``
                   (``mul``/``div``, ``.Tensor`` or ``.Scalar``); the factors
                   multiply into the binding ``scale_name``
``Matmul(a, b)``   a batched matmul ``a @ b`` in the forms the aot stage emits
                   (``view(bmm(view(clone(expand(a))), ...))``, each step optional)
=================  ==================================================================

:func:`match_at` returns a :class:`Match` (the bindings and every node the pattern
covered) or None. :func:`covered_nodes_single_use` checks that the covered nodes other
than the anchor are read only inside the match (so the rewrite can drop them); the
views a pattern looks through to reach a bound value (``Matmul``'s flattening steps, an
``Op`` marked ``shared``) are covered too but may be read elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch
from ember.runtime.ir import Argument, Graph, Node, TensorMeta, ValueRef


class _LastDim:
    """The literal ``-1`` or the index of the last dim of the node's first argument."""

    def __repr__(self) -> str:
        return "LAST_DIM"


LAST_DIM = _LastDim()


@dataclass(frozen=True)
class Var:
    """Any value, bound to ``name``."""

    name: str


@dataclass(frozen=True)
class Const:
    """A constant number, bound (as a float) to ``name``."""

    name: str


@dataclass(frozen=True)
class Op:
    """A call of one of ``targets`` with positional arguments matching ``args``; the
    call's value is bound to ``name`` when given."""

    targets: tuple[str, ...]
    args: tuple[PatternArg, ...]
    name: str | None = None
    commutative: bool = False
    shared: bool = False
    """The call may be read outside the match too (a view of an input: not dropped)."""
    kwargs: tuple[tuple[str, PatternArg], ...] | None = ()
    """The keyword arguments the call has, each matched like a positional one (by
    default none); None: any keyword arguments, not looked at."""
    index: int | None = None
    """The value is result ``index`` of the call (``native_dropout(x, p, True)[0]``);
    None: the call has one result."""


@dataclass(frozen=True)
class Bind:
    """``inner``, its value bound to ``name`` too: the same value reached on two paths
    (the scores under both the softmax and a test of the scores) binds one name."""

    name: str
    inner: Pattern


@dataclass(frozen=True)
class Alt:
    """One of ``options``."""

    options: tuple[Pattern, ...]


@dataclass(frozen=True)
class Scaled:
    """``inner`` times or divided by constants (none included); the product of the
    factors is bound to ``scale_name`` (multiplied into an earlier binding)."""

    inner: Pattern
    scale_name: str


@dataclass(frozen=True)
class Matmul:
    """A batched matrix multiply ``a @ b`` over equal batch dims, as the aot stage
    writes ``torch.matmul`` of tensors of 3 or more dims."""

    a: Pattern
    b: Pattern


Pattern = Var | Const | Op | Bind | Alt | Scaled | Matmul
PatternArg = Pattern | _LastDim | None | bool | int | float | str | torch.dtype | tuple[object, ...]


@dataclass
class Match:
    """A successful match: ``bindings`` (name -> value; scales and constants are
    floats), the names of the nodes the pattern covered, anchor first, and those of
    them that may be read elsewhere (``shared``)."""

    anchor: Node
    bindings: dict[str, object] = field(default_factory=dict)
    covered: list[str] = field(default_factory=list)
    shared: frozenset[str] = frozenset()

    def value(self, name: str) -> ValueRef:
        """The value bound to ``name``.

        Raises:
            TypeError: if ``name`` is bound to a number, not a value.
        """
        v = self.bindings[name]
        if not isinstance(v, ValueRef):
            raise TypeError(f"pattern binding {name!r} is {v!r}, not a value")
        return v

    def number(self, name: str, default: float | None = None) -> float:
        """The number bound to ``name`` (``default`` when unbound).

        Raises:
            KeyError: unbound and no default.
        """
        if name not in self.bindings:
            if default is None:
                raise KeyError(name)
            return default
        v = self.bindings[name]
        assert isinstance(v, float)
        return v


# bindings, covered nodes, covered nodes that may be read elsewhere
_State = tuple[dict[str, object], list[str], frozenset[str]]

_MUL = ("aten::mul.Tensor", "aten::mul.Scalar")
_DIV = ("aten::div.Tensor", "aten::div.Scalar")
_SCALAR_TENSOR = "aten::scalar_tensor.default"
_FULL = "aten::full.default"


class Matcher:
    """Matches patterns in one graph (its nodes by name, and their users); ``tensors``
    are the program's, for ``constant`` nodes."""

    def __init__(self, graph: Graph, tensors: Mapping[str, torch.Tensor] | None = None) -> None:
        self.graph = graph
        self.tensors = tensors or {}
        self.nodes: dict[str, Node] = {n.name: n for n in graph.nodes}
        self.users = graph.users()

    def match_at(self, node: Node, pattern: Pattern) -> Match | None:
        """The first match of ``pattern`` anchored at ``node`` (the pattern's root is
        ``node``'s value), or None."""
        return next(self.matches_at(node, pattern), None)

    def matches_at(self, node: Node, pattern: Pattern) -> Iterator[Match]:
        """Every match of ``pattern`` anchored at ``node``, in the patterns' order of
        preference (``Alt`` options in order; ``Scaled`` takes factors before leaving
        them)."""
        start: _State = ({}, [], frozenset())
        for bindings, covered, shared in self._match(ValueRef(node.name), pattern, start):
            yield Match(node, bindings, covered, shared)

    def meta(self, ref: ValueRef) -> TensorMeta | None:
        """The tensor metadata of a value (None for non-tensors)."""
        meta = self.nodes[ref.node].meta
        if ref.index is not None:
            meta = meta[ref.index] if isinstance(meta, tuple) else None
        return meta if isinstance(meta, TensorMeta) else None

    def covered_nodes_single_use(self, match: Match) -> str | None:
        """None if every covered node other than the anchor is read only by covered
        nodes (and is no graph output); else why not, naming the node."""
        inside = set(match.covered)
        exempt = self._views_of_unmatched_values(match)
        for name in match.covered[1:]:
            if name in exempt:
                continue
            for user in self.users.get(name, []):
                if user.name not in inside:
                    kind = "a graph output" if user.op == "output" else f"%{user.name}"
                    return f"%{name} is also read by {kind}"
        return None

    def _views_of_unmatched_values(self, match: Match) -> set[str]:
        """The shared covered nodes that view values from outside the match only (a
        flattened input may be read elsewhere; a flattened softmax may not)."""
        inside = set(match.covered)
        exempt: set[str] = set()
        for name in reversed(match.covered):  # NOTE: a pattern covers readers first
            node = self.nodes[name]
            if name in match.shared and all(
                    r.node not in inside or r.node in exempt for r in node.inputs()):
                exempt.add(name)
        return exempt

    # -- matching ---------------------------------------------------------------------
    def _match(self, value: Argument, pattern: PatternArg, state: _State) -> Iterator[_State]:
        if isinstance(pattern, Var):
            yield from self._bind(pattern.name, value, state)
        elif isinstance(pattern, Const):
            number = self._constant(value)
            if number is not None:
                yield from self._bind(pattern.name, number, state)
        elif isinstance(pattern, Op):
            yield from self._match_op(value, pattern, state)
        elif isinstance(pattern, Bind):
            for bound in self._bind(pattern.name, value, state):
                yield from self._match(value, pattern.inner, bound)
        elif isinstance(pattern, Alt):
            for option in pattern.options:
                yield from self._match(value, option, state)
        elif isinstance(pattern, Scaled):
            yield from self._match_scaled(value, pattern, state)
        elif isinstance(pattern, Matmul):
            yield from self._match_matmul(value, pattern, state)
        elif _same_literal(value, pattern):
            yield state

    def _bind(self, name: str, value: object, state: _State) -> Iterator[_State]:
        bindings, covered, shared = state
        if name in bindings:
            if bindings[name] == value:
                yield state
            return
        yield {**bindings, name: value}, covered, shared

    def _call(self, value: Argument, targets: tuple[str, ...],
              index: int | None = None) -> Node | None:
        if not isinstance(value, ValueRef) or value.index != index:
            return None
        node = self.nodes.get(value.node)
        if node is None or node.op != "call" or node.target not in targets:
            return None
        return node

    def _match_op(self, value: Argument, pattern: Op, state: _State) -> Iterator[_State]:
        node = self._call(value, pattern.targets, pattern.index)
        if node is None or len(node.args) < len(pattern.args):
            return
        if pattern.kwargs is not None and set(node.kwargs) != {k for k, _ in pattern.kwargs}:
            return
        if pattern.name is not None and pattern.name in state[0] \
                and state[0][pattern.name] != value:
            return
        orders = [node.args]
        if pattern.commutative and len(node.args) >= 2:
            orders.append((node.args[1], node.args[0], *node.args[2:]))
        keywords = [(node.kwargs[k], p) for k, p in pattern.kwargs or ()]
        for args in orders:
            bindings, covered, shared = state
            if pattern.shared:
                shared = shared | {node.name}
            if pattern.name is not None:
                bindings = {**bindings, pattern.name: value}
            start: _State = (bindings, [*covered, node.name], shared)
            pairs = [*zip(args, pattern.args), *keywords]
            yield from self._match_arguments(node, pairs, 0, start)

    def _match_arguments(self, node: Node, pairs: list[tuple[Argument, PatternArg]], i: int,
                         state: _State) -> Iterator[_State]:
        if i == len(pairs):
            yield state
            return
        arg, pattern = pairs[i]
        if isinstance(pattern, _LastDim):
            if arg == -1 or arg == self._last_dim(node):
                yield from self._match_arguments(node, pairs, i + 1, state)
            return
        for next_state in self._match(arg, pattern, state):
            yield from self._match_arguments(node, pairs, i + 1, next_state)

    def _last_dim(self, node: Node) -> int | None:
        first = node.args[0] if node.args else None
        meta = self.meta(first) if isinstance(first, ValueRef) else None
        return meta.ndim - 1 if meta is not None else None

    def _match_scaled(self, value: Argument, pattern: Scaled, state: _State) -> Iterator[_State]:
        node = self._call(value, (*_MUL, *_DIV))
        if node is not None and len(node.args) == 2 and not node.kwargs:
            operands = [(node.args[0], node.args[1])]
            if node.target in _MUL:
                operands.append((node.args[1], node.args[0]))
            for tensor, factor in operands:
                number = self._constant(factor)
                if number is None or number == 0.0:
                    continue
                factor_value = number if node.target in _MUL else 1.0 / number
                bindings, covered, shared = state
                old = bindings.get(pattern.scale_name, 1.0)
                assert isinstance(old, float)
                scaled: _State = ({**bindings, pattern.scale_name: old * factor_value},
                                  [*covered, node.name], shared)
                yield from self._match_scaled(tensor, pattern, scaled)
        yield from self._match(value, pattern.inner, state)

    def _match_matmul(self, value: Argument, pattern: Matmul, state: _State) -> Iterator[_State]:
        covered: list[str] = []
        result = self._meta_of(value)
        ref = value
        view = self._call(ref, ("aten::view.default", "aten::_unsafe_view.default"))
        if view is not None:
            covered.append(view.name)
            ref = view.args[0]
        bmm = self._call(ref, ("aten::bmm.default",))
        if bmm is None or result is None:
            return
        covered.append(bmm.name)
        a, a_steps = self._unflatten(bmm.args[0])
        b, b_steps = self._unflatten(bmm.args[1])
        steps = [*a_steps, *b_steps]
        if not self._is_matmul_shape(a, b, result) or not self._flattens(bmm, a, b, result):
            return
        bindings, done, shared = state
        start: _State = (bindings, [*done, *covered, *steps], shared | set(steps))
        for after_a in self._match(a, pattern.a, start):
            yield from self._match(b, pattern.b, after_a)

    def _unflatten(self, arg: Argument) -> tuple[Argument, list[str]]:
        """Peel the ``view(clone(expand(x)))`` the aot stage puts around a bmm operand
        (each step optional; ``expand`` only when it keeps the sizes)."""
        steps: list[str] = []
        ref = arg
        for targets in (("aten::view.default", "aten::_unsafe_view.default"),
                        ("aten::clone.default",), ("aten::expand.default",)):
            node = self._call(ref, targets)
            if node is None:
                continue
            source = node.args[0]
            if targets == ("aten::expand.default",):
                before, after = self._meta_of(source), self._meta_of(ref)
                if before is None or after is None or before.sizes != after.sizes:
                    break
            steps.append(node.name)
            ref = source
        return ref, steps

    def _is_matmul_shape(self, a: Argument, b: Argument, result: TensorMeta) -> bool:
        ma, mb = self._meta_of(a), self._meta_of(b)
        if ma is None or mb is None or ma.ndim < 3 or ma.ndim != mb.ndim:
            return False
        batch = ma.sizes[:-2]
        return (mb.sizes[:-2] == batch and ma.sizes[-1] == mb.sizes[-2]
                and result.sizes == (*batch, ma.sizes[-2], mb.sizes[-1]))

    def _flattens(self, bmm: Node, a: Argument, b: Argument, result: TensorMeta) -> bool:
        """The bmm's operands and result are ``a``, ``b`` and ``result`` with their batch
        dims flattened into one (the views kept the last two dims)."""
        metas = [self._meta_of(bmm.args[0]), self._meta_of(bmm.args[1]),
                 self._meta_of(ValueRef(bmm.name))]
        for flat, full in zip(metas, (self._meta_of(a), self._meta_of(b), result)):
            if flat is None or full is None or flat.ndim != 3 or flat.sizes[1:] != full.sizes[-2:]:
                return False
        return True

    def _meta_of(self, value: Argument) -> TensorMeta | None:
        return self.meta(value) if isinstance(value, ValueRef) else None

    def _constant(self, value: Argument) -> float | None:
        """The number ``value`` stands for: a Python scalar, or a 0-d constant call."""
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            return float(value)
        alias = self._call(value, ("aten::alias.default",))
        while alias is not None:
            value = alias.args[0]
            alias = self._call(value, ("aten::alias.default",))
        folded = (self.nodes.get(value.node)
                  if isinstance(value, ValueRef) and value.index is None else None)
        if folded is not None and folded.op == "constant":
            tensor = self.tensors.get(folded.target)
            if tensor is None or tensor.dim() != 0 or not tensor.is_floating_point():
                return None
            return float(tensor.item())
        node = self._call(value, (_SCALAR_TENSOR, _FULL))
        if node is None or not isinstance(node.meta, TensorMeta) or node.meta.sizes != ():
            return None
        fill = node.args[0] if node.target == _SCALAR_TENSOR else node.args[1]
        if isinstance(fill, bool) or not isinstance(fill, (int, float)):
            return None
        # NOTE: the tensor holds the number rounded to its dtype; that is what eager uses
        return float(torch.tensor(float(fill), dtype=node.meta.dtype).item())


def _same_literal(value: Argument, literal: object) -> bool:
    if isinstance(literal, float) and isinstance(value, float) and math.isnan(literal):
        return math.isnan(value)
    return type(value) is type(literal) and value == literal
