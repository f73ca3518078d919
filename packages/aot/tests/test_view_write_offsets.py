"""Writes through a view without an inverse rule (``diagonal``, ``unfold``,
``as_strided``) become ``as_strided_scatter``, whose sizes, strides and offset address
its input's memory: the aot stage writes into a row-major copy at offset 0, so a base
that is a view at an offset (a slice, or an input that is a slice of a larger tensor)
gets the write at the right elements. A chain through a view whose elements share
memory (overlapping ``unfold`` windows) is written back as one scatter, not step by
step (which wrote the shared elements twice, the stale copy last)."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
from aot_capture import compile_fn


def _fill_strided(x: torch.Tensor) -> torch.Tensor:
    x.as_strided((2,), (3,)).fill_(0)
    return x * 1


def _fill_diagonal(x: torch.Tensor) -> torch.Tensor:
    x.diagonal().fill_(0)
    return x * 1


def _slice_then_diagonal(x: torch.Tensor) -> torch.Tensor:
    x[1:].diagonal().fill_(0)
    return x


def _column_slice_diagonal_of_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 1:].diagonal().fill_(-1)
    return y


def _unfold_of_slice(x: torch.Tensor) -> torch.Tensor:
    x[1:].unfold(1, 2, 2).mul_(0)
    return x


def _select_of_overlapping_unfold(x: torch.Tensor) -> torch.Tensor:
    x.unfold(-1, 2, 1)[:, :, 1].zero_()
    return x


def _diagonal_of_overlapping_unfold(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.unfold(-1, 2, 1).diagonal(1).fill_(-1)
    return y


CASES = [
    (_select_of_overlapping_unfold, lambda: torch.arange(1.0, 31.0).view(5, 6)),
    (_diagonal_of_overlapping_unfold, lambda: torch.arange(1.0, 31.0).view(5, 6)),
    (_fill_strided, lambda: torch.arange(1.0, 21.0)[3:11]),  # an input at offset 3
    (_fill_diagonal, lambda: torch.arange(1.0, 31.0).view(5, 6)[1:, 1:5]),
    (_fill_diagonal, lambda: torch.arange(1.0, 49.0).view(4, 12)[1:, ::3].t()),
    (_slice_then_diagonal, lambda: torch.arange(1.0, 13.0).view(3, 4)),
    (_column_slice_diagonal_of_intermediate, lambda: torch.arange(1.0, 13.0).view(3, 4)),
    (_unfold_of_slice, lambda: torch.arange(1.0, 31.0).view(5, 6)),
]


def test_view_writes_at_an_offset_match_eager() -> None:
    for fn, make in CASES:
        _, run = compile_fn(fn, make())
        # fresh inputs for each side: a clone would lose the input's offset and strides
        eager_x, compiled_x = make(), make()
        expected = fn(eager_x)
        (got,) = run([compiled_x])
        torch.testing.assert_close(got, expected, msg=f"{fn.__name__}: output")
        torch.testing.assert_close(compiled_x, eager_x, msg=f"{fn.__name__}: input after")


def test_view_writes_at_an_offset_of_symbolic_sizes_match_eager() -> None:
    dims = {0: {0: (2, None), 1: (2, None)}}
    for fn in (_slice_then_diagonal, _column_slice_diagonal_of_intermediate):
        _, run = compile_fn(fn, torch.randn(3, 4), dynamic=dims)
        for n, m in ((3, 4), (6, 5)):
            eager_x = torch.arange(1.0, 1.0 + n * m).view(n, m)
            compiled_x = eager_x.clone()
            expected = fn(eager_x)
            (got,) = run([compiled_x])
            torch.testing.assert_close(got, expected, msg=f"{fn.__name__} {n}x{m}")
            torch.testing.assert_close(compiled_x, eager_x, msg=f"{fn.__name__}: input")


def _clamp_every_other_window(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y.unfold(-1, 2, 1)[:, ::2].clamp_(max=5)  # through overlapping windows
    return y


def _add_through_as_strided(x: torch.Tensor) -> torch.Tensor:
    x.view(-1).as_strided((2, 2), (1, 2)).add_(1)
    return x * 1


def _zero_upper_diagonal(x: torch.Tensor) -> torch.Tensor:
    x.diagonal(1).zero_()
    return x * 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_view_writes_of_symbolic_sizes_through_ember(backend: str) -> None:
    def at_offset(n: int) -> torch.Tensor:
        return torch.arange(1.0, 6.0 + n * 6)[5:].view(n, 6)

    for fn in (_clamp_every_other_window, _add_through_as_strided, _zero_upper_diagonal):
        compiled = ef.compile(fn, backend=backend, dynamic=True)
        for n in (4, 5):
            eager_x, compiled_x = at_offset(n), at_offset(n)
            expected = fn(eager_x)
            torch.testing.assert_close(compiled(compiled_x), expected, msg=fn.__name__)
            torch.testing.assert_close(compiled_x, eager_x, msg=f"{fn.__name__}: input")


def _as_strided_of_a_column_slice(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    y[:, 1:].as_strided((2, 2), (1, 2)).add_(1)  # offset: the slice's, in y's storage
    return y


def test_as_strided_write_of_a_view_addresses_the_storage() -> None:
    fn = _as_strided_of_a_column_slice
    _, run = compile_fn(fn, torch.randn(5, 6))
    x = torch.arange(1.0, 31.0).view(5, 6)
    (got,) = run([x.clone()])
    torch.testing.assert_close(got, fn(x.clone()))


def _read_as_strided_of_windows(x: torch.Tensor) -> torch.Tensor:
    y = x * 1
    return y[:, 1:].unfold(-1, 2, 1).as_strided((2, 2), (1, 2)) * 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_as_strided_of_a_view_reads_the_storage(backend: str) -> None:
    # the inductor computes the view it is taken of into a compact buffer of its own,
    # where the strides meant for the storage pointed elsewhere: taken of the base
    fn = _read_as_strided_of_windows
    for dynamic in (None, True):
        compiled = ef.compile(fn, backend=backend, dynamic=dynamic)
        for n in (5, 6):
            x = torch.arange(1.0, 1.0 + n * 6).view(n, 6)
            torch.testing.assert_close(compiled(x.clone()), fn(x.clone()))
