"""The rule table of the layout plan (:mod:`.layout_plan`): which ops want their 4-d
tensors channels-last, and which ones pass a layout on from their operands to their
results.

A rule names, for one ATen overload, the argument and result positions that must be
channels-last (``channels_last``: convolutions, where vendor libraries — cuDNN, oneDNN —
otherwise convert on every call) and whether the op's spatial 4-d operands and results
share one layout (``follows``: pointwise ops, the pieces batch norm decomposes into,
pooling and the backward ops of all of these: computing them in storage order costs the
same in any layout, so they take the layout of the convolutions around them).

Adding an op: one entry here, and one case in ``tests/test_layout_plan_rules.py`` (the
test checks that every op of the table has a case).
"""

from __future__ import annotations

from dataclasses import dataclass

ARG = "arg"
RESULT = "result"


@dataclass(frozen=True)
class Position:
    """An argument (``kind="arg"``, positional index) or a result (``kind="result"``,
    index into the node's results) of an op."""

    kind: str
    index: int


@dataclass(frozen=True)
class LayoutRule:
    """How one op relates the layouts of its spatial 4-d tensors.

    ``channels_last``: the positions the op wants channels-last (its anchors).
    ``follows``: every spatial 4-d argument and result of the op shares one layout.
    """

    channels_last: tuple[Position, ...] = ()
    follows: bool = False
    off_when: int | None = None
    """A boolean argument that turns the rule off when true (a convolution's
    ``transposed``: the lowering leaves transposed convolutions as traced)."""


def _anchors(args: tuple[int, ...], results: tuple[int, ...], off_when: int) -> LayoutRule:
    return LayoutRule(tuple(Position(ARG, i) for i in args)
                      + tuple(Position(RESULT, i) for i in results), off_when=off_when)


FOLLOW = LayoutRule(follows=True)

LAYOUT_RULES: dict[str, LayoutRule] = {
    # convolution(input, weight, bias, stride, padding, dilation, transposed, ...) -> output
    "aten::convolution.default": _anchors(args=(0, 1), results=(0,), off_when=6),
    # convolution_backward(grad_output, input, weight, ...) -> (grad_input, grad_weight,
    # grad_bias)
    "aten::convolution_backward.default": _anchors(args=(0, 1, 2), results=(0, 1),
                                                   off_when=7),
    # activations and their backward
    "aten::relu.default": FOLLOW,
    "aten::threshold_backward.default": FOLLOW,
    "aten::hardtanh.default": FOLLOW,
    "aten::clamp_min.default": FOLLOW,
    "aten::leaky_relu.default": FOLLOW,
    "aten::sigmoid.default": FOLLOW,
    "aten::silu.default": FOLLOW,
    "aten::gelu.default": FOLLOW,
    # arithmetic (batch norm, residual adds and their gradients decompose into these)
    "aten::add.Tensor": FOLLOW,
    "aten::sub.Tensor": FOLLOW,
    "aten::mul.Tensor": FOLLOW,
    "aten::div.Tensor": FOLLOW,
    "aten::neg.default": FOLLOW,
    "aten::le.Scalar": FOLLOW,
    "aten::where.self": FOLLOW,
    # copies that keep the layout
    "aten::alias.default": FOLLOW,
    "aten::clone.default": FOLLOW,
    "aten::_to_copy.default": FOLLOW,
    # pooling and its backward
    "aten::max_pool2d_with_indices.default": FOLLOW,
    "aten::max_pool2d_with_indices_backward.default": FOLLOW,
    "aten::avg_pool2d.default": FOLLOW,
    "aten::avg_pool2d_backward.default": FOLLOW,
}
"""The layout rules, by ATen overload. Ops not listed keep their traced layouts and
separate the tensors around them (a ``view`` to another shape, a reduction, a matmul)."""

# The ``groups`` argument of each convolution overload (see :func:`anchors_on_device`).
_GROUPS_ARG = {"aten::convolution.default": 8, "aten::convolution_backward.default": 9}

#: Which convolutions ask for channels-last operands, by device type: ``all``,
#: ``grouped`` (``groups > 1``: depthwise and grouped convolutions) or ``weighed``
#: (as ``grouped``, and a class of dense convolutions is channels-last too when their
#: activations hold at least :data:`ACTIVATIONS_PER_WEIGHT` times their weights'
#: elements). Another device type: ``all``. On a GPU every one does (cuDNN converts any
#: other format on each call). On the CPU oneDNN ran depthwise stacks 1.1-1.6x faster
#: channels-last (MobileNet-v2, EfficientNet-b0 inference, one thread); dense stacks
#: gain where their activations are large next to their weights (the zoo's resnet,
#: ratio 6.8: 17.1 against 20.7 ms inference) and lose where they are not (ResNet-18's
#: layout on 96x96 images, ratio 0.6: 103 against 64 ms: a channels-last weight is
#: converted on every call) (docs/benchmarks.md, "CPU convolution layouts", session 46).
CONVOLUTION_ANCHORS: dict[str, str] = {"cuda": "all", "cpu": "weighed"}
ACTIVATIONS_PER_WEIGHT = 4
#: Each convolution overload's weight-sized positions; its other anchors are activations.
WEIGHT_POSITIONS: dict[str, tuple[Position, ...]] = {
    "aten::convolution.default": (Position(ARG, 1),),
    "aten::convolution_backward.default": (Position(ARG, 2), Position(RESULT, 1)),
}


def weighs_on_device(device: str) -> bool:
    """Whether dense convolutions on ``device`` go channels-last by their classes' sizes
    (the ``weighed`` policy of :data:`CONVOLUTION_ANCHORS`)."""
    return CONVOLUTION_ANCHORS.get(device, "all") == "weighed"


def anchors_on_device(target: str, args: tuple[object, ...], device: str) -> bool:
    """Whether the convolution ``target(*args)`` on ``device`` (``cuda``, ``cpu``) asks
    for channels-last operands itself (:data:`CONVOLUTION_ANCHORS`)."""
    if CONVOLUTION_ANCHORS.get(device, "all") == "all":
        return True
    index = _GROUPS_ARG.get(target)
    if index is None or index >= len(args):
        return True
    groups = args[index]
    return not isinstance(groups, int) or groups > 1


__all__ = ["ACTIVATIONS_PER_WEIGHT", "ARG", "CONVOLUTION_ANCHORS", "FOLLOW", "LAYOUT_RULES",
           "RESULT", "WEIGHT_POSITIONS", "LayoutRule", "Position", "anchors_on_device",
           "weighs_on_device"]
