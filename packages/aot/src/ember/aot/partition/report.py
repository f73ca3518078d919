"""What the min-cut partitioner chose, as text (``EMBER_LOGS=partition``).

One line a saved value (its name, type and bytes at the symbols' hints, the op that made
it, and why it is saved rather than recomputed), one line a recomputed value, and a
header with the totals::

    partition: 2 values saved for the backward (1.25 MiB at the size hints), 1 recomputed
      saved       addmm    float32[256, 1024]   1.00 MiB  aten::addmm.default   never recomputed: compute-bound (matmul, convolution, attention)
      saved       x        float32[256, 256]  256.0 KiB  input                 a forward input
      recomputed  gelu     float32[256, 1024]   1.00 MiB  aten::gelu.default
"""

from __future__ import annotations

from collections.abc import Mapping

from ember.aot.symbolic_sizes import hint
from ember.runtime.ir import Node, ScalarMeta, SymbolRange, SymInt, TensorMeta, ValueRef

#: why a value the backward reads is saved: the reason of ``mincut.not_recomputable``,
#: or these
SAVED_INPUT = "a forward input"
SAVED_BY_CUT = "min cut: fewer bytes than saving what it is computed from"


def _bytes_text(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n / 1024:.1f} KiB"


def _type_text(meta: object) -> str:
    if isinstance(meta, TensorMeta):
        return f"{str(meta.dtype).removeprefix('torch.')}[{', '.join(map(str, meta.sizes))}]"
    if isinstance(meta, ScalarMeta):
        return "scalar"
    return "-"


def format_partition(saved: list[ValueRef], recomputed: list[str], nodes: Mapping[str, Node],
                     value_meta: Mapping[ValueRef, object], saved_bytes: SymInt,
                     why_saved: Mapping[str, str], symbols: Mapping[str, SymbolRange],
                     bytes_of: Mapping[ValueRef, SymInt]) -> str:
    """The table (see the module doc). ``value_meta``/``bytes_of``: each saved or
    recomputed value's meta and bytes; ``why_saved``: node name (or ``name[i]``, one
    result of a node) -> reason for the saved values the cut did not choose (others:
    :data:`SAVED_BY_CUT`)."""
    total = hint(saved_bytes, symbols)
    symbolic = "" if isinstance(saved_bytes, int) else f"{saved_bytes} bytes: "
    head = (f"partition: {len(saved)} value{'s' if len(saved) != 1 else ''} saved for the "
            f"backward ({symbolic}{_bytes_text(total)} at the size hints), "
            f"{len(recomputed)} recomputed")
    rows: list[tuple[str, ...]] = []
    for ref in saved:
        node = nodes.get(ref.node)
        name = ref.node if ref.index is None else f"{ref.node}[{ref.index}]"
        op = "input" if node is None or node.op == "placeholder" else node.target
        rows.append(("saved", name, _type_text(value_meta.get(ref)),
                     _bytes_text(hint(bytes_of.get(ref, 0), symbols)), op,
                     why_saved.get(name, why_saved.get(ref.node, SAVED_BY_CUT))))
    for name in recomputed:
        ref = ValueRef(name)
        node = nodes.get(name)
        rows.append(("recomputed", name, _type_text(value_meta.get(ref)),
                     _bytes_text(hint(bytes_of.get(ref, 0), symbols)),
                     node.target if node is not None else "-", ""))
    if not rows:
        return head
    widths = [max(len(r[c]) for r in rows) for c in range(6)]
    lines = [head]
    for r in rows:
        cells = [r[c].rjust(widths[c]) if c == 3 else r[c].ljust(widths[c]) for c in range(6)]
        lines.append("  " + "  ".join(cells).rstrip())
    return "\n".join(lines)
