"""Under ``dynamic=True``, torch calls whose C++ code reads sizes as plain ints keep them
symbolic (``ember.frontend.symbolic_calls``), in both capture modes: ``torch.tensor(n)``
of a symbolic size, ``F.one_hot(x, num_classes=n)``, ``F.interpolate(x,
scale_factor=2)`` (nearest and bilinear). Before, each specialised the sizes it read:
one compile per size (``x.size(0) stays static ... the program specialised it``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F


def size_as_tensor(x: torch.Tensor) -> torch.Tensor:
    return x * torch.tensor(x.shape[0]) + torch.tensor([x.size(0), 2 * x.size(1)]).sum()


def size_as_float_tensor(x: torch.Tensor) -> torch.Tensor:
    return x / torch.as_tensor([[x.shape[0], 0.5]], dtype=torch.float64).sum()


def one_hot(x: torch.Tensor) -> torch.Tensor:
    n = x.shape[0]
    labels = torch.arange(n) % n
    return F.one_hot(labels, num_classes=n).float() @ x


def nearest(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2)


def nearest_1d(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=(3,), mode="nearest")


def bilinear(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2, mode="bilinear")


def _shape_2d(n: int) -> tuple[int, ...]:
    return (n, 3)


def _shape_4d(n: int) -> tuple[int, ...]:
    return (2, 3, n, n + 2)


def _shape_3d(n: int) -> tuple[int, ...]:
    return (2, 3, n)


CASES: list[tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[int], tuple[int, ...]]]] = [
    (size_as_tensor, _shape_2d), (size_as_float_tensor, _shape_2d), (one_hot, _shape_2d),
    (nearest, _shape_4d), (nearest_1d, _shape_3d), (bilinear, _shape_4d)]


@pytest.mark.parametrize("capture", ["strict", "trace"])
@pytest.mark.parametrize("fn, shape", CASES, ids=[fn.__name__ for fn, _ in CASES])
def test_sizes_stay_symbolic(fn: Any, shape: Any, capture: str) -> None:
    compiled = ef.compile(fn, backend="eager", dynamic=True, options={"capture": capture})
    for n in (3, 4, 5, 7):
        x = torch.randn(*shape(n))
        expected = fn(x)
        out = compiled(x)
        assert out.dtype == expected.dtype and out.shape == expected.shape
        torch.testing.assert_close(out, expected)
    assert compiled.stats.compiles == 1, compiled.stats
    assert compiled.stats.graph_breaks == 0, compiled.stats


def test_a_static_capture_is_unchanged() -> None:
    compiled = ef.compile(size_as_tensor, backend="eager", dynamic=False,
                          options={"capture": "strict"})
    for n in (3, 4):
        x = torch.randn(n, 3)
        torch.testing.assert_close(compiled(x), size_as_tensor(x))
    assert compiled.stats.compiles == 2  # static sizes: one graph per size, as asked


def bad_one_hot(x: torch.Tensor) -> torch.Tensor:
    return F.one_hot(x.long() + x.shape[0], num_classes=x.shape[0])


def test_an_out_of_range_class_still_raises() -> None:
    compiled = ef.compile(bad_one_hot, backend="eager", dynamic=True,
                          options={"capture": "strict"})
    with pytest.raises(RuntimeError):
        bad_one_hot(torch.zeros(3))
    with pytest.raises(RuntimeError):
        compiled(torch.zeros(3))


@pytest.mark.parametrize("fn", [
    lambda x: F.interpolate(x, size=(2 * x.shape[-2], 2 * x.shape[-1]), mode="nearest"),
    lambda x: F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True),
    lambda x: x * (x.shape[-1] ** -0.5),
], ids=["interpolate_size", "bilinear_align_corners", "size_as_float"])
def test_automatic_dynamic_trace_falls_back_to_static_sizes(fn: Any) -> None:
    # before: the trace's second size (recorded symbolic) raised a CaptureError over a
    # symbolic float the IR cannot hold; it now traces that size again with static sizes
    compiled = ef.compile(fn, options={"capture": "trace"})
    for n in (8, 12, 10):
        x = torch.randn(1, 2, n, n)
        torch.testing.assert_close(compiled(x), fn(x))


@pytest.mark.parametrize("capture", ["strict", "trace"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_multilabel_margin_loss_counts_only_the_targets_before_minus_one(
        capture: str, reduction: str) -> None:
    """Recorded as its aten op: torch's Python decomposition (what the Python dispatcher
    of a symbolic capture runs) reads the slots after a row's ``-1`` as class 0."""
    def loss(a: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return F.multilabel_margin_loss(a, t, reduction=reduction)

    compiled = ef.compile(loss, dynamic=True, backend="aot_eager",
                          options={"capture": capture})
    targets = torch.tensor([[1, -1, 0, 0], [2, 3, -1, 1], [0, 1, 2, 3], [3, -1, 3, 3],
                            [-1, 1, 1, 1]])
    for n in (3, 5):
        a = torch.randn(n, 4)
        torch.testing.assert_close(compiled(a, targets[:n]), loss(a, targets[:n]))
    assert compiled.stats.compiles == 1
    legacy = ef.compile(lambda a, t: F.multilabel_margin_loss(a, t, reduce=False),
                        dynamic=True, options={"capture": capture})
    a = torch.randn(4, 4)
    torch.testing.assert_close(legacy(a, targets[:4]),
                               F.multilabel_margin_loss(a, targets[:4], reduction="none"))
