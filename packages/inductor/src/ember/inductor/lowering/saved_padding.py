"""A saved tensor that the forward stores zero-padded for a matmul is saved padded.

On CUDA a 16-bit matmul whose inner size is not a multiple of 8 runs on a zero-padded
copy of its left operand (``matmul_padding.py``). When the forward also saves that
operand for the backward (LLaMA's MLP saves ``silu(gate) * up``, 2730 columns, which the
down projection reads), the forward computed it twice, once into the padded copy and
once for the saved output, and the backward padded it a third time for its weight
gradient (``gradᵀ @ act``: the same zero columns).

Here the saved tensor *is* the padded copy, in two steps the program shows:

1. the forward graph's lowering, asked by ``compile_program`` (``pad_saved``), returns a
   saved value's padded buffer instead of the value (:func:`padded_saved_output`);
2. ``compile_program`` then rewrites the program (:func:`with_padded_saved`): the
   forward saves ``constant_pad_nd(value, [0, k])``, the backward's placeholder for it
   has the padded sizes, and a ``slice`` of it gives the backward the value again.

The backward's lowering reads from the program which of its inputs end in zero columns
(:func:`zero_padded_inputs`: a saved ``constant_pad_nd`` with zeros after the last dim),
so its own padding of that value is the input itself (``matmul_padding.padded_operand``).
"""

from __future__ import annotations

from typing import Any

from ember.inductor.lowering.values import Lazy, Stored, contiguous_strides, numel
from ember.runtime.ir import Node, OutputKind, Program, TensorMeta, ValueRef

PAD_TARGET = "aten::constant_pad_nd.default"


def padded_saved_output(ctx: Any, index: int, value: Lazy) -> Stored | None:
    """Forward output ``index``'s ``value`` as the zero-padded buffer a matmul's padding
    stored it in (its last dim grown, row-major), when the output is a saved tensor and
    such a buffer exists; else None."""
    specs = ctx.program.signature.outputs.get(ctx.graph_name) or []
    if not (0 <= index < len(specs) and specs[index].kind == OutputKind.SAVED_TENSOR):
        return None
    if not all(isinstance(s, int) for s in value.sizes) or not value.sizes:
        return None
    for padded, pad in ctx.row_pads:
        if (pad.offset != 0 or pad.sizes[:-1] != padded.sizes[:-1]
                or padded.sizes[-1] != value.sizes[-1]
                or pad.strides != contiguous_strides(pad.sizes)
                or not _reshapes_of(padded, value)):
            continue
        sizes = (*value.sizes[:-1], pad.sizes[-1])
        return Stored(pad.buffer, pad.dtype, sizes, contiguous_strides(sizes))
    return None


def _reshapes_of(padded: Lazy, value: Lazy) -> bool:
    """Whether ``padded`` is ``value`` or a row-major reshape of it (``reshaped_from``)."""
    at: Lazy | None = padded
    while at is not None:
        if at is value:
            return True
        at = at.reshaped_from
    return False


def with_padded_saved(program: Program, padded: dict[int, int]) -> Program:
    """``program`` with forward outputs ``padded`` (index -> padded last size) saved
    through ``constant_pad_nd``, and the backward reading them through a ``slice``."""
    out = program.copy()
    forward, backward = out.graphs["forward"], out.graphs["backward"]
    specs = out.signature.outputs["forward"]
    values = list(forward.output_values)
    taken = {n.name for g in (forward, backward) for n in g.nodes}
    for index, width in sorted(padded.items()):
        ref, spec = values[index], specs[index]
        assert isinstance(ref, ValueRef) and spec.target is not None
        meta = _meta_of(forward.node(ref.node), ref.index)
        grown = (*(int(s) for s in meta.sizes[:-1]), width)  # static: padded_saved_output
        pad_meta = TensorMeta(meta.dtype, grown, contiguous_strides(grown), meta.device)
        name = _fresh(f"{ref.node}_padded", taken)
        forward.nodes.insert(forward.nodes.index(forward.output), Node(
            name, "call", PAD_TARGET, (ref, (0, width - int(meta.sizes[-1]))), {"value": 0.0},
            pad_meta, forward.node(ref.node).source))
        values[index] = ValueRef(name)
        placeholder = backward.node(spec.target)
        unpadded = _fresh(f"{spec.target}_unpadded", taken)
        for node in backward.nodes:
            node.replace_refs({ValueRef(spec.target): ValueRef(unpadded)})
        placeholder.meta = pad_meta
        at = max(i for i, n in enumerate(backward.nodes) if n.op == "placeholder") + 1
        backward.nodes.insert(at, Node(
            unpadded, "call", "aten::slice.Tensor",
            (ValueRef(spec.target), len(grown) - 1, 0, int(meta.sizes[-1])), {}, meta))
    output = forward.output
    output.args = (tuple(values), *output.args[1:])
    return out


def zero_padded_inputs(program: Program, graph_name: str) -> dict[str, int]:
    """The placeholders of ``graph_name`` that hold a forward value saved through
    ``constant_pad_nd`` with zeros after its last dim only: name -> the value's width
    (the columns after it are zeros)."""
    if graph_name != "backward" or "forward" not in program.graphs:
        return {}
    forward = program.graphs["forward"]
    found: dict[str, int] = {}
    specs = program.signature.outputs.get("forward", [])
    for spec, ref in zip(specs, forward.output_values):
        if spec.kind != OutputKind.SAVED_TENSOR or not isinstance(ref, ValueRef):
            continue
        node = forward.node(ref.node)
        if node.target != PAD_TARGET or ref.index is not None or len(node.args) < 2:
            continue
        pad = node.args[1]
        value = node.kwargs.get("value", node.args[2] if len(node.args) > 2 else 0)
        if (isinstance(pad, tuple) and len(pad) == 2 and pad[0] == 0
                and isinstance(pad[1], int) and pad[1] > 0 and value == 0
                and isinstance(node.meta, TensorMeta) and spec.target is not None):
            found[spec.target] = int(node.meta.sizes[-1]) - pad[1]
    return found


def padded_input(ctx: Any, v: Stored, sizes: tuple[int, ...]) -> Stored | None:
    """``v`` zero-padded to ``sizes`` (its last dim grown, row-major) without a copy:
    the whole graph input ``v`` views, when that input ends in zero columns
    (:func:`zero_padded_inputs`) and ``v`` is its unpadded part; else None."""
    if v.buffer not in ctx.inputs or v.offset != 0:
        return None
    width = ctx.zero_padded.get(ctx.graph.placeholders[ctx.inputs.index(v.buffer)].name)
    whole = ctx.buffers[v.buffer].sizes
    if (width is None or v.sizes[-1] != width or tuple(sizes[:-1]) != tuple(v.sizes[:-1])
            or sizes[-1] != whole[-1] or v.strides != contiguous_strides(sizes)
            or numel(sizes) != numel(whole)):
        return None
    return Stored(v.buffer, v.dtype, tuple(sizes), contiguous_strides(sizes))


def _meta_of(node: Node, index: int | None) -> TensorMeta:
    meta = node.meta[index] if isinstance(node.meta, tuple) and index is not None else node.meta
    assert isinstance(meta, TensorMeta)
    return meta


def _fresh(base: str, taken: set[str]) -> str:
    name = base
    while name in taken:
        name += "_"
    taken.add(name)
    return name
