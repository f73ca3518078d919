"""Triton's launcher-cache platform key computed once per process
(``triton_platform_key``): Triton 3.6 runs the ``file`` command for it at each kernel's
launcher."""

from __future__ import annotations

import types

import pytest
from ember.runtime.compiled.triton_platform_key import cache_platform_key


def _module() -> tuple[types.ModuleType, list[int]]:
    calls: list[int] = []
    module = types.ModuleType("fake_triton_build")

    def platform_key() -> str:
        calls.append(1)
        return "x86_64,Linux,64bit,ELF"

    module.platform_key = platform_key  # type: ignore[attr-defined]
    return module, calls


def test_an_uncached_key_is_computed_once() -> None:
    module, calls = _module()
    assert module.platform_key() == "x86_64,Linux,64bit,ELF"  # type: ignore[attr-defined]
    assert cache_platform_key(module)
    for _ in range(3):
        assert module.platform_key() == "x86_64,Linux,64bit,ELF"  # type: ignore[attr-defined]
    assert len(calls) == 2  # once before, once after
    assert not cache_platform_key(module)  # cached already: left alone


def test_a_triton_without_the_function_is_left_alone() -> None:
    assert not cache_platform_key(types.ModuleType("other"))


def test_importing_triton_through_ember_leaves_the_key_cached() -> None:
    pytest.importorskip("triton")
    from ember.runtime.compiled.triton_kernel import _import_triton
    from triton.runtime import build

    _import_triton()
    assert hasattr(build.platform_key, "cache_info")  # ours, or Triton's own cache
