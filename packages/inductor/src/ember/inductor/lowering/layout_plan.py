"""The layout plan: one memory-format decision per tensor for the whole program, the
forward and the backward graph together, made before either is lowered.

Convolutions run fastest on channels-last tensors, and a vendor convolution handed a
tensor in the other format converts it on every call (cuDNN's ``nchwToNhwc`` kernels,
oneDNN's reorders). The lowering already stores what it computes from a channels-last
buffer channels-last (:class:`.layout.LayoutState`), but three kinds of tensor escape
that rule, because their layouts are fixed by the program's metadata:

- tensors the forward saves for the backward: the forward stores each in its traced
  layout (row-major, as fake tensors traced them) and the backward's placeholder expects
  that layout, so a saved convolution output or its input arrives row-major at
  ``convolution_backward``;
- the results of extern calls (``convolution_backward``'s gradients), declared by
  their traced metadata;
- graph inputs saved for the backward (the image, the weights): the backward gets them
  as the caller passed them.

The plan groups the spatial 4-d tensors (``N, C, H, W`` with ``H * W > 1``) of all
graphs into classes that share a layout, by the rules of :data:`.layout_plan_rules.
LAYOUT_RULES` (a pointwise op's operands and result share one; a saved value and the
backward placeholder that receives it share one). A class holding a convolution's or a
``convolution_backward``'s tensor is channels-last: the plan rewrites the strides in the
metadata of its values, so the forward stores the saved tensors channels-last, the
backward's placeholders expect them so, and the externs' results are declared so. A
graph input that is saved channels-last is saved through a ``clone`` in that layout (the
lowering reuses the copy it makes for the forward's convolution: one conversion a step).

Kept as traced (*pinned*): graph inputs, the forward's user-visible outputs and the
backward's gradients (the caller gets eager's strides), tangents, and the arguments of
custom operators and user Triton kernels (their code may assume the traced layout).
Symbolic sizes get symbolic channels-last strides (a size symbol counts as at least 2).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch
from ember.inductor.loop_ir.symbolic_index import from_ir
from ember.inductor.lowering.custom_ops import is_custom_operator
from ember.inductor.lowering.layout import channels_last_strides, is_channels_last, same_layout
from ember.inductor.lowering.layout_plan_rules import (
    ACTIVATIONS_PER_WEIGHT,
    ARG,
    LAYOUT_RULES,
    WEIGHT_POSITIONS,
    LayoutRule,
    Position,
    anchors_on_device,
    weighs_on_device,
)
from ember.inductor.lowering.values import contiguous_strides
from ember.runtime.ir import Node, OutputKind, Program, TensorMeta, ValueRef, symbolic
from ember.runtime.logs import log

# A value of the program: (graph name, node name, result index or None)
ValueKey = tuple[str, str, "int | None"]


@dataclasses.dataclass
class LayoutPlan:
    """What :func:`plan_layouts` decided: the values made channels-last (by graph), the
    graph inputs saved through a channels-last clone, and the values of channels-last
    classes kept as traced (pinned)."""

    channels_last: dict[str, list[str]]
    saved_clones: list[str]
    pinned: list[str]
    #: one line a class of dense convolutions the ``weighed`` policy sized
    weighed: list[str] = dataclasses.field(default_factory=list)

    def describe(self) -> str:
        """One line a graph: ``forward: channels-last convolution, relu, ...``."""
        lines = [f"{g}: channels-last {', '.join(names)}"
                 for g, names in self.channels_last.items() if names]
        if self.saved_clones:
            lines.append(f"saved through a channels-last clone: {', '.join(self.saved_clones)}")
        if self.pinned:
            lines.append(f"kept as traced: {', '.join(self.pinned)}")
        return "\n".join(lines + self.weighed) or "no channels-last values"


def plan_layouts(program: Program) -> Program:
    """Graph pass: the program with the layout plan applied to its metadata (see the
    module docstring); ``program`` itself is not changed."""
    out, plan = layout_plan(program)
    log("graphs", lambda: f"layout plan:\n{plan.describe()}")
    return out


def layout_plan(program: Program) -> tuple[Program, LayoutPlan]:
    """The program with channels-last classes rewritten, and the plan (for tests and
    the log)."""
    out = program.copy()
    index = {g: {n.name: n for n in graph.nodes} for g, graph in out.graphs.items()}
    classes = _Classes()
    anchored: list[ValueKey] = []
    weighed: list[tuple[ValueKey, int, int]] = []  # (a key, activation, weight elements)
    for gname, graph in out.graphs.items():
        for node in graph.calls():
            rule = LAYOUT_RULES.get(node.target)
            if rule is None or _explicit_format(node) or _turned_off(node, rule.off_when):
                continue
            # a convolution that does not ask for channels-last here (a dense one on the
            # CPU) joins its tensors in one class that only another anchor or, under the
            # ``weighed`` policy, the class's sizes can choose: when its activations are
            # channels-last, so is its weight
            device = _device_of(node)
            asks = anchors_on_device(node.target, node.args, device)
            keys = [k for k in (_key_at(gname, index[gname], node, pos)
                                for pos in rule.channels_last) if k is not None]
            for key in keys:
                classes.add(key)
                if asks:
                    anchored.append(key)
                else:
                    classes.union(keys[0], key)
            if keys and not asks and weighs_on_device(device):
                sizes = _elements(index[gname], node, rule)
                if sizes is not None:
                    weighed.append((keys[0], *sizes))
            if rule.follows:
                keys = [k for k in _tensor_keys(gname, index[gname], node) if k is not None]
                for k in keys[1:]:
                    classes.union(keys[0], k)
    links = _saved_links(out)
    for fwd, bwd in links:
        if classes.known(fwd) or classes.known(bwd):
            classes.union(fwd, bwd)
    heavy, sized = _activation_heavy(classes, weighed)
    chosen = {classes.find(k) for k in anchored} | heavy
    members = [k for k in classes.values() if classes.find(k) in chosen]
    pinned = _pinned(out, links, index)
    plan = LayoutPlan({g: [] for g in out.graphs}, [], [], sized)
    clones: list[str] = []  # forward placeholders saved through a channels-last clone
    saved_of = {bwd: fwd for fwd, bwd in links}
    for key in members:
        gname, name, result = key
        if key in pinned:
            plan.pinned.append(f"{gname}:{_ref_text(name, result)}")
            continue
        if _set_channels_last(index[gname][name], result):
            plan.channels_last[gname].append(_ref_text(name, result))
            source = saved_of.get(key)
            if (source is not None and _is_placeholder(index, source)
                    and source[1] not in clones):
                clones.append(source[1])  # a saved graph input
    for placeholder in clones:
        _insert_saved_clone(out, placeholder)
        plan.saved_clones.append(placeholder)
    return out, plan


def _elements(nodes: dict[str, Node], node: Node, rule: LayoutRule) -> tuple[int, int] | None:
    """A convolution's activation and weight elements (:data:`WEIGHT_POSITIONS`); None
    when a size is symbolic."""
    weights = WEIGHT_POSITIONS.get(node.target, ())
    found = [0, 0]
    for pos in rule.channels_last:
        ref = _ref_at(node, pos)
        meta = None if ref is None else _meta(nodes, ref.node, ref.index)
        if meta is None:
            continue
        if not meta.is_static:
            return None
        found[pos in weights] += meta.numel
    return found[0], found[1]


def _activation_heavy(classes: _Classes, weighed: list[tuple[ValueKey, int, int]]
                      ) -> tuple[set[ValueKey], list[str]]:
    """The classes of dense convolutions whose activations hold at least
    :data:`ACTIVATIONS_PER_WEIGHT` times their weights' elements (the ``weighed``
    policy), and a line for each class sized."""
    totals: dict[ValueKey, list[int]] = {}
    for key, activations, weights in weighed:
        total = totals.setdefault(classes.find(key), [0, 0, 0])
        total[0] += activations
        total[1] += weights
        total[2] += 1
    heavy: set[ValueKey] = set()
    lines = []
    for root, (a, w, n) in totals.items():
        chosen = a >= ACTIVATIONS_PER_WEIGHT * w
        if chosen:
            heavy.add(root)
        ratio = f"{a / w:.1f}x" if w else "no weights"
        lines.append(f"{n} dense convolutions: activations {a:,} elements, weights {w:,} "
                     f"({ratio}; channels-last from {ACTIVATIONS_PER_WEIGHT}x): "
                     f"{'channels-last' if chosen else 'kept as traced'}")
    return heavy, lines


def _returned(program: Program) -> set[ValueKey]:
    """The forward values returned to the caller (any output but a saved tensor)."""
    graph = program.forward
    specs = program.signature.outputs.get("forward", [])
    keys: set[ValueKey] = set()
    for i, value in enumerate(graph.output_values):
        kind = specs[i].kind if i < len(specs) else OutputKind.USER_OUTPUT
        if isinstance(value, ValueRef) and kind != OutputKind.SAVED_TENSOR:
            keys.add(("forward", value.node, value.index))
    return keys


def _pinned(program: Program, links: list[tuple[ValueKey, ValueKey]],
            index: dict[str, dict[str, Node]]) -> set[ValueKey]:
    """Values whose traced layout stays: graph inputs, what the caller receives, the
    arguments of custom operators and user kernels (they get the traced layout), and
    the backward placeholders of saved values that are pinned in the forward."""
    pinned = _returned(program)
    saved = {bwd for _, bwd in links}
    for gname, graph in program.graphs.items():
        for node in graph.placeholders:
            if (gname, node.name, None) not in saved:  # inputs, tangents
                pinned.add((gname, node.name, None))
        if gname != "forward":
            for value in graph.output_values:
                if isinstance(value, ValueRef):
                    pinned.add((gname, value.node, value.index))
        for node in graph.calls():
            if is_custom_operator(node.target):  # its code may assume the traced layout
                pinned.update((gname, r.node, r.index) for r in node.inputs())
    for fwd, bwd in links:
        if fwd in pinned and not _is_placeholder(index, fwd):
            pinned.add(bwd)
    return pinned


def _is_placeholder(index: dict[str, dict[str, Node]], key: ValueKey) -> bool:
    return index[key[0]][key[1]].op == "placeholder"


def _saved_links(program: Program) -> list[tuple[ValueKey, ValueKey]]:
    """(forward value, backward placeholder) for each tensor the forward saves."""
    if "forward" not in program.graphs or "backward" not in program.graphs:
        return []
    specs = program.signature.outputs.get("forward", [])
    backward = {n.name for n in program.graphs["backward"].placeholders}
    links: list[tuple[ValueKey, ValueKey]] = []
    for spec, value in zip(specs, program.forward.output_values):
        if (spec.kind == OutputKind.SAVED_TENSOR and isinstance(value, ValueRef)
                and spec.target in backward):
            links.append((("forward", value.node, value.index), ("backward", spec.target, None)))
    return links


def _explicit_format(node: Node) -> bool:
    """Whether the node asks for a memory format itself (``clone(x,
    memory_format=torch.contiguous_format)``): its layout is not the plan's to choose."""
    fmt = node.kwargs.get("memory_format")
    return fmt is not None and fmt != torch.preserve_format


def _device_of(node: Node) -> str:
    """The device type of a node's first tensor result (a ``convolution_backward``
    may compute no input gradient): ``cpu``, ``cuda``, ..."""
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    found = next((m for m in metas if isinstance(m, TensorMeta)), None)
    return found.device.type if found is not None else "cuda"


def _turned_off(node: Node, flag: int | None) -> bool:
    return flag is not None and flag < len(node.args) and node.args[flag] is True


def _meta(nodes: dict[str, Node], name: str, index: int | None) -> TensorMeta | None:
    meta = nodes[name].meta
    if isinstance(meta, tuple):
        meta = meta[index] if index is not None and index < len(meta) else None
    elif index is not None:
        return None
    return meta if isinstance(meta, TensorMeta) else None


def spatial(meta: TensorMeta | None) -> bool:
    """Whether a value is a 4-d tensor whose channels-last layout differs from
    row-major (``H * W > 1`` and more than one channel; a size symbol is at least 2)."""
    if meta is None or meta.ndim != 4:
        return False
    sizes = tuple(from_ir(s) for s in meta.sizes)
    return is_channels_last(sizes, channels_last_strides(sizes))


def _channels_last_meta(meta: TensorMeta) -> TensorMeta:
    """``meta`` with channels-last strides, in the IR's terms (ints, size-expression
    text)."""
    strides = channels_last_strides(tuple(from_ir(s) for s in meta.sizes))
    return dataclasses.replace(meta, strides=tuple(symbolic.format(s) for s in strides))


def _key_of(gname: str, nodes: dict[str, Node], ref: object) -> ValueKey | None:
    if not isinstance(ref, ValueRef) or not spatial(_meta(nodes, ref.node, ref.index)):
        return None
    return (gname, ref.node, ref.index)


def _ref_at(node: Node, pos: Position) -> ValueRef | None:
    """The value at ``pos`` of ``node``: the argument's reference, or one of its results."""
    if pos.kind == ARG:
        ref = node.args[pos.index] if pos.index < len(node.args) else None
        return ref if isinstance(ref, ValueRef) else None
    index = pos.index if isinstance(node.meta, tuple) else None
    if index is None and pos.index != 0:
        return None
    return ValueRef(node.name, index)


def _key_at(gname: str, nodes: dict[str, Node], node: Node, pos: Position) -> ValueKey | None:
    return _key_of(gname, nodes, _ref_at(node, pos))


def _tensor_keys(gname: str, nodes: dict[str, Node], node: Node) -> Iterator[ValueKey | None]:
    """The spatial 4-d arguments and results of ``node``."""
    for ref in node.inputs():
        yield _key_of(gname, nodes, ref)
    if isinstance(node.meta, tuple):
        for i in range(len(node.meta)):
            yield _key_of(gname, nodes, ValueRef(node.name, i))
    else:
        yield _key_of(gname, nodes, ValueRef(node.name))


def _set_channels_last(node: Node, index: int | None) -> bool:
    """Give result ``index`` of ``node`` channels-last strides if it is row-major now;
    returns whether it changed."""
    metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
    meta = metas[index or 0]
    assert isinstance(meta, TensorMeta)
    sizes = tuple(from_ir(s) for s in meta.sizes)
    strides = tuple(from_ir(s) for s in meta.strides)
    if not same_layout(sizes, strides, contiguous_strides(sizes)):
        return False  # traced in another layout (already channels-last, or strided)
    new = _channels_last_meta(meta)
    if isinstance(node.meta, tuple):
        entries = list(node.meta)
        entries[index or 0] = new
        node.meta = tuple(entries)
    else:
        node.meta = new
    return True


def _insert_saved_clone(program: Program, placeholder: str) -> str:
    """Save forward input ``placeholder`` through a channels-last ``clone``: the clone
    is put after the placeholders, the saved outputs read it, and the backward's
    placeholder for it expects channels-last (already rewritten). Returns its name."""
    graph = program.forward
    source = graph.node(placeholder)
    meta = source.meta
    assert isinstance(meta, TensorMeta)
    taken = {n.name for n in graph.nodes}
    name = f"{placeholder}_channels_last"
    while name in taken:
        name += "_"
    clone = Node(name, "call", "aten::clone.default", (ValueRef(placeholder),),
                 {"memory_format": torch.channels_last},
                 _channels_last_meta(meta), source.source)
    at = max(i for i, n in enumerate(graph.nodes) if n.op == "placeholder") + 1
    graph.nodes.insert(at, clone)
    specs = program.signature.outputs.get("forward", [])
    output = graph.output
    values = list(graph.output_values)
    for i, value in enumerate(values):
        if (i < len(specs) and specs[i].kind == OutputKind.SAVED_TENSOR
                and value == ValueRef(placeholder)):
            values[i] = ValueRef(name)
    output.args = (tuple(values), *output.args[1:])
    return name


def _ref_text(name: str, index: int | None) -> str:
    return name if index is None else f"{name}.{index}"


class _Classes:
    """Union-find over values: the classes that share one layout."""

    def __init__(self) -> None:
        self._parent: dict[ValueKey, ValueKey] = {}

    def add(self, key: ValueKey) -> None:
        self._parent.setdefault(key, key)

    def known(self, key: ValueKey) -> bool:
        return key in self._parent

    def values(self) -> list[ValueKey]:
        """Every value in some class, in the order they were first seen."""
        return list(self._parent)

    def find(self, key: ValueKey) -> ValueKey:
        self.add(key)
        root = key
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[key] != root:
            self._parent[key], key = root, self._parent[key]
        return root

    def union(self, a: ValueKey, b: ValueKey) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self._parent[rb] = ra


__all__ = ["LayoutPlan", "layout_plan", "plan_layouts", "spatial"]
