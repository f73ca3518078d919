"""The C++ launcher's calls: every tensor's data pointer (storage offset applied) and
every size reach the kernel, through ctypes (few arguments) and through the packed
trampolines (many: ``compiled/cpp_packed_call.py``), and anything but a CPU tensor is
refused before the C++ code runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.runtime.compiled import cpp_launcher, cpp_packed_call
from ember.runtime.config import patch


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """A private kernel cache; the trampoline library is built (and probed) in it."""
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    cpp_packed_call._library.cache_clear()
    with patch(cache_dir=root):
        yield root
    cpp_packed_call._library.cache_clear()


def _kernel(n: int, sizes: int = 0) -> cpp_launcher.CppKernel:
    """``k(float* a0, ..., int64_t s0, ...)``: ``a<i>[0] = i + 1 + s0 + 10*s1 + ...``."""
    params = [f"float* a{i}" for i in range(n)] + [f"int64_t s{j}" for j in range(sizes)]
    extra = "".join(f" + {10 ** j} * s{j}" for j in range(sizes))
    body = " ".join(f"a{i}[0] = (float)({i + 1}{extra});" for i in range(n))
    source = ('#include <cstdint>\nextern "C" void k(' + ", ".join(params) + ") { "
              + body + " }\n")
    entry = {"name": "k", "lang": "cpp", "entry": "k", "source": "k.cpp",
             "meta": {"arg_dtypes": ["float32"] * n,
                      **({"size_args": [f"s{j}" for j in range(sizes)]} if sizes else {})}}
    kernel = cpp_launcher.load_kernel(entry, {"k.cpp": source.encode()})
    assert isinstance(kernel, cpp_launcher.CppKernel)
    return kernel


@pytest.mark.parametrize(("n", "sizes", "packed"), [
    (3, 0, False), (5, 2, False),  # below MIN_ARGS: ctypes
    (32, 0, True), (33, 0, True), (40, 1, True), (200, 3, True),  # a bucket's edges
    (1000, 2, True),  # the largest bucket
])
def test_every_pointer_and_size_reaches_the_kernel(cache: Path, n: int, sizes: int,
                                                   packed: bool) -> None:
    kernel = _kernel(n, sizes)
    assert (kernel._packed is not None) is packed
    base = torch.zeros(n + 1)
    tensors = [base[i + 1:] if i % 2 else torch.zeros(2) for i in range(n)]  # offsets
    size_values = [3, 5, 7][:sizes]
    for _ in range(2):  # the second call: same buffers, nothing cached wrongly
        kernel(*tensors, *size_values)
        extra = sum(v * 10 ** j for j, v in enumerate(size_values))
        assert [t[0].item() for t in tensors] == [float(i + 1 + extra) for i in range(n)]


def test_the_probe_passes_here(cache: Path) -> None:
    """x86-64 and AArch64 CI: the packed path is not silently off."""
    assert cpp_packed_call._library() is not None


def test_without_the_trampolines_a_kernel_calls_through_ctypes(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpp_packed_call, "_library", lambda: None)
    kernel = _kernel(40, 1)
    assert kernel._packed is None
    tensors = [torch.zeros(1) for _ in range(40)]
    kernel(*tensors, 2)
    assert [t.item() for t in tensors] == [float(i + 3) for i in range(40)]


def test_a_failed_probe_leaves_the_trampolines_off(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpp_packed_call, "_probe", lambda lib: False)
    assert cpp_packed_call._library() is None
    assert _kernel(40)._packed is None


class _LooksCpu:
    is_cpu = True


@pytest.mark.parametrize("n", [3, 40])
@pytest.mark.parametrize(("bad", "shown"), [
    (torch.zeros(2, device="meta"), "meta float32 tensor"),
    (7, "int"),
    (_LooksCpu(), "_LooksCpu"),  # has is_cpu, but no data pointer
])
def test_anything_but_a_cpu_tensor_is_refused(cache: Path, n: int, bad: Any,
                                              shown: str) -> None:
    kernel = _kernel(n)
    tensors: list[Any] = [torch.zeros(1) for _ in range(n)]
    tensors[n // 2] = bad
    with pytest.raises(TypeError, match=f"kernel k runs on the CPU: .*{shown}"):
        kernel(*tensors)
    assert all(t.item() == 0 for t in tensors if isinstance(t, torch.Tensor) and t.is_cpu)


def test_a_wrong_argument_count_is_refused(cache: Path) -> None:
    kernel = _kernel(40, 1)
    with pytest.raises(TypeError, match="kernel k takes 40 tensors and 1 sizes, got 40"):
        kernel(*[torch.zeros(1) for _ in range(40)])
