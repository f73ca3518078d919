"""Which tensor dimensions a capture makes symbolic (dynamic shapes), both capture modes.

A dimension is symbolic when

- the user marked it: :func:`mark_dynamic` (with an optional range; an error if the
  program pins it), :func:`maybe_mark_dynamic` (symbolic if it can be, else static
  without an error); :func:`mark_static` keeps a dimension (or all) static whatever else
  says;
- ``compile(..., dynamic=True)``: every dimension of every tensor input that is not a
  parameter or buffer;
- ``dynamic=None`` (the default, *automatic dynamic*): a call that missed the cache with
  an input whose sizes alone differ from a cache entry of that code (same dtype, device,
  rank, requires_grad; other guards may fail beside it) marks those dimensions of that
  input (by :class:`~ember.frontend.guard_model.Source`) symbolic for every later capture
  of that code (:class:`DynamicPolicy`); never a parameter's or buffer's;
- with ``dynamic=False``, only marked dimensions (no automatic dynamic).

In the strict capture, automatic dynamic also frees the *layout* of an input that moved
in memory between captures (its storage offset, the strides of its size-1 dims: a row
of a ``nonzero`` result iterated after a break): :mod:`ember.frontend.free_layouts`.

Sizes 0 and 1 always specialise (a symbol's range starts at 2), as in torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import torch
from ember.frontend.bytecode.sources import ModuleMemberSource
from ember.frontend.guard_model import Guard, Source, size_only_change
from ember.runtime.callable import byte_extent, may_overlap
from ember.runtime.ir import InputSpec
from ember.runtime.logs import log

if TYPE_CHECKING:
    from ember.runtime.tracing import GraphRecorder

# NOTE: .symbolic_ints and .free_layouts are imported where a capture (or a miss) needs
# them: a call answered by the capture cache makes a DynamicPolicy but never asks it

__all__ = ["DimMark", "DynamicDim", "DynamicDimError", "DynamicPolicy", "add_input", "dims_of", "mark_dynamic", "mark_static",
           "marks_of", "maybe_mark_dynamic"]

_MARKS = "_ember_dim_marks"  # the attribute of a tensor holding its marks


@dataclass(frozen=True)
class DimMark:
    """How the user marked one dimension: ``"dynamic"`` (``mark_dynamic``, with its
    inclusive range), ``"maybe"`` (``maybe_mark_dynamic``) or ``"static"``."""

    kind: Literal["dynamic", "maybe", "static"]
    min: int | None = None
    max: int | None = None


def _check_dim(t: Any, dim: Any, what: str) -> int:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a tensor, got {type(t).__name__}")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{what}: dim must be an int, got {dim!r}")
    n = t.dim()
    if not -n <= dim < n:
        raise IndexError(f"{what}: dim {dim} is out of range for a tensor of rank {n}")
    return dim % n


def _set(t: torch.Tensor, dim: int, mark: DimMark) -> None:
    marks: dict[int, DimMark] = dict(getattr(t, _MARKS, None) or {})
    marks[dim] = mark
    setattr(t, _MARKS, marks)


def mark_dynamic(t: torch.Tensor, dim: int, min: int | None = None,
                 max: int | None = None) -> None:
    """Make dimension ``dim`` of ``t`` symbolic in every capture that reads ``t`` as an
    input, with the inclusive range ``[min, max]`` (default ``[2, inf)``).

    A capture that has to specialise the dimension (the program compares it with a
    constant, uses it as a Python int, or the size is 0 or 1) raises
    :class:`ember.frontend.CaptureError` naming the dimension and the source line.

    Raises:
        TypeError: ``t`` is not a tensor, or ``dim``/``min``/``max`` are not ints.
        IndexError: ``dim`` is out of range.
        ValueError: an empty range (``min > max``) or a negative bound.
    """
    dim = _check_dim(t, dim, "mark_dynamic")
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
            raise TypeError(f"mark_dynamic: {name} must be an int or None, got {bound!r}")
        if bound is not None and bound < 0:
            raise ValueError(f"mark_dynamic: {name}={bound} is negative")
    if min is not None and max is not None and min > max:
        raise ValueError(f"mark_dynamic: empty range [{min}, {max}] for dim {dim}")
    _set(t, dim, DimMark("dynamic", min, max))


def maybe_mark_dynamic(t: torch.Tensor, dim: int) -> None:
    """Make dimension ``dim`` of ``t`` symbolic if the program allows it; a program that
    pins it (compares it with a constant, uses it as a Python int) makes it static
    without an error.

    Raises:
        TypeError, IndexError: as :func:`mark_dynamic`.
    """
    _set(t, _check_dim(t, dim, "maybe_mark_dynamic"), DimMark("maybe"))


def mark_static(t: torch.Tensor, dim: int | None = None) -> None:
    """Keep dimension ``dim`` of ``t`` (every dimension when None) static, also under
    ``dynamic=True`` and automatic dynamic.

    Raises:
        TypeError, IndexError: as :func:`mark_dynamic`.
    """
    if dim is None and not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_static: expected a tensor, got {type(t).__name__}")
    dims = range(t.dim()) if dim is None else (_check_dim(t, dim, "mark_static"),)
    for d in dims:
        _set(t, d, DimMark("static"))


def marks_of(t: torch.Tensor) -> Mapping[int, DimMark]:
    """The marks the user put on ``t`` (dim -> mark); empty when none."""
    marks = getattr(t, _MARKS, None)
    return marks if isinstance(marks, dict) else {}


class DynamicDim(NamedTuple):
    """A dimension to make symbolic: its inclusive range and why (``mark_dynamic``,
    ``maybe_mark_dynamic``, ``dynamic=True``, ``automatic``, ``dynamic_shapes``)."""

    lower: int
    upper: int | None
    why: str

    @property
    def required(self) -> bool:
        """Whether a capture that specialises it is an error (``mark_dynamic`` and
        ``dynamic_shapes`` ask for a symbol; the others allow a static size)."""
        return self.why in ("mark_dynamic", "dynamic_shapes")


def dims_of(source: Source, t: torch.Tensor, user_input: bool, policy: DynamicPolicy,
            explicit: Mapping[int, tuple[int, int | None]] | None = None,
            free: bool = False) -> dict[int, DynamicDim]:
    """The symbolic dimensions of input ``t`` read from ``source``, with their ranges.
    ``user_input``: not a parameter or buffer (those are static unless marked);
    ``explicit``: the ranges ``capture(..., dynamic_shapes=...)`` gave for ``t``;
    ``free``: ``t`` is added with a free layout (:mod:`ember.frontend.free_layouts`)."""
    marks = marks_of(t)
    dims: dict[int, DynamicDim] = {}
    # NOTE: a tensor dense but for the strides of its size-1 dims (a slice of a
    # parameter, `pos[:, :1]`, strides (136, 8, 1), live across a break) is made a fake
    # by torch with a stride symbol of its own, which the graph cannot bind: it is
    # symbolic only where asked for (views the recorder sees as views are fine)
    derivable = free or not _size_one_strides_only(t)  # a free layout's fake is dense
    automatic = policy.automatic.get(source, ()) if derivable else ()
    for d in range(t.dim()):
        mark = marks.get(d)
        if mark is not None and mark.kind == "static":
            continue
        if explicit is not None and d in explicit:
            dims[d] = DynamicDim(*explicit[d], "dynamic_shapes")
        elif mark is not None:
            why = "mark_dynamic" if mark.kind == "dynamic" else "maybe_mark_dynamic"
            dims[d] = DynamicDim(2 if mark.min is None else mark.min, mark.max, why)
        elif policy.sizes_static:
            continue
        elif policy.dynamic and user_input and derivable:
            dims[d] = DynamicDim(2, None, "dynamic=True")
        elif d in automatic and user_input:  # parameters and buffers stay static
            dims[d] = DynamicDim(2, None, "automatic")
    return dims


def _dense_strides(t: torch.Tensor, skip_size_one: bool) -> bool:
    """Whether each stride of ``t`` (but those of size-1 dims, with ``skip_size_one``)
    is the product of the sizes of the dims with smaller strides (0 and 1 too)."""
    known = {0, 1}
    for d in sorted(range(t.dim()), key=t.stride):
        if skip_size_one and t.size(d) == 1:
            continue
        if t.stride(d) not in known:
            return False
        known.add(t.stride(d) * t.size(d))
    return True


def _size_one_strides_only(t: torch.Tensor) -> bool:
    """Whether ``t`` starts its storage and is dense but for the strides of its size-1
    dims."""
    return (t.storage_offset() == 0 and _dense_strides(t, True)
            and not _dense_strides(t, False))


def asked_when_aliased(dims: dict[int, DynamicDim], t: torch.Tensor,
                       earlier: Iterable[torch.Tensor]) -> dict[int, DynamicDim]:
    """``dims`` of input ``t``, less those nobody asked for (``dynamic=True``, automatic)
    when ``t`` shares bytes with an ``earlier`` input: a whole alias (a hook's stored
    output and its ``.detach()`` live across a break) or an overlapping view
    (``f(x, x[:2])``). The graph binds such an input as a view of the earlier one, by
    its static sizes and strides."""
    if not dims or t.data_ptr() == 0 or t.numel() == 0:
        return dims
    # NOTE: views of disjoint parts of one buffer (qkv heads) keep their dims symbolic
    if not any(_overlap(e, t) for e in earlier):
        return dims
    return {d: r for d, r in dims.items() if r.why not in ("dynamic=True", "automatic")}


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` may address common bytes of one storage: their byte
    ranges meet (:func:`~ember.runtime.callable.may_overlap`) and one of them is dense
    (it covers every byte of its range). Strided pieces of one buffer whose ranges
    interleave (qkv heads, ``qkv[..., :32]`` and ``qkv[..., 32:64]``) do not count."""
    return may_overlap(a, b) and any(byte_extent(t) == t.nbytes for t in (a, b))


def add_input(recorder: GraphRecorder, value: torch.Tensor, spec: InputSpec,
              dims: Mapping[int, DynamicDim] | None) -> torch.Tensor:
    """``recorder.add_input`` for ``value``, with ``dims`` symbolic (a static input is
    added exactly as without dynamic shapes)."""
    if not dims:
        return recorder.add_input(value, spec)
    return recorder.add_input(value, spec,
                              dynamic_dims={d: (r.lower, r.upper) for d, r in dims.items()})


@dataclass
class DynamicPolicy:
    """The dynamic-shape decisions of one compiled function: ``dynamic`` as given to
    ``compile`` and, for ``dynamic=None``, the dimensions automatic dynamic made
    symbolic (by source), kept for every later capture of the function."""

    dynamic: bool | None
    automatic: dict[Source, set[int]] = field(default_factory=dict)
    #: whether Python ints may be made symbolic (the strict capture: an int whose value
    #: changed between captures becomes an :class:`IntCarrierSource` input, its dim 0
    #: in :attr:`automatic`)
    ints: bool = False
    #: whether inputs may get free layouts (the strict capture), and those that have one:
    #: a tensor that moved in memory between captures (:mod:`.free_layouts`)
    layouts: bool = False
    free_layouts: set[Source] = field(default_factory=set)
    #: a stage declined a symbolic program of this function, or a call failed for its
    #: symbolic sizes: ``dynamic=True`` and automatic dynamic make no dimension or int
    #: symbolic from then on (the function compiles per size,
    #: :mod:`ember.frontend.declined_sizes`); user marks still do
    sizes_static: bool = False

    def symbolic_int(self, source: Source) -> bool:
        """Whether the int read from ``source`` is symbolic (:meth:`_note_int`)."""
        from ember.frontend.bytecode.symbolic_ints import IntCarrierSource

        return not self.sizes_static and IntCarrierSource(source) in self.automatic

    @property
    def may_be_dynamic(self) -> bool:
        """Whether a capture may have a symbolic dimension without user marks."""
        return (bool(self.dynamic) or bool(self.automatic)) and not self.sizes_static

    @property
    def unbacked_allowed(self) -> bool:
        """Whether an op with a data-dependent output size (``nonzero``) may be
        captured with an unbacked size (a capture with symbolic shapes); with
        ``dynamic=False`` it is a graph break."""
        return self.dynamic is not False

    def note_misses(self, entries: Iterable[list[tuple[Guard, Any]]], name: str) -> bool:
        """After a cache miss: ``entries`` are, per cache entry, its guards that failed
        with the values they saw (:meth:`note_miss` each); True when a dimension is new.
        Every entry is asked, not only the newest: a loop whose state alternates (an
        accumulator that requires grad from its second iteration on) may miss its
        newest entry on that state alone."""
        new = False
        for failed in entries:
            new = self.note_miss(failed, name) or new
        return new

    def refuse_symbolic_ints(self, reason: str, name: str) -> bool:
        """After a capture with symbolic ints that broke where the static capture before
        it did not (``table[n]``: a SymInt is unhashable; ``np.gcd(n, 6)``; ``n / 2``, a
        SymFloat): make ints static again for this function (they recompile per value)
        and return True to capture again; False when no int was symbolic."""
        from ember.frontend.bytecode.symbolic_ints import IntCarrierSource

        carriers = [s for s in self.automatic if isinstance(s, IntCarrierSource)]
        if not carriers:
            return False
        for carrier in carriers:
            del self.automatic[carrier]
        self.ints = False
        log("dynamic", f"symbolic ints off for {name} (its ints are static again): {reason}")
        return True

    def refuse_symbolic_sizes(self, reason: str, name: str) -> bool:
        """After a stage declined a symbolic program of the function, or a call of it
        failed for its symbolic sizes (``reason`` says which and why): no dimension or
        int is symbolic from now on but those the user marked (:attr:`sizes_static`),
        so the function compiles per size, as torch does for a size an operator
        specialises. True to capture again; False when no size was symbolic by this
        policy (marks alone, or refused before)."""
        if not self.may_be_dynamic:
            return False
        self.sizes_static = True
        self.ints = False
        log("dynamic", f"symbolic sizes off for {name} (it compiles per size from now on): "
            f"{reason}")
        return True

    def refuse_layouts(self, reason: str, name: str) -> None:
        """After a capture that read a free layout (:mod:`.free_layouts`): exact layouts
        for this function from now on."""
        self.free_layouts.clear()
        self.layouts = False
        log("dynamic", f"free layouts off for {name} (inputs keep their exact storage "
            f"offsets and strides): {reason}")

    def _note_layout(self, guard: Guard, actual: Any, name: str) -> bool:
        """Free the layout of the input ``guard`` read when it moved in memory
        (:func:`.free_layouts.layout_change`); True when it is new."""
        source = guard.source
        if (not self.layouts or source is None or source in self.free_layouts
                or _module_state(source)):
            return False
        from ember.frontend.free_layouts import layout_change

        moved = layout_change(guard, actual)
        if moved is None:
            return False
        self.free_layouts.add(source)
        log("dynamic", f"automatic: {source.expr()} moved in memory ({moved}) in {name}, "
            "recompiling with its layout free")
        return True

    def _note_int(self, guard: Guard, actual: Any, name: str) -> bool:
        """Mark the int that ``guard`` read symbolic when it changed to another
        non-negative int (:attr:`ints`); True when it is new."""
        if not self.ints or not _changed_int(guard, actual):
            return False
        source = guard.source
        assert source is not None
        if self.symbolic_int(source):
            return False
        from ember.frontend.bytecode.symbolic_ints import IntCarrierSource

        self.automatic[IntCarrierSource(source)] = {0}
        log("dynamic", f"automatic: {source.expr()} changed {guard.expected} -> {actual} "
            f"in {name}, recompiling with it symbolic")
        return True

    def note_miss(self, failed: list[tuple[Guard, Any]], name: str) -> bool:
        """After a cache miss: ``failed`` are the guards of one entry that failed with
        the values they saw. Each tensor whose guard failed on sizes alone (same dtype,
        device, rank and requires_grad) gets those dimensions symbolic (logged under
        ``dynamic``), whatever else failed beside it: as in torch, a size that changed
        between two captures of the same code is taken to vary (a per-expert loop body
        after a break sees another expert's index and another token count at once).
        Likewise a non-negative int read by an ``equals`` guard that changed to another
        (:meth:`_note_int`), and an input that moved in memory (:meth:`_note_layout`,
        also under ``dynamic=True``). True when a dimension, an int or a layout is new."""
        if self.dynamic is False or not failed:
            return False
        new = False
        for guard, actual in failed:
            new = self._note_layout(guard, actual, name) or new
        if self.dynamic is not None:
            return new
        changes: list[tuple[Source, int, int, int]] = []
        for guard, actual in failed:
            changes.extend(c for c in size_only_change(guard, actual) or ()
                           if not _module_state(c[0]))
            new = self._note_int(guard, actual, name) or new
        for source, dim, before, after in changes:
            dims = self.automatic.setdefault(source, set())
            if dim not in dims:
                dims.add(dim)
                new = True
                log("dynamic", f"automatic: {source.expr()}.size({dim}) changed {before} -> "
                    f"{after} in {name}, recompiling with it symbolic")
        return new


def _changed_int(guard: Guard, actual: Any) -> bool:
    """Whether ``guard`` failed on a non-negative int that changed to another one."""
    return (guard.kind == "equals" and guard.source is not None
            and type(guard.expected) is int and type(actual) is int
            and guard.expected >= 0 and actual >= 0 and guard.expected != actual)


def _module_state(source: Source) -> bool:
    """Whether ``source`` reads a parameter or buffer (static unless marked, as in torch:
    a model swapped for a wider one behind the same code compiles for its sizes)."""
    return isinstance(source, ModuleMemberSource) and source.table in ("_parameters",
                                                                       "_buffers")


class DynamicDimError(ValueError):
    """A dimension the user asked to be symbolic (``mark_dynamic``,
    ``capture(..., dynamic_shapes=...)``) was made static by the program or by its size
    (0 or 1); the message names the input, the dimension and, when known, the source line
    that specialised it."""
