"""In-place ops that point a tensor at other memory, and how the functionalizer follows.

``y.set_(x)`` makes ``y`` a view of ``x``'s storage with ``x``'s sizes, strides and
offset: nothing is written, but from then on ``y`` and ``x`` are one memory (a write
through either is seen through the other). The functionalizer rebinds ``y``, and the op's
result, to ``x``'s alias. A graph that points one of its *inputs* at other memory
declines (the caller's tensor would have to change with it, which a compiled program
does not do), and so do the overloads that take a raw storage.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ember.runtime.ir import Argument, Node, ValueRef
from ember.runtime.stages import StageDeclined

if TYPE_CHECKING:
    from ember.aot.functionalize import _Functionalizer


def _set_to_tensor(fz: _Functionalizer, node: Node, args: tuple[Argument, ...]) -> None:
    target = node.args[0] if node.args else None
    source = node.args[1] if len(node.args) > 1 else node.kwargs.get("source")
    if not isinstance(target, ValueRef) or not isinstance(source, ValueRef):
        raise StageDeclined(f"%{node.name} ({node.target}): set_ of something that is not "
                            "a tensor value of the graph")
    if target.node in fz.placeholder_names:
        raise StageDeclined(
            f"%{node.name} ({node.target}) points graph input {target.node} at other "
            "memory: the caller's tensor would have to change with it, which a compiled "
            "program does not do (the graph runs eagerly)")
    for ref in (target, *fz._results(node)):
        fz.alias[ref] = fz.alias[source]


def _declined(fz: _Functionalizer, node: Node, args: tuple[Argument, ...]) -> None:
    raise StageDeclined(f"%{node.name} ({node.target}): the aot stage follows set_ to "
                        "another tensor only, not to a storage (the graph runs eagerly)")


STORAGE_REBINDS: dict[str, Callable[[_Functionalizer, Node, tuple[Argument, ...]], None]] = {
    "aten::set_.source_Tensor": _set_to_tensor,
    "aten::set_.source_Tensor_storage_offset": _declined,
    "aten::set_.source_Storage": _declined,
    "aten::set_.source_Storage_storage_offset": _declined,
    "aten::set_.default": _declined,
}
"""In-place op -> how the functionalizer rebinds what it writes (module doc)."""

__all__ = ["STORAGE_REBINDS"]
