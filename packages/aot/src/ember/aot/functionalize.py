"""Functionalization: a graph with in-place ops and views → a graph of functional ops.

The pass walks the graph once and tracks, for every value, the *storage* it lives in and
the chain of view ops that leads from the storage's base to it. Then:

* an in-place op becomes its functional form; its result is written back to the storage
  base through the inverse of every view on the way (:mod:`ember.aot.view_inverse`), and
  the base's new value is what later reads see (views of it are replayed on demand);
* a custom operator that writes its arguments (``mutates_args``) runs on fresh clones of
  them, which are their new values from then on (:mod:`ember.aot.custom_mutations`);
* an ``out=`` op becomes the overload with the same arguments less ``out``
  (``mm.out`` → ``mm``), whose results are written into the ``out`` tensors;
  ``resize_`` makes ``self`` an ``as_strided`` view of its storage (or, when it grows
  past it, the functional ``resize``);
* a storage that belongs to a graph input and was written ends as an extra output
  labelled ``MUTATED_INPUT`` (target: the placeholder); the caller copies it back;
* a graph output that is an input, a view of an input, or a view of another output is
  labelled ``ALIASED_OUTPUT``; ``Program.metadata["aot"]["aliased_outputs"]`` says how
  to rebuild it as a view (sizes, strides and storage offset relative to the base).

Outputs keep their order: user outputs, then the mutated inputs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from ember.aot.amp_ops import AMP_EXPANSIONS
from ember.aot.builder import GraphBuilder
from ember.aot.custom_mutations import (
    functionalize_custom_call,
    has_functional_variant,
    is_custom_operator,
)
from ember.aot.hidden_writes import DETACH, hidden_write_call, without_grad_where_captured
from ember.aot.input_overlap import alias_roots, element_range, kept_aliases, layout
from ember.aot.op_effects import (
    is_inplace_view,
    mutated_args,
    mutated_positions,
    mutation_of,
    out_arguments,
    out_variant_of,
    with_defaults,
)
from ember.aot.output_aliases import aliased_output
from ember.aot.storage_rebinds import STORAGE_REBINDS
from ember.aot.symbolic_sizes import (
    as_argument,
    difference,
    from_argument,
    is_static_meta,
    same_sizes,
    sizes_argument,
    total,
)
from ember.aot.view_inverse import (FLAG_VIEWS, ViewStep, may_overlap, write_back,
                                    write_back_through)
from ember.aot.write_checks import check_write
from ember.runtime.ir import (
    Argument,
    Graph,
    IRFormatError,
    Node,
    OutputKind,
    OutputSpec,
    Program,
    SymInt,
    TensorMeta,
    ValueRef,
    is_view,
)
from ember.runtime.ir.contracts import (
    INPUT_ALIASES_KEY,
    AliasedOutput,
    AotMetadata,
    InputAlias,
    InputAliases,
)
from ember.runtime.stages import StageDeclined

Chain = tuple[ViewStep, ...]
_RESIZE = "aten::resize_.default"
_AS_STRIDED = "aten::as_strided.default"


@dataclass(frozen=True)
class _Alias:
    storage: int
    chain: Chain


@dataclass
class _Storage:
    base: ValueRef  # the storage's current value in the new graph
    root: str | None  # the placeholder it belongs to, if any
    version: int = 0
    constant: str | None = None  # the program tensor it belongs to (constant/get_attr)
    views: dict[Chain, tuple[int, ValueRef]] = field(default_factory=dict)
    # views ending in a ``detach`` written through: their values (own autograd history)
    detached: dict[Chain, ValueRef] = field(default_factory=dict)
    offset: SymInt = 0  # the captured storage offset of the first base


@dataclass
class FunctionalGraph:
    """The result of :func:`functionalize_graph`.

    ``outputs``: one spec per output of ``graph`` (user outputs, then mutated inputs).
    ``aliased_outputs``: how to rebuild each ALIASED_OUTPUT (``metadata["aot"]``'s).
    ``input_aliases``: the input aliases the graph keeps: those of groups it writes a
    member of (:func:`functionalize_graph`).
    """

    graph: Graph
    outputs: list[OutputSpec]
    aliased_outputs: list[AliasedOutput]
    input_aliases: Mapping[str, InputAlias] = field(default_factory=dict)


class _Functionalizer:
    def __init__(self, graph: Graph, input_aliases: Mapping[str, InputAlias]) -> None:
        self.source = graph
        self.input_aliases = input_aliases
        # groups of inputs that partly overlap in memory (no member covers the others)
        self.partial_overlaps: list[list[str]] = []
        self.b = GraphBuilder(graph.symbols)
        self.b.graph.guards = list(graph.guards)
        self.alias: dict[ValueRef, _Alias] = {}
        self.storages: list[_Storage] = []
        self.meta: dict[ValueRef, Any] = {}
        self.placeholder_names = {p.name for p in graph.placeholders}

    # ---- values --------------------------------------------------------------------

    def new_storage(self, ref: ValueRef, new_ref: ValueRef, root: str | None = None) -> None:
        meta = self.b.meta_of(new_ref)
        offset = meta.storage_offset if isinstance(meta, TensorMeta) else 0
        self.storages.append(_Storage(new_ref, root, offset=offset))
        self.alias[ref] = _Alias(len(self.storages) - 1, ())

    def read_chain(self, sid: int, chain: Chain) -> ValueRef:
        """The current value of the view ``chain`` of storage ``sid`` in the new graph."""
        storage = self.storages[sid]
        if not chain:
            return storage.base
        if chain in storage.detached:
            return storage.detached[chain]
        cached = storage.views.get(chain)
        if cached is not None and cached[0] == storage.version:
            return cached[1]
        parent = self.read_chain(sid, chain[:-1])
        step = chain[-1]
        if (step.target == _AS_STRIDED and len(chain) > 1 and step.relative_offset is None
                and DETACH not in {s.target for s in chain}):
            # NOTE: as_strided addresses the storage: taken of the base (the parent may
            # be a copy for the inductor), at the offset relative to the base's
            ref = self._as_strided_of_base(storage, parent, step)
        else:
            ref = step.replay(self.b, parent)
        storage.views[chain] = (storage.version, ref)
        return ref

    def _as_strided_of_base(self, storage: _Storage, parent: ValueRef, step: ViewStep
                            ) -> ValueRef:
        base_meta, parent_meta = self.b.meta_of(storage.base), self.b.meta_of(parent)
        assert isinstance(base_meta, TensorMeta) and isinstance(parent_meta, TensorMeta)
        given = step.args[2] if len(step.args) > 2 else dict(step.kwargs).get("storage_offset")
        relative = (difference(parent_meta.storage_offset, base_meta.storage_offset)
                    if given is None else difference(from_argument(given), storage.offset))
        offset = as_argument(total((base_meta.storage_offset, relative)))
        return self.b.call(_AS_STRIDED, (storage.base, *step.args[:2], offset))

    def read(self, a: Argument) -> Argument:
        """Map an argument of the source graph to the new graph (current values)."""
        if isinstance(a, ValueRef):
            alias = self.alias.get(a)
            if alias is None:
                raise IRFormatError(f"functionalize: {a} is used before it is defined")
            return self.read_chain(alias.storage, alias.chain)
        if isinstance(a, tuple):
            return tuple(self.read(x) for x in a)
        return a

    def write(self, target: ValueRef, new: ValueRef) -> None:
        """Record that the value ``target`` (source graph) now holds ``new``."""
        alias = self.alias[target]
        storage = self.storages[alias.storage]
        target_meta = self.meta.get(target)
        new_meta = self.b.meta_of(new)
        if (isinstance(target_meta, TensorMeta) and isinstance(new_meta, TensorMeta)):
            if new_meta.dtype != target_meta.dtype:
                new = self.b.call("aten::_to_copy.default", (new,), {"dtype": target_meta.dtype})
            if not same_sizes(new_meta.sizes, target_meta.sizes):
                new = self.b.call("aten::expand.default",
                                  (new, sizes_argument(target_meta.sizes)))
                new = self.b.call("aten::clone.default", (new,))
        value = new
        chain = alias.chain
        written: dict[Chain, ValueRef] = {}  # detached views on the way: their values
        # NOTE: a chain through an overlapping view, or with an as_strided step (which
        # addresses the storage, not its parent), is written back at once
        start, targets = len(chain), {s.target for s in chain}
        for j in range(1, len(chain) if DETACH not in targets else 0):
            meta = self.b.meta_of(self.read_chain(alias.storage, chain[:j]))
            if (j == 1 and "aten::as_strided.default" in targets) or (
                    isinstance(meta, TensorMeta) and may_overlap(meta, chain[j - 1].target)):
                parent = self.read_chain(alias.storage, chain[:j - 1])
                value, start = write_back_through(self.b, parent, value, chain[j - 1:]), j - 1
                break
        for k in range(start - 1, -1, -1):
            parent = self.read_chain(alias.storage, chain[:k])
            if chain[k].target == DETACH:
                # NOTE: autograd sees the write in the detached view, not in the tensor
                # it was detached from (hidden_writes.py)
                written[chain[: k + 1]] = value
                value = hidden_write_call(self.b, parent, value)
                continue
            view = self.read_chain(alias.storage, chain[: k + 1])
            value = write_back(self.b, parent, value, chain[k], view)
        old_meta, value_meta = self.b.meta_of(storage.base), self.b.meta_of(value)
        if (isinstance(old_meta, TensorMeta) and old_meta.requires_grad
                and isinstance(value_meta, TensorMeta) and not value_meta.requires_grad
                and isinstance(target_meta, TensorMeta) and not target_meta.requires_grad):
            # NOTE: a view taken under no_grad, written under no_grad: hidden as well
            value = hidden_write_call(self.b, storage.base, value)
        storage.base = value
        storage.version += 1
        if chain:
            storage.views[chain] = (storage.version, new)
        # NOTE: a detached view the write did not go through sees new data, not history
        for other in sorted(set(storage.detached) - set(written), key=len):
            old = storage.detached.pop(other)
            replayed = other[-1].replay(self.b, self.read_chain(alias.storage, other[:-1]))
            storage.detached[other] = hidden_write_call(self.b, old, replayed)
        storage.detached.update(written)

    # ---- nodes ---------------------------------------------------------------------

    def run(self) -> FunctionalGraph:
        for node in self.source.nodes:
            self._record_meta(node)
        self.visit_placeholders(self.source.placeholders)
        for node in self.source.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                return self.finish(node)
            getattr(self, f"visit_{node.op}")(node)
        raise IRFormatError("functionalize: the graph has no output node")

    def _record_meta(self, node: Node) -> None:
        if isinstance(node.meta, tuple):
            for i, m in enumerate(node.meta):
                self.meta[ValueRef(node.name, i)] = m
        else:
            self.meta[ValueRef(node.name)] = node.meta

    def _copy(self, node: Node, args: tuple[Argument, ...], kwargs: dict[str, Argument],
              target: str | None = None, meta: Any = None) -> ValueRef:
        # NOTE: a functional replacement is named after its own op (``mul``, not ``mul_``)
        name = node.name if target is None else target.split("::", 1)[1].split(".", 1)[0]
        return self.b.add(Node(name, node.op, target or node.target, args, kwargs,
                               meta=meta if meta is not None else node.meta,
                               source=node.source))

    def _results(self, node: Node) -> list[ValueRef]:
        if isinstance(node.meta, tuple):
            return [ValueRef(node.name, i) for i in range(len(node.meta))]
        return [ValueRef(node.name)]

    def visit_placeholders(self, placeholders: list[Node]) -> None:
        """Copy the placeholders and give each a storage. Inputs that shared memory at
        capture (``input_aliases``) share one storage, rooted at the member whose memory
        covers the others': the rest are ``as_strided`` views of it, so writes through
        any of them are seen by all and copied back into the root."""
        metas = {p.name: p.meta for p in placeholders}
        root_of, partial = alias_roots(self.input_aliases, metas)
        self.partial_overlaps += partial
        for node in placeholders:
            new = self._copy(node, (), {})
            if root_of.get(node.name, node.name) == node.name:
                self.new_storage(ValueRef(node.name), new, root=node.name)
        for node in placeholders:
            root = root_of.get(node.name, node.name)
            if root == node.name:
                continue
            meta, root_meta = metas[node.name], metas[root]
            assert isinstance(meta, TensorMeta) and isinstance(root_meta, TensorMeta)
            root_alias = self.alias[ValueRef(root)]
            if layout(meta) == layout(root_meta):
                self.alias[ValueRef(node.name)] = root_alias
                continue
            step = ViewStep("aten::as_strided.default",
                            (sizes_argument(meta.sizes), sizes_argument(meta.strides)),
                            relative_offset=difference(meta.storage_offset,
                                                       root_meta.storage_offset))
            self.alias[ValueRef(node.name)] = _Alias(root_alias.storage, (step,))

    def visit_constant(self, node: Node) -> None:
        new = self._copy(node, node.args, dict(node.kwargs))
        self.new_storage(ValueRef(node.name), new)
        self.storages[-1].constant = node.target

    visit_get_attr = visit_constant

    def visit_call(self, node: Node) -> None:
        args = tuple(self.read(a) for a in node.args)
        kwargs = {k: self.read(v) for k, v in node.kwargs.items()}
        written = mutated_positions(node.target, node.args)
        custom_writes = (mutated_args(node) if is_custom_operator(node.target)
                         and not has_functional_variant(node.target) else ())
        if custom_writes:
            functionalize_custom_call(self, node, args, kwargs, custom_writes)
        elif node.target == _RESIZE:
            self._resize_call(node, args)
        elif out_arguments(node.target):
            self._out_call(node, args, kwargs)
        elif node.target in AMP_EXPANSIONS:
            AMP_EXPANSIONS[node.target](self, node, args)
        elif node.target in STORAGE_REBINDS:
            STORAGE_REBINDS[node.target](self, node, args)
        elif written and is_inplace_view(node.target):
            self._inplace_view_call(node, args, kwargs)
        elif written:
            self._functional_call(node, args, kwargs, written)
        elif is_view(node.target) and node.args and isinstance(node.args[0], ValueRef):
            self._view_call(node, args, kwargs)
        else:
            new = self._copy(node, args, kwargs)
            for ref in self._results(node):
                self.new_storage(ref, ValueRef(new.node, ref.index))

    def _view_call(self, node: Node, args: tuple[Argument, ...],
                   kwargs: dict[str, Argument]) -> None:
        src = node.args[0]
        assert isinstance(src, ValueRef)
        base_alias = self.alias[src]
        new = self._copy(node, args, kwargs, target=FLAG_VIEWS.get(node.target))
        storage = self.storages[base_alias.storage]
        for ref in self._results(node):
            step = ViewStep(node.target, args[1:], tuple(sorted(kwargs.items())), ref.index)
            chain = base_alias.chain + (step,)
            self.alias[ref] = _Alias(base_alias.storage, chain)
            if node.target != _AS_STRIDED or not base_alias.chain:  # else: of the base
                storage.views[chain] = (storage.version, ValueRef(new.node, ref.index))

    def _inplace_view_call(self, node: Node, args: tuple[Argument, ...],
                           kwargs: dict[str, Argument]) -> None:
        """An op that changes only the sizes/strides of ``self`` (``squeeze_``,
        ``t_``, ...): the view op it stands for, and ``self`` is that view from now on
        (its data is not written)."""
        src = node.args[0]
        assert isinstance(src, ValueRef)
        if src.node in self.placeholder_names:
            raise StageDeclined(
                f"%{node.name} ({node.target}) changes the sizes or strides of graph input "
                f"{src.node}: the caller's tensor would have to change with it, which a "
                "compiled program does not do (the graph runs eagerly)")
        functional = mutation_of(node.target).functional
        args, kwargs = with_defaults(node.target, args, kwargs)
        new = self._copy(node, args, kwargs, target=functional)
        base_alias = self.alias[src]
        step = ViewStep(functional, args[1:], tuple(sorted(kwargs.items())), None)
        chain = base_alias.chain + (step,)
        storage = self.storages[base_alias.storage]
        storage.views[chain] = (storage.version, new)
        for ref in (src, *self._results(node)):
            self.alias[ref] = _Alias(base_alias.storage, chain)
            self.meta[ref] = node.meta

    def _functional_call(self, node: Node, args: tuple[Argument, ...],
                         kwargs: dict[str, Argument], written: tuple[int, ...]) -> None:
        mutation = mutation_of(node.target)
        args, kwargs = with_defaults(node.target, args, kwargs)
        try:
            meta = without_grad_where_captured(
                self.b.infer_meta(mutation.functional, args, kwargs), node.meta)
        except Exception:  # noqa: BLE001 - ops without meta kernels keep the old meta
            meta = node.meta
        check_write(node, written, mutation.writes, meta, self.meta,
                    lambda r: self.alias[r].storage if r in self.alias else None)
        new = self._copy(node, args, kwargs, target=mutation.functional, meta=meta)
        for position, result in mutation.writes:
            if position not in written:
                continue
            target = node.args[position]
            if isinstance(target, tuple) and result is None:  # a Tensor[] (_foreach_*_)
                # NOTE: the functional op returns the list of new values; each element
                # is a separate write (the list's tensors may be views of anything)
                for k, element in enumerate(target):
                    if not isinstance(element, ValueRef):
                        raise IRFormatError(f"%{node.name}: element {k} of mutated list "
                                            f"argument {position} is not a tensor value")
                    self.write(element, ValueRef(new.node, k))
                continue
            if not isinstance(target, ValueRef):
                raise IRFormatError(f"%{node.name} ({node.target}): mutated argument "
                                    f"{position} is not a tensor value of the graph")
            self.write(target, ValueRef(new.node, result))
        aliased = dict(mutation.aliased_returns)
        plain = 0
        for ref in self._results(node):
            j = ref.index if ref.index is not None else 0
            if j in aliased:
                mutated = node.args[aliased[j]]
                assert isinstance(mutated, ValueRef)
                self.alias[ref] = self.alias[mutated]
            else:
                index = plain if isinstance(meta, tuple) else None
                self.new_storage(ref, ValueRef(new.node, index))
                plain += 1

    def _out_call(self, node: Node, args: tuple[Argument, ...],
                  kwargs: dict[str, Argument]) -> None:
        """An ``out=`` op: its functional overload, whose results are written into the
        ``out`` arguments (converted to their dtype). An ``out`` tensor the op resizes
        (an empty one, usually) is rebound to the result, unless it is (a view of) a
        graph input; the op's own results are the ``out`` arguments."""
        variant = out_variant_of(node.target)
        kwargs = {k: v for k, v in kwargs.items() if k not in dict(variant.outs)}
        try:
            meta = self.b.infer_meta(variant.functional, args, kwargs)
        except Exception:  # noqa: BLE001 - ops without meta kernels keep the old meta
            meta = node.meta
        new = self._copy(node, args, kwargs, target=variant.functional, meta=meta)
        result_metas = meta if isinstance(meta, tuple) else (meta,)
        for name, k in variant.outs:
            target = node.kwargs.get(name)
            if not isinstance(target, ValueRef):
                raise IRFormatError(f"%{node.name}: its out= argument {name!r} is not a value")
            value = ValueRef(new.node, k)
            new_meta = result_metas[k or 0]
            old_meta = self.meta.get(target)
            if (isinstance(new_meta, TensorMeta) and isinstance(old_meta, TensorMeta)
                    and not same_sizes(new_meta.sizes, old_meta.sizes)):
                self._rebind_resized(node, target, value, new_meta)
            else:
                self.write(target, value)
        names = [name for name, _ in variant.outs]
        for ref in self._results(node):
            out_ref = node.kwargs[names[ref.index or 0]]
            assert isinstance(out_ref, ValueRef)
            self.alias[ref] = self.alias[out_ref]

    def _rebind_resized(self, node: Node, target: ValueRef, value: ValueRef,
                        meta: TensorMeta) -> None:
        """``target`` is resized by an out= op: from now on it is ``value`` (a fresh
        storage). A graph input (or a view of one) cannot be rebound: its resize is not
        expressible functionally, so the graph runs eagerly (as eager resizes it)."""
        if self.storages[self.alias[target].storage].root is not None:
            raise StageDeclined(
                f"%{node.name} ({node.target}) resizes its out= argument %{target.node}, "
                "which is (a view of) a graph input: the caller's tensor would have to "
                "change size, which a compiled program does not do (the graph runs "
                "eagerly)")
        old_meta = self.meta.get(target)
        if isinstance(old_meta, TensorMeta) and old_meta.dtype != meta.dtype:
            value = self.b.call("aten::_to_copy.default", (value,), {"dtype": old_meta.dtype})
        self.new_storage(target, value)
        self.meta[target] = meta if not isinstance(old_meta, TensorMeta) else TensorMeta(
            old_meta.dtype, meta.sizes, meta.strides, meta.device)

    def _resize_call(self, node: Node, args: tuple[Argument, ...]) -> None:
        """``resize_``: ``self`` keeps its storage and offset and takes the new sizes
        with contiguous strides. When the new size fits the memory known to hold
        ``self``'s storage, ``self`` becomes that ``as_strided`` view (eager reads the
        same elements); when it grows past it, ``self`` is rebound to the functional
        ``resize`` (the old elements first, then uninitialized ones, as eager)."""
        src = node.args[0]
        meta = node.meta
        if not isinstance(src, ValueRef) or not isinstance(meta, TensorMeta):
            raise IRFormatError(f"%{node.name}: resize_ of something that is not a tensor")
        if node.kwargs.get("memory_format") not in (None, torch.contiguous_format):
            raise IRFormatError(
                f"%{node.name}: resize_ with memory_format={node.kwargs['memory_format']} "
                "is not supported by the aot stage (only the contiguous layout)")
        alias = self.alias[src]
        storage = self.storages[alias.storage]
        base_meta = self.b.meta_of(storage.base)
        old_meta = self.meta.get(src)
        assert isinstance(old_meta, TensorMeta) and isinstance(base_meta, TensorMeta)
        if not all(map(is_static_meta, (meta, old_meta, base_meta))):
            raise IRFormatError(
                f"%{node.name}: resize_ of a tensor with symbolic sizes "
                f"({', '.join(map(str, old_meta.sizes))} to "
                f"{', '.join(map(str, meta.sizes))}) is not supported by the aot stage: "
                "whether the new size fits its storage depends on the sizes")
        if storage.root is not None and tuple(meta.sizes) != tuple(old_meta.sizes):
            raise StageDeclined(
                f"%{node.name}: resize_ changes the shape of (a view of) graph input "
                f"{storage.root}: the caller's tensor would have to change size, which "
                "a compiled program does not do (the graph runs eagerly)")
        numel = meta.numel
        start = int(old_meta.storage_offset)
        if numel == 0 or start + numel <= element_range(base_meta)[1]:
            step = ViewStep("aten::as_strided.default",
                            (sizes_argument(meta.sizes), sizes_argument(meta.strides)),
                            relative_offset=0)
            chain = alias.chain + (step,)
            for ref in (src, *self._results(node)):
                self.alias[ref] = _Alias(alias.storage, chain)
                self.meta[ref] = meta
            return
        new = self.b.call("aten::resize.default", (args[0], sizes_argument(meta.sizes)))
        for ref in (src, *self._results(node)):
            self.new_storage(ref, new)
            self.meta[ref] = meta

    # ---- outputs -------------------------------------------------------------------

    def finish(self, node: Node) -> FunctionalGraph:
        values = node.args[0]
        assert isinstance(values, tuple)
        outputs: list[Argument] = []
        specs: list[OutputSpec] = []
        aliased: list[AliasedOutput] = []
        base_output: dict[int, int] = {}  # storage -> index of the output that is its base
        for i, v in enumerate(values):
            if isinstance(v, ValueRef) and self.alias[v].chain == ():
                base_output.setdefault(self.alias[v].storage, i)
        for i, v in enumerate(values):
            outputs.append(self.read(v))
            spec = OutputSpec()
            if isinstance(v, ValueRef):
                alias = self.alias[v]
                info = aliased_output(i, v, alias.chain == (), self.storages[alias.storage].root,
                                      base_output.get(alias.storage, i), values, self.meta.get)
                if info is not None and not any(s.target in FLAG_VIEWS for s in alias.chain):
                    spec = OutputSpec(OutputKind.ALIASED_OUTPUT, info.base)
                    aliased.append(info)
            specs.append(spec)
        written = {s.root for s in self.storages if s.root is not None and s.version > 0}
        for group in self.partial_overlaps:
            if written & set(group):
                raise StageDeclined(
                    f"inputs {', '.join(group)} partly overlap in memory and the program "
                    "writes one of them; the aot stage cannot express that aliasing")
        for storage in self.storages:
            if storage.constant is not None and storage.version > 0:
                raise IRFormatError(
                    f"the program writes into the tensor {storage.constant!r} it carries "
                    "(a tensor captured from Python, not an input); make it an input "
                    "(a buffer) so the write can be copied back")
            if storage.root is not None and storage.version > 0:
                outputs.append(storage.base)
                specs.append(OutputSpec(OutputKind.MUTATED_INPUT, storage.root))
        self.b.add(Node("output", "output", "output", (tuple(outputs),), source=node.source))
        return FunctionalGraph(self.b.graph, specs, aliased)


def functionalize_graph(graph: Graph,
                        input_aliases: Mapping[str, InputAlias] | None = None) -> FunctionalGraph:
    """Functionalize ``graph`` (see the module docstring). ``input_aliases``: inputs that
    share memory with an earlier input, as the recorder writes them in
    ``Program.metadata["input_aliases"]`` (base name, sizes, strides, storage offset).

    Only the groups whose members overlap and that the graph writes a member of stay
    views of one root (:func:`~ember.aot.input_overlap.kept_aliases`: the others are
    independent inputs).

    Raises:
        IRFormatError: an op mutates its arguments and has no functional variant, or
            the graph is malformed.
    """
    metas = {p.name: p.meta for p in graph.placeholders}
    aliases = kept_aliases(input_aliases or {}, metas)  # disjoint members need no root
    result = _Functionalizer(graph, aliases).run()
    if not aliases:
        return result
    written = {str(s.target) for s in result.outputs if s.kind == OutputKind.MUTATED_INPUT}
    kept = kept_aliases(aliases, metas, written)
    if kept != aliases:  # NOTE: a second walk only for inputs that share memory
        result = _Functionalizer(graph, kept).run()
    return dataclasses.replace(result, input_aliases=kept)


def functionalize(program: Program, graph_name: str = "forward") -> Program:
    """A copy of ``program`` whose graph ``graph_name`` is functional; the input
    mutations and output aliasing move into the signature and ``metadata["aot"]``."""
    aliases = InputAliases.from_program(program).by_input
    result = functionalize_graph(program.graphs[graph_name], aliases)
    out = program.copy()
    if result.input_aliases:
        out.metadata[INPUT_ALIASES_KEY] = InputAliases(dict(result.input_aliases)).to_json()
    else:
        out.metadata.pop(INPUT_ALIASES_KEY, None)
    out.graphs[graph_name] = result.graph
    out.signature.outputs[graph_name] = result.outputs
    aot = AotMetadata.from_program(out) or AotMetadata()
    dataclasses.replace(aot, aliased_outputs=tuple(result.aliased_outputs)).write_to(out)
    return out
