"""What an operator does to its arguments, read from its schema: in-place views,
mutations, and the functional operator that replaces a mutating one (found by name, or
listed: :data:`ember.aot.amp_ops.AMP_FUNCTIONAL_VARIANTS`). (The questions
every stage asks, such as whether an op is a view or is pure, are the runtime's:
:mod:`ember.runtime.ir.op_queries`.)

The schema's alias annotations say it: ``Tensor(a!) self`` is written in place,
``-> Tensor(a)`` returns a view of the argument annotated ``(a)``. A few ops mutate
arguments their schema does not annotate; they are listed in
:data:`UNANNOTATED_MUTATIONS`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from ember.aot.amp_ops import AMP_FUNCTIONAL_VARIANTS
from ember.runtime.ir import (
    Argument,
    IRFormatError,
    Node,
    is_view,
    normalize_argument,
    operator_schema,
    resolve_op,
)
from ember.runtime.ir.op_queries import mutated_arguments


@dataclass(frozen=True)
class Mutation:
    """How to run a mutating op functionally.

    ``functional``: the op to call instead (same arguments). ``writes``: for each mutated
    argument position, the index of the functional op's result holding its new value
    (None when the functional op returns a single tensor). ``aliased_returns``: for each
    result of the original op that aliases a mutated argument, that argument's position.
    ``plain_returns``: how many leading results of the functional op are the original
    op's own (non-aliasing) results.
    """

    functional: str
    writes: tuple[tuple[int, int | None], ...]
    aliased_returns: tuple[tuple[int, int], ...]


# Ops that write into arguments their schema does not mark as written: target ->
# (positions written, position of a bool argument that must be True for the write,
# functional replacement whose extra results are the new values of those arguments).
UNANNOTATED_MUTATIONS: dict[str, tuple[tuple[int, ...], int, str]] = {
    "aten::native_batch_norm.default": (
        (3, 4), 5, "aten::_native_batch_norm_legit_functional.default"
    ),
}


@functools.cache
def is_inplace_view(target: str) -> bool:
    """True for an op that changes only the sizes and strides of its ``self``
    (``squeeze_``, ``unsqueeze_``, ``t_``, ``transpose_``, ``as_strided_``, ...) and whose
    functional form is a view op (``resize_`` is not one: it may reallocate)."""
    op = resolve_op(target)
    if torch.Tag.inplace_view not in op.tags or target == "aten::resize_.default":
        return False
    try:
        return is_view(mutation_of(target).functional)
    except IRFormatError:
        return False


def mutated_args(node: Node) -> tuple[int, ...]:
    """The schema argument indices call ``node`` writes in place: what its schema
    annotates as written (``Tensor(a!)``, which ``torch.library.custom_op`` writes for
    ``mutates_args``; keyword-only ``out=`` arguments included) and is passed a value,
    plus the unannotated writes of :data:`UNANNOTATED_MUTATIONS`. The one "which
    arguments does this call mutate" rule of the aot stage; the schema part is the
    runtime's :func:`ember.runtime.ir.op_queries.mutated_arguments`, which other stages
    ask.

    Raises:
        IRFormatError: if ``node.target`` is not a registered operator.
    """
    if node.op != "call":
        return ()
    if node.target in UNANNOTATED_MUTATIONS:
        return mutated_positions(node.target, node.args)
    return mutated_arguments(node)


def mutated_positions(target: str, args: tuple[object, ...]) -> tuple[int, ...]:
    """Positional indices of the arguments this call writes in place (empty if none).

    Keyword-only written arguments (``out=``) are not positions: see
    :func:`out_variant_of`.
    """
    special = UNANNOTATED_MUTATIONS.get(target)
    if special is not None:
        positions, flag, _ = special
        if len(args) > flag and args[flag] is True:
            return tuple(p for p in positions if p < len(args) and args[p] is not None)
        return ()
    return _annotated_writes(target)


@functools.cache
def _annotated_writes(target: str) -> tuple[int, ...]:
    schema = operator_schema(target)
    written: list[int] = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write and not arg.kwarg_only:
            written.append(i)
    return tuple(written)


@dataclass(frozen=True)
class OutVariant:
    """How to run an ``out=`` op functionally: call ``functional`` with the same
    arguments less the ``out`` ones; its result ``k`` (None: its only result) is the new
    value of the keyword argument ``outs[k]``."""

    functional: str
    outs: tuple[tuple[str, int | None], ...]


@functools.cache
def out_arguments(target: str) -> tuple[str, ...]:
    """Names of the keyword-only arguments ``target`` writes (its ``out=`` arguments)."""
    schema = operator_schema(target)
    return tuple(a.name for a in schema.arguments
                 if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)


@functools.cache
def out_variant_of(target: str) -> OutVariant:
    """The functional overload of ``out=`` op ``target``: the overload of the same op
    whose arguments are ``target``'s less the written keyword ones and that returns one
    tensor per ``out`` argument (``mm.out`` → ``mm.default``).

    Raises:
        IRFormatError: if torch registers no such overload.
    """
    schema = operator_schema(target)
    outs = out_arguments(target)
    kept = [a for a in schema.arguments if a.name not in outs]
    namespace, rest = target.split("::", 1)
    name = rest.split(".", 1)[0]
    tried: list[str] = []
    for overload in _overloads(namespace, name):
        candidate = f"{namespace}::{name}.{overload}"
        v = _schema_or_none(candidate)
        if candidate == target or v is None:
            continue
        tried.append(candidate)
        if (any(a.alias_info is not None and a.alias_info.is_write for a in v.arguments)
                or len(v.arguments) != len(kept) or len(v.returns) != len(outs)):
            continue
        if all(a.name == b.name and str(a.type) == str(b.type)
               for a, b in zip(kept, v.arguments)):
            if len(outs) == 1:
                return OutVariant(candidate, ((outs[0], None),))
            return OutVariant(candidate, tuple((o, k) for k, o in enumerate(outs)))
    raise IRFormatError(
        f"{target} writes its out= argument(s) {', '.join(outs)} and torch registers no "
        f"functional overload of {namespace}::{name} with the other arguments "
        f"(tried {', '.join(tried) or 'none'}); the aot stage cannot functionalize it"
    )


@functools.cache
def mutation_of(target: str) -> Mutation:
    """The functional replacement of mutating op ``target``.

    Raises:
        IRFormatError: if torch registers no functional counterpart.
    """
    special = UNANNOTATED_MUTATIONS.get(target)
    if special is not None:
        positions, _, functional = special
        n_plain = len(operator_schema(target).returns)
        return Mutation(functional, tuple((p, n_plain + k) for k, p in enumerate(positions)),
                        ())
    schema = operator_schema(target)
    written = _annotated_writes(target)
    aliased: list[tuple[int, int]] = []
    for j, ret in enumerate(schema.returns):
        if ret.alias_info is not None and ret.alias_info.is_write:
            sets = ret.alias_info.before_set
            for p in written:
                info = schema.arguments[p].alias_info
                if info is not None and info.before_set == sets:
                    aliased.append((j, p))
    if target in AMP_FUNCTIONAL_VARIANTS:
        functional, writes = AMP_FUNCTIONAL_VARIANTS[target]
        return Mutation(functional, writes, tuple(aliased))
    namespace, rest = target.split("::", 1)
    name, _overload = rest.split(".", 1)
    stem = name.removesuffix("_")
    if name.startswith("__i") and name.endswith("__"):
        stem = f"__{name[3:]}"  # Python's in-place operators: __ilshift__ -> __lshift__
    candidates: list[str] = []
    if name.endswith("_") and written == (0,):
        candidates += [f"{namespace}::{stem}.{o}" for o in _overloads(namespace, stem)]
    candidates += [f"{namespace}::{stem}_functional.{o}"
                   for o in _overloads(namespace, f"{stem}_functional")]
    for candidate in candidates:
        variant = _schema_or_none(candidate)
        if variant is None or not _same_arguments(schema, variant):
            continue
        n_returns = len(variant.returns)
        if name.endswith("_") and written == (0,) and n_returns == 1:
            return Mutation(candidate, ((0, None),), tuple(aliased))
        n_plain = len(schema.returns) - len(aliased)
        if n_returns == n_plain + len(written):
            writes = tuple((p, n_plain + k) for k, p in enumerate(written))
            return Mutation(candidate, writes, tuple(aliased))
    raise IRFormatError(
        f"{target} mutates its arguments and torch registers no functional variant "
        f"with the same arguments (tried {', '.join(candidates) or 'none'})"
    )


def _overloads(namespace: str, name: str) -> list[str]:
    packet = getattr(getattr(torch.ops, namespace), name, None)
    if packet is None:
        return []
    return [str(o) for o in packet.overloads()]


def _same_arguments(mutating: torch.FunctionSchema, functional: torch.FunctionSchema) -> bool:
    """Whether ``functional`` takes the same arguments (names and types, positional and
    keyword-only) as ``mutating`` and writes none of them."""
    if any(a.alias_info is not None and a.alias_info.is_write for a in functional.arguments):
        return False
    if len(mutating.arguments) != len(functional.arguments):
        return False
    return all(
        a.name == b.name and str(a.type) == str(b.type) and a.kwarg_only == b.kwarg_only
        for a, b in zip(mutating.arguments, functional.arguments)
    )


def _schema_or_none(target: str) -> torch.FunctionSchema | None:
    try:
        return operator_schema(target)
    except IRFormatError:
        return None


def with_defaults(target: str, args: tuple[Argument, ...],
                  kwargs: dict[str, Argument]) -> tuple[tuple[Argument, ...], dict[str, Argument]]:
    """``args``/``kwargs`` of a call of ``target`` with the omitted positional arguments
    filled in from the schema's defaults (torch drops trailing defaults when it
    dispatches; the functional variant may not share them: ``bernoulli_.float`` has
    ``p=0.5``, ``bernoulli.p`` has no default)."""
    schema = operator_schema(target)
    filled = list(args)
    for arg in schema.arguments[len(args):]:
        if arg.kwarg_only or arg.name in kwargs or not arg.has_default_value():
            break
        filled.append(normalize_argument(arg.default_value))
    return tuple(filled), kwargs
