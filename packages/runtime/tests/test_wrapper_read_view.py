"""A wrapper's ``_read_view`` (``wrapper_support.read_view``): torch's C++ re-view where
it gives what ``Tensor.as_strided`` gives (same memory, sizes, strides and elements, the
offset counted from the tensor's own), without autograd's view record; else the
``as_strided`` view itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
import torch
from ember.runtime.compiled import wrapper_support
from ember.runtime.compiled._torch import fast_reinterpret
from ember.runtime.compiled.wrapper_support import read_view, view


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    read_view.cache_clear()
    yield
    read_view.cache_clear()


@pytest.mark.parametrize("sizes,strides,offset", [
    ((3, 4), (1, 3), 0), ((2, 2), (4, 1), 5), ((), (), 7), ((0, 3), (3, 1), 2)])
def test_the_cxx_view_is_the_as_strided_view(sizes: tuple[int, ...],
                                             strides: tuple[int, ...], offset: int) -> None:
    base = torch.arange(40.0)[3:]  # its own storage offset: the view's offset adds to it
    fast = read_view()
    assert fast is fast_reinterpret() is not None  # this torch has it
    got, want = fast(base, sizes, strides, offset), view(base, sizes, strides, offset)
    assert (got.shape, got.stride(), got.storage_offset(), got.data_ptr()) == \
        (want.shape, want.stride(), want.storage_offset(), want.data_ptr())
    assert torch.equal(got, want)
    assert want._is_view() and not got._is_view()  # no autograd view record


def test_a_parameter_is_read_without_its_grad() -> None:
    w = torch.nn.Parameter(torch.randn(4, 3))
    t = read_view()(w, (3, 4), (1, 3), 0)
    assert not t.requires_grad and torch.equal(t, w.detach().t())


def test_a_view_that_fails_its_check_or_no_cxx_view_gives_as_strided() -> None:
    def wrong(t: torch.Tensor, sizes: Any, strides: Any, offset: int) -> torch.Tensor:
        return t.as_strided(sizes, strides)  # the offset forgotten

    with mock.patch.object(wrapper_support, "fast_reinterpret", lambda: wrong):
        assert read_view() is view
    read_view.cache_clear()
    with mock.patch.object(wrapper_support, "fast_reinterpret", lambda: None):
        assert read_view() is view
