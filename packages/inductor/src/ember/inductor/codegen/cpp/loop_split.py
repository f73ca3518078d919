"""The innermost loop of a concatenation, split at its pieces' edges.

``cat([a, b, c], dim=-1)`` is one pointwise kernel whose every element picks its piece by
comparing the innermost loop variable with the pieces' edges: three masked loads and two
selects an element, which GCC does not vectorize. :func:`interval_splits` finds those
comparisons (the loop variable against integer literals, and the ``and``/``or``/``not``
of them) and the intervals between their edges; the writer emits one loop an interval
with each comparison a constant there, so the compiler drops the other pieces' loads
and vectorizes a plain copy (``codegen/cpp/kernel.py``).
"""

from __future__ import annotations

from ember.inductor.loop_ir import Compute, IndexValue, Kernel, Literal, Var

#: the most intervals a loop is split into (each repeats the loop's body in the source):
#: a concatenation of more pieces keeps its selects
MAX_INTERVALS = 8
#: comparison -> (the edge where ``var op c`` changes, given ``c``; its value below it)
_EDGES = {"lt": (0, True), "ge": (0, False), "le": (1, True), "gt": (1, False)}
#: the comparison with its operands swapped (``c < var`` is ``var > c``)
_SWAPPED = {"lt": "gt", "gt": "lt", "le": "ge", "ge": "le"}


def interval_splits(kernel: Kernel) -> list[tuple[int, int, dict[str, bool]]] | None:
    """``(start, stop, known)`` for each interval of ``kernel``'s innermost loop between
    the edges where a comparison of its variable with an integer literal changes value,
    ``known`` giving each such comparison's (and each ``logical_and``/``or``/``not`` of
    known values') value there; None for a reduction, a symbolic innermost size, no
    edge inside the loop, or more than :data:`MAX_INTERVALS` intervals."""
    if kernel.is_reduction or not kernel.ranges:
        return None
    last = kernel.ranges[-1]
    if not isinstance(last.size, int):
        return None
    position = {s.name for s in kernel.body
                if isinstance(s, IndexValue) and isinstance(s.index, Var)
                and s.index.name == last.name}
    literals = {s.name: s.value for s in kernel.body if isinstance(s, Literal)
                and isinstance(s.value, int) and not isinstance(s.value, bool)}
    comparisons: dict[str, tuple[str, int]] = {}  # name -> (op with var first, literal)
    for s in kernel.body:
        if not isinstance(s, Compute) or s.op not in _EDGES or len(s.args) != 2:
            continue
        a, b = s.args
        if a in position and b in literals:
            comparisons[s.name] = (s.op, literals[b])
        elif b in position and a in literals:
            comparisons[s.name] = (_SWAPPED[s.op], literals[a])
    edges = sorted({c + _EDGES[op][0] for op, c in comparisons.values()
                    if 0 < c + _EDGES[op][0] < last.size})
    if not edges or len(edges) + 1 > MAX_INTERVALS:
        return None
    splits = []
    for start, stop in zip([0, *edges], [*edges, last.size]):
        known: dict[str, bool] = {}
        for s in kernel.body:
            if not isinstance(s, Compute):
                continue
            if s.name in comparisons:
                op, c = comparisons[s.name]
                edge, below = c + _EDGES[op][0], _EDGES[op][1]
                known[s.name] = below if start < edge else not below
            elif s.op in ("logical_and", "logical_or", "logical_not") and all(
                    a in known for a in s.args):
                values = [known[a] for a in s.args]
                known[s.name] = (all(values) if s.op == "logical_and" else
                                 any(values) if s.op == "logical_or" else not values[0])
        splits.append((start, stop, known))
    return splits


__all__ = ["MAX_INTERVALS", "interval_splits"]
