"""How to write a new value of a view back into the tensor it views: one rule per view op.

A rule builds, in the graph under construction, the new value of the *base* given the new
value of the *view*: ``slice`` → ``slice_scatter``, ``select`` → ``select_scatter``,
``permute``/``transpose`` → the inverse permutation
(view replay), reshapes → a ``view`` back to the base's sizes, views that reinterpret
the dtype (``view.dtype``, ``view_as_real``/``view_as_complex``, ``real``/``imag``) →
the reverse reinterpretation, views that set a conjugate or negative bit → the same
conjugation or negation (:data:`FLAG_VIEWS`). Any view op without a rule
falls back to ``as_strided_scatter`` with the view's sizes and strides measured on the
base, which is exact for a dense base (``diagonal``, ``unfold``, ``as_strided``: torch does
not tag ``diagonal_scatter`` Core ATen, while the verifier accepts ``as_strided_scatter``).

Adding a view op touches one place: register its rule next to the others below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from ember.aot.builder import GraphBuilder
from ember.aot.symbolic_sizes import (
    as_argument,
    difference,
    from_argument,
    is_contiguous,
    is_static_meta,
    product,
    sizes_argument,
    total,
)
from ember.runtime.ir import Argument, SymInt, TensorMeta, ValueRef


@dataclass(frozen=True)
class ViewStep:
    """One view op applied to a tensor: ``target(base, *args, **kwargs)[index]``."""

    target: str
    args: tuple[Argument, ...]
    kwargs: tuple[tuple[str, Argument], ...] = ()
    index: int | None = None
    # For an ``as_strided`` step: the storage offset relative to the base's own offset,
    # appended to ``args`` when the step is replayed (the base's offset changes when a
    # write replaces it by a fresh tensor).
    relative_offset: SymInt | None = None

    def replay(self, b: GraphBuilder, base: ValueRef) -> ValueRef:
        """Apply this view to ``base`` in the graph ``b`` builds (a view that flips a
        conjugate or negative bit as the value it reads, :data:`FLAG_VIEWS`)."""
        args = self.args
        if self.relative_offset is not None:
            base_offset = _tensor_meta(b, base).storage_offset
            args = (*args, as_argument(total((base_offset, self.relative_offset))))
        target = FLAG_VIEWS.get(self.target, self.target)
        ref = b.call(target, (base, *args), dict(self.kwargs))
        return ref if self.index is None else ValueRef(ref.node, self.index)


#: views that only set a bit torch reads lazily (``x.conj()``, ``torch._neg_view(x)``) ->
#: the op computing the values they read, which is also their own inverse: a functional
#: graph has no lazy bits, and an ``as_strided`` rebuild of such a view would drop its bit
FLAG_VIEWS = {"aten::_conj.default": "aten::conj_physical.default",
              "aten::_neg_view.default": "aten::neg.default"}

# (builder, base, new value of the view, the step, the view as replayed on base) -> new base
InverseRule = Callable[[GraphBuilder, ValueRef, ValueRef, ViewStep, ValueRef], ValueRef]

INVERSE_RULES: dict[str, InverseRule] = {}


def register(*targets: str) -> Callable[[InverseRule], InverseRule]:
    def wrap(rule: InverseRule) -> InverseRule:
        for t in targets:
            INVERSE_RULES[t] = rule
        return rule
    return wrap


def write_back(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
               view: ValueRef) -> ValueRef:
    """The new value of ``base`` after the view ``step`` of it was set to ``new``."""
    rule = INVERSE_RULES.get(step.target, _as_strided_rule)
    return rule(b, base, new, step, view)


def _tensor_meta(b: GraphBuilder, ref: ValueRef) -> TensorMeta:
    meta = b.meta_of(ref)
    if not isinstance(meta, TensorMeta):
        raise TypeError(f"{ref} is not a tensor")
    return meta


def _arg(step: ViewStep, i: int, name: str, default: Argument) -> Argument:
    if i < len(step.args):
        return step.args[i]
    return dict(step.kwargs).get(name, default)


def _as_strided_rule(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
                     view: ValueRef) -> ValueRef:
    return _strided_write(b, base, new, (step,), view)


def write_back_through(b: GraphBuilder, base: ValueRef, new: ValueRef,
                       steps: tuple[ViewStep, ...]) -> ValueRef:
    """The new value of ``base`` after its view ``steps`` (applied in order) was set to
    ``new``, as one ``as_strided_scatter``: for a chain through a view whose elements
    share memory (``unfold`` with overlapping windows), where writing back one step at a
    time would write a shared element twice, the stale copy last."""
    view = base
    for step in steps:
        view = step.replay(b, view)
    return _strided_write(b, base, new, steps, view)


def may_overlap(meta: TensorMeta, target: str) -> bool:
    """Whether two elements of ``meta``, made by view op ``target`` from a tensor whose
    elements do not share memory, may share a memory location (for a symbolic layout:
    whether ``target`` can make such views at all)."""
    if not is_static_meta(meta):
        return target in ("aten::unfold.default", "aten::as_strided.default")
    reach = 0
    for stride, size in sorted((int(st), int(n)) for n, st in zip(meta.sizes, meta.strides)
                               if n != 1):
        if size == 0:
            return False
        if stride <= reach:
            return True
        reach += (size - 1) * stride
    return False


def _strided_write(b: GraphBuilder, base: ValueRef, new: ValueRef, steps: tuple[ViewStep, ...],
                   view: ValueRef) -> ValueRef:
    base_meta, view_meta = _tensor_meta(b, base), _tensor_meta(b, view)
    symbolic_input_at_zero = (not is_static_meta(base_meta) and base_meta.storage_offset == 0
                              and is_contiguous(base_meta))  # as before: no copy
    storage_addressed = any(s.target == "aten::as_strided.default" for s in steps)
    if not _is_dense_at_zero(b, base, base_meta) and not symbolic_input_at_zero and (
            not storage_addressed or is_contiguous(base_meta)):
        # NOTE: as_strided_scatter's sizes, strides and offset address the storage of
        # its input as that input lies in memory at run time (eager keeps a view's
        # offset in its clone; the inductor may hand an extern a compact copy of a
        # view): only a row-major tensor at offset 0 makes them mean the same on every
        # backend. So the write goes into a contiguous copy of base, addressed by the
        # view replayed on that copy (a strided as_strided view of a non-contiguous base
        # keeps its storage addressing: it has no other meaning).
        base = b.call("aten::clone.default", (base,), {"memory_format": torch.contiguous_format})
        view = base
        for step in steps:
            view = step.replay(b, view)
        view_meta = _tensor_meta(b, view)
        base_meta = _tensor_meta(b, base)
    return b.call("aten::as_strided_scatter.default",
                  (base, new, sizes_argument(view_meta.sizes),
                   sizes_argument(view_meta.strides),
                   as_argument(difference(view_meta.storage_offset,
                                          base_meta.storage_offset))))


def _is_dense_at_zero(b: GraphBuilder, ref: ValueRef, meta: TensorMeta) -> bool:
    """Whether ``ref`` is row-major at storage offset 0 wherever it runs: not a graph
    input (a call may pass a view of a larger tensor, at any offset)."""
    if meta.storage_offset != 0 or not is_contiguous(meta):
        return False
    return not any(n.name == ref.node and n.op == "placeholder" for n in b.graph.nodes)


@register("aten::slice.Tensor")
def _slice(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
           view: ValueRef) -> ValueRef:
    return b.call("aten::slice_scatter.default",
                  (base, new, _arg(step, 0, "dim", 0), _arg(step, 1, "start", None),
                   _arg(step, 2, "end", None), _arg(step, 3, "step", 1)))


@register("aten::select.int")
def _select(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
            view: ValueRef) -> ValueRef:
    return b.call("aten::select_scatter.default",
                  (base, new, _arg(step, 0, "dim", 0), _arg(step, 1, "index", 0)))


@register("aten::split.Tensor", "aten::split_with_sizes.default")
def _split(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
           view: ValueRef) -> ValueRef:
    base_meta = _tensor_meta(b, base)
    dim = _arg(step, 1, "dim", 0)
    assert isinstance(dim, int) and step.index is not None
    dim = dim % base_meta.ndim
    length = base_meta.sizes[dim]
    sizes = step.args[0]
    if not isinstance(length, int) or not all(isinstance(s, int) for s in _flat(sizes)):
        return _symbolic_split(b, base, new, step, dim)
    if isinstance(sizes, int):
        sizes = tuple(min(sizes, length - k) for k in range(0, length, sizes)) or (0,)
    assert isinstance(sizes, tuple)
    lengths = [s for s in sizes if isinstance(s, int)]
    start = 0
    for s in lengths[: step.index]:
        start += s
    end = start + lengths[step.index]
    return b.call("aten::slice_scatter.default", (base, new, dim, start, end, 1))


def _flat(sizes: Argument) -> tuple[Argument, ...]:
    return sizes if isinstance(sizes, tuple) else (sizes,)


def _symbolic_split(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
                    dim: int) -> ValueRef:
    """``split``/``split_with_sizes`` over a symbolic length: piece ``index`` starts
    after the pieces before it (``slice_scatter`` clamps the end to the length, as
    ``split`` makes the last piece shorter)."""
    assert step.index is not None
    sizes = step.args[0]
    if isinstance(sizes, tuple):
        lengths = [from_argument(s) for s in sizes]
        start = total(lengths[: step.index])
        end = total((start, lengths[step.index]))
    else:
        piece = from_argument(sizes)
        start = product((piece, step.index))
        end = total((start, piece))
    return b.call("aten::slice_scatter.default",
                  (base, new, dim, as_argument(start), as_argument(end), 1))


@register("aten::unbind.int")
def _unbind(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
            view: ValueRef) -> ValueRef:
    return b.call("aten::select_scatter.default",
                  (base, new, _arg(step, 0, "dim", 0), step.index))


@register("aten::permute.default")
def _permute(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
             view: ValueRef) -> ValueRef:
    dims = step.args[0]
    assert isinstance(dims, tuple)
    ndim = len(dims)
    inverse = [0] * ndim
    for i, d in enumerate(dims):
        assert isinstance(d, int)
        inverse[d % ndim] = i
    return b.call("aten::permute.default", (new, tuple(inverse)))


@register("aten::transpose.int")
def _transpose(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
               view: ValueRef) -> ValueRef:
    ndim = _tensor_meta(b, base).ndim
    if ndim == 0:
        return new
    d0, d1 = _arg(step, 0, "dim0", 0), _arg(step, 1, "dim1", 1)
    assert isinstance(d0, int) and isinstance(d1, int)
    dims = list(range(ndim))
    dims[d0 % ndim], dims[d1 % ndim] = dims[d1 % ndim], dims[d0 % ndim]
    return b.call("aten::permute.default", (new, tuple(dims)))


@register("aten::t.default")
def _t(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
       view: ValueRef) -> ValueRef:
    if _tensor_meta(b, base).ndim < 2:
        return new
    return b.call("aten::permute.default", (new, (1, 0)))


@register("aten::alias.default", "aten::detach.default")
def _identity(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
              view: ValueRef) -> ValueRef:
    return new


@register("aten::view.default", "aten::_unsafe_view.default", "aten::_reshape_alias.default",
          "aten::squeeze.default", "aten::squeeze.dim", "aten::squeeze.dims",
          "aten::unsqueeze.default")
def _reshape(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
             view: ValueRef) -> ValueRef:
    base_meta = _tensor_meta(b, base)
    return b.call("aten::view.default", (_contiguous(b, new), sizes_argument(base_meta.sizes)))


def _contiguous(b: GraphBuilder, ref: ValueRef) -> ValueRef:
    meta = _tensor_meta(b, ref)
    dense = _is_contiguous(meta) if is_static_meta(meta) else is_contiguous(meta)
    if dense:
        return ref
    return b.call("aten::clone.default", (ref,), {"memory_format": torch.contiguous_format})


# NOTE: the views below reinterpret the base's bytes as another dtype. Writing their new
# value back must reinterpret it again (the fallback's as_strided_scatter would convert
# the values: the bits of -1.5 written through an int32 view came back as 1069547520.0).


@register("aten::view.dtype")
def _view_dtype(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
                view: ValueRef) -> ValueRef:
    base_meta, new_meta = _tensor_meta(b, base), _tensor_meta(b, new)
    if base_meta.dtype.itemsize != new_meta.dtype.itemsize:
        new = _contiguous(b, new)  # the last dim changes length: it must be dense
    return b.call("aten::view.dtype", (new, base_meta.dtype))


@register("aten::view_as_real.default")
def _view_as_real(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
                  view: ValueRef) -> ValueRef:
    return b.call("aten::view_as_complex.default", (_contiguous(b, new),))


@register("aten::view_as_complex.default")
def _view_as_complex(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
                     view: ValueRef) -> ValueRef:
    return b.call("aten::view_as_real.default", (new,))


@register(*FLAG_VIEWS)
def _flag_view(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
               view: ValueRef) -> ValueRef:
    return b.call(FLAG_VIEWS[step.target], (new,))


@register("aten::real.default", "aten::imag.default")
def _real_or_imag(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
                  view: ValueRef) -> ValueRef:
    parts = b.call("aten::view_as_real.default", (_contiguous(b, base),))
    part = 0 if step.target == "aten::real.default" else 1
    parts = b.call("aten::select_scatter.default", (parts, new, -1, part))
    return b.call("aten::view_as_complex.default", (parts,))


@register("aten::expand.default")
def _expand(b: GraphBuilder, base: ValueRef, new: ValueRef, step: ViewStep,
            view: ValueRef) -> ValueRef:
    raise NotImplementedError(
        "an in-place write into an expanded view: several elements of the view share "
        "one memory location, which eager torch refuses as well"
    )


def _is_contiguous(meta: TensorMeta) -> bool:
    expected = 1
    for size, stride in reversed(list(zip(meta.sizes, meta.strides))):
        if size != 1 and stride != expected:
            return False
        expected *= int(size)
    return True
