"""How the runtime rebuilds a graph output that is a view of an input or of another
output (``ALIASED_OUTPUT``, ``metadata["aot"]["aliased_outputs"]``), as the
functionalizer finds it at the graph's ``output`` node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from ember.aot.symbolic_sizes import difference
from ember.runtime.ir import Argument, TensorMeta, ValueRef
from ember.runtime.ir.contracts import AliasedOutput, reinterpreted


def aliased_output(i: int, v: ValueRef, identity: bool, root: str | None, base_output: int,
                   values: tuple[Argument, ...],
                   meta_of: Callable[[ValueRef], Any]) -> AliasedOutput | None:
    """Output ``i`` (value ``v``) as a view of its base, or None when it is a value of
    its own: the placeholder ``root`` whose storage it lives in (``identity``: it is that
    input itself, through no view), else output number ``base_output`` when that is an
    earlier output of the same storage. A view that reinterprets the dtype is rebuilt
    from its base read as that dtype (:func:`reinterpreted`: ``a.real`` of a complex
    input, ``x.view(torch.int32)`` of a float32 one); others (``view_as_complex``, a
    ``view.dtype`` of another size) are returned as values."""
    meta = meta_of(v)
    if not isinstance(meta, TensorMeta):
        return None
    kind: Literal["input", "output"]
    if root is not None:
        base_meta = meta_of(ValueRef(root))
        kind, base = "input", root
    elif base_output != i:
        base_ref = values[base_output]
        assert isinstance(base_ref, ValueRef)
        base_meta = meta_of(base_ref)
        kind, base = "output", str(base_output)
    else:
        return None
    if not isinstance(base_meta, TensorMeta):
        return None
    offset = difference(meta.storage_offset, base_meta.storage_offset)
    dtype = None
    if base_meta.dtype != meta.dtype:
        ratio = reinterpreted(base_meta.dtype, meta.dtype)
        if ratio is None or not isinstance(base_meta.storage_offset, int) \
                or not isinstance(meta.storage_offset, int):
            return None
        offset, dtype = meta.storage_offset - base_meta.storage_offset * ratio, meta.dtype
    return AliasedOutput(
        output=i,
        kind=kind,
        base=base,
        identity=identity and kind == "input" and dtype is None,
        sizes=tuple(meta.sizes),
        strides=tuple(meta.strides),
        storage_offset=offset,
        base_strides=tuple(base_meta.strides),
        dtype=dtype,
    )

