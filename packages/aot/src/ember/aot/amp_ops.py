"""torch's AMP (gradient scaling) ops that write their arguments, and how the
functionalizer runs them functionally. ``torch.amp.GradScaler`` calls them: ``update()``
calls ``_amp_update_scale_``, ``unscale_()`` calls
``_amp_foreach_non_finite_check_and_unscale_``.

Their functional twins do not follow the naming rule
:func:`ember.aot.op_effects.mutation_of` searches by (``op_`` → ``op`` for an op that
writes only ``self``): ``_amp_update_scale_`` writes two arguments and returns only the
first; its functional ``_amp_update_scale`` returns the new values of both. So each is a
row of :data:`AMP_FUNCTIONAL_VARIANTS`: the functional op and which of its results is the
new value of which argument.

``_amp_foreach_non_finite_check_and_unscale`` returns ``(Tensor[], Tensor)``, a list
inside a tuple, which no IR value reference can index (``%op.0`` is the whole list). Its
in-place form is written out instead (:data:`AMP_EXPANSIONS`) as the per-tensor Core ATen
ops its kernel computes: every gradient times ``inv_scale`` (a product by 1.0 leaves a
value unchanged, as the kernel's skip does) and ``found_inf`` set to 1.0 when any
gradient holds an inf or a NaN, left as it was otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ember.runtime.ir import Argument, IRFormatError, Node, ValueRef

if TYPE_CHECKING:
    from ember.aot.functionalize import _Functionalizer

AMP_FUNCTIONAL_VARIANTS: dict[str, tuple[str, tuple[tuple[int, int], ...]]] = {
    # in-place op: (functional op, ((argument position, index of the result holding its
    # new value), ...)); the in-place op's own result is its (written) argument 0
    "aten::_amp_update_scale_.default": (
        "aten::_amp_update_scale.default", ((0, 0), (1, 1))),
}
"""In-place AMP op → its functional variant and where the new values come back."""


def _non_finite_check_and_unscale(fz: _Functionalizer, node: Node,
                                  args: tuple[Argument, ...]) -> None:
    """``_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)``."""
    grads, found_inf, inv_scale = (list(args) + [None, None, None])[:3]
    sources, found_source = node.args[0], node.args[1] if len(node.args) > 1 else None
    if (not isinstance(grads, tuple) or not isinstance(sources, tuple)
            or not isinstance(found_inf, ValueRef) or not isinstance(found_source, ValueRef)
            or not isinstance(inv_scale, ValueRef)):
        raise IRFormatError(f"%{node.name} ({node.target}): expected a list of gradient "
                            "tensors, a found_inf tensor and an inv_scale tensor")
    b = fz.b
    all_finite: ValueRef | None = None
    for source, grad in zip(sources, grads):
        if not isinstance(source, ValueRef) or not isinstance(grad, ValueRef):
            raise IRFormatError(f"%{node.name} ({node.target}): a gradient is not a tensor "
                                f"value of the graph ({source!r})")
        finite = b.call("aten::all.default", (b.call("aten::isfinite.default", (grad,)),))
        all_finite = finite if all_finite is None else b.call(
            "aten::logical_and.default", (all_finite, finite))
        fz.write(source, b.call("aten::mul.Tensor", (grad, inv_scale)))
    if all_finite is not None:
        some_non_finite = b.call("aten::logical_not.default", (all_finite,))
        fz.write(found_source, b.call("aten::masked_fill.Scalar",
                                      (found_inf, some_non_finite, 1.0)))


AMP_EXPANSIONS: dict[str, Callable[[_Functionalizer, Node, tuple[Argument, ...]], None]] = {
    "aten::_amp_foreach_non_finite_check_and_unscale_.default":
        _non_finite_check_and_unscale,
}
"""In-place AMP op whose functional variant the IR cannot index → the functional ops
that compute it, emitted by the function (which records the new values it writes)."""

__all__ = ["AMP_EXPANSIONS", "AMP_FUNCTIONAL_VARIANTS"]
