"""A wrapper's ``_empty`` (``wrapper_support.allocator``): torch's C++ allocation where it
passes its check, else ``torch.empty_strided``; on a CUDA device of a given index, the C++
call only while that device is the current one."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch
from ember.runtime.compiled import wrapper_support
from ember.runtime.compiled._torch import fast_empty_strided
from ember.runtime.compiled.wrapper_support import allocator
from ember.runtime.config import patch


@pytest.fixture(autouse=True)
def _fresh() -> Any:
    allocator.cache_clear()
    yield
    allocator.cache_clear()


@pytest.mark.parametrize("sizes,strides,dtype", [
    ((3, 5), (5, 1), torch.float32), ((2, 3, 4), (1, 2, 6), torch.bfloat16),
    ((), (), torch.int64), ((4, 0), (1, 4), torch.bool)])
def test_cpu_buffers_come_from_the_cxx_allocation(sizes: tuple[int, ...],
                                                  strides: tuple[int, ...],
                                                  dtype: torch.dtype) -> None:
    alloc = allocator("cpu")
    assert alloc is fast_empty_strided("cpu") is not None  # this torch has it
    t = alloc(sizes, strides, dtype)
    assert (t.device.type, tuple(t.shape), t.stride(), t.dtype) == ("cpu", sizes, strides, dtype)
    assert not t.requires_grad


def test_a_device_without_it_parses_the_device_once() -> None:
    alloc = allocator("meta")
    assert alloc is not fast_empty_strided("cpu")
    t = alloc((2, 3), (1, 2), torch.float16)
    assert (t.device.type, tuple(t.shape), t.stride(), t.dtype) == ("meta", (2, 3), (1, 2),
                                                                    torch.float16)


def test_an_allocation_that_fails_its_check_is_not_used(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    def wrong(sizes: Any, strides: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(sizes, dtype=torch.float32)  # contiguous and float32, always

    with patch(logs="cache"), mock.patch.object(wrapper_support, "fast_empty_strided",
                                                lambda device: wrong):
        alloc = allocator("cpu")
    assert alloc is not wrong
    assert alloc((2, 3), (1, 2), torch.float16).stride() == (1, 2)
    assert "buffers on cpu: torch.empty_strided (torch's C++ allocation failed its check)" \
        in capsys.readouterr().err


def test_an_indexed_cuda_device_takes_the_cxx_call_only_while_current() -> None:
    """No GPU needed: the C++ call and the current device are stand-ins."""
    calls: list[str] = []
    current = [0]

    def fast(sizes: Any, strides: Any, dtype: torch.dtype) -> torch.Tensor:
        calls.append("fast")
        return torch.empty_strided(sizes, strides, dtype=dtype)

    other: Any = lambda sizes, strides, dtype: calls.append("other")  # noqa: E731
    with mock.patch.object(wrapper_support, "raw_current_device", lambda: lambda: current[0]):
        on_index = wrapper_support._while_current(fast, 1, other)
    assert on_index is not None
    on_index((2,), (1,), torch.float32)
    current[0] = 1
    on_index((2,), (1,), torch.float32)
    assert calls == ["other", "fast"]
    with mock.patch.object(wrapper_support, "raw_current_device", lambda: None):
        assert wrapper_support._while_current(fast, 1, other) is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU")
def test_cuda_buffers_come_from_the_cxx_allocation() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    alloc = allocator(str(device))  # a wrapper's device text: "cuda:0"
    assert getattr(alloc, "__name__", "") == "on_index", alloc
    t = alloc((3, 4), (1, 3), torch.bfloat16)
    assert (t.device, tuple(t.shape), t.stride(), t.dtype) == (device, (3, 4), (1, 3),
                                                               torch.bfloat16)
    assert allocator("cuda") is fast_empty_strided("cuda")
