"""Inputs that share memory: which of them group together, which member's memory holds
the others' (the functionalizer reads the rest as views of it), and which groups keep
that aliasing at all.

A group the graph writes no member of, or whose members address disjoint parts of the
storage, is a set of independent inputs: eager gives each of them its own gradient
(``f(x.detach(), x.detach())``, both requiring grad: two leaves over one storage), which
views of one root would send to the root alone, and a write through one member of a
disjoint group (an optimizer step over a flat parameter's pieces) is never seen through
another. Its aliases are dropped (:func:`kept_aliases`), so the compiled program takes
these inputs shared or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember.aot.symbolic_sizes import is_static_meta
from ember.runtime.ir import TensorMeta
from ember.runtime.ir.contracts import InputAlias


def alias_groups(aliases: Mapping[str, InputAlias], order: list[str]) -> list[list[str]]:
    """Inputs linked by ``aliases`` (input -> its earlier base), grouped, in ``order``."""
    parent = {name: name for name in order}

    def find(name: str) -> str:
        while parent[name] != name:
            name = parent[name]
        return name

    for name, info in aliases.items():
        base = info.base
        if name in parent and base in parent:
            parent[find(name)] = find(base)
    groups: dict[str, list[str]] = {}
    for name in order:
        groups.setdefault(find(name), []).append(name)
    return [g for g in groups.values() if len(g) > 1]


def layout(meta: TensorMeta) -> tuple[object, ...]:
    return tuple(meta.sizes), tuple(meta.strides), meta.storage_offset


def element_range(meta: TensorMeta) -> tuple[int, int]:
    """First and one-past-last storage element a tensor touches."""
    start = int(meta.storage_offset)
    extent = sum((int(n) - 1) * int(s) for n, s in zip(meta.sizes, meta.strides))
    return start, start + extent + 1


def covering_member(group: list[str], metas: dict[str, Any]) -> str | None:
    """The member (first in order) that is dense and whose memory holds every other
    member's, or None: only then can the others be read as views of it."""
    if any(not isinstance(metas[n], TensorMeta) or not is_static_meta(metas[n])
           for n in group):
        return None  # NOTE: symbolic layouts: treated as partly overlapping
    for candidate in group:
        meta = metas[candidate]
        lo, hi = element_range(meta)
        if meta.numel != hi - lo:
            continue  # not dense: it has holes another member may fill
        if all(lo <= element_range(metas[o])[0] and element_range(metas[o])[1] <= hi
               for o in group):
            return candidate
    return None


def alias_roots(aliases: Mapping[str, InputAlias], metas: dict[str, Any]
                ) -> tuple[dict[str, str], list[list[str]]]:
    """Each grouped input's root (the member covering the others, :func:`covering_member`)
    and the groups that have none (their members partly overlap)."""
    root_of: dict[str, str] = {}
    partial: list[list[str]] = []
    for group in alias_groups(aliases, list(metas)):
        root = covering_member(group, metas)
        if root is None:
            partial.append(group)
        else:
            root_of.update({name: root for name in group})
    return root_of, partial


def kept_aliases(aliases: Mapping[str, InputAlias], metas: dict[str, Any],
                 written: set[str] | None = None) -> dict[str, InputAlias]:
    """The entries of ``aliases`` whose group needs one root (module doc): its members'
    element ranges meet (:func:`_apart`), and, given the inputs a graph writes
    (``written``), one of them is written. ``metas``: every placeholder's, in order."""
    return {name: alias for group in alias_groups(aliases, list(metas))
            if not _apart(group, metas) and (written is None or written & set(group))
            for name, alias in aliases.items() if name in group}


def _apart(group: list[str], metas: dict[str, Any]) -> bool:
    """Whether the members of ``group`` (static, of one dtype) address pairwise disjoint
    element ranges of their storage: a write through one is never seen through another
    (a flat parameter's pieces, ``x[:2]`` and ``x[2:]``)."""
    members = [metas[n] for n in group]
    if (not all(isinstance(m, TensorMeta) and is_static_meta(m) for m in members)
            or len({m.dtype for m in members}) != 1):
        return False
    ranges = sorted(element_range(m) for m in members if m.numel)
    return all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))
