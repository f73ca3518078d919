"""The runtime side of Triton kernels over symbolic sizes: grids evaluated from the size
arguments at each launch, the launch metadata's size expressions, and compiled binaries
keyed by Triton's own specialization of integer arguments (never by size or grid)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from ember.runtime import config as config_module
from ember.runtime.compiled.triton_kernel import (
    TritonKernel,
    TritonKernelSpec,
    argument_specialization,
)
from ember.runtime.compiled.triton_launcher import load_kernel
from ember.runtime.ir.contracts import MetadataError

pytest.importorskip("triton")

SCALE_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def scale(x_ptr, out_ptr, s0, XBLOCK: tl.constexpr):
    xnumel = 3*s0
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tl.store(out_ptr + xindex, tl.load(x_ptr + xindex, mask=xmask) * 2, mask=xmask)
'''

META: dict[str, Any] = {
    "signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "s0": "i64"},
    "constexprs": {"XBLOCK": 16}, "grid": ["(3*s0+15)//16", 1, 1], "num_warps": 4,
    "num_stages": 1,
}
ENTRY: dict[str, Any] = {"name": "k", "lang": "triton", "entry": "scale", "source": "k.py",
                         "meta": META}
FILES = {"k.py": SCALE_SOURCE.encode()}


@pytest.fixture
def cache_dir(tmp_path: Path) -> Iterator[Path]:
    with config_module.patch(cache_dir=tmp_path, cache_enabled=True):
        yield tmp_path


@pytest.mark.parametrize("s0", [2, 17, 64])
def test_grid_follows_the_size_argument(cache_dir: Path, s0: int) -> None:
    launch = load_kernel(ENTRY, FILES)
    x = torch.randn(3 * s0)
    out = torch.full((3 * s0 + 40,), -1.0)  # elements past 3*s0 stay untouched
    launch(x, out, s0)
    torch.testing.assert_close(out[:3 * s0], x * 2)
    assert (out[3 * s0:] == -1).all()


def test_size_expressions_in_launch_metadata_are_checked() -> None:
    with pytest.raises(MetadataError, match=r"\['grid'\]\[0\]: '\(3\*s1\+15\)//16' uses s1, "
                                            "which is not an integer parameter"):
        load_kernel({**ENTRY, "meta": {**META, "grid": ["(3*s1+15)//16", 1, 1]}}, FILES)
    with pytest.raises(MetadataError, match=r"\['grid'\]\[1\]: expected an integer, got str"):
        load_kernel({**ENTRY, "meta": {**META, "grid": ["s0", "2", 1]}}, FILES)
    with pytest.raises(MetadataError, match=r"\['grid'\]\[0\]: expected an integer or a size "
                                            "expression"):
        load_kernel({**ENTRY, "meta": {**META, "grid": ["__import__('os')", 1, 1]}}, FILES)


def test_argument_specialization_is_tritons() -> None:
    key = argument_specialization
    assert key(16) == key(32) == key(4096)      # multiples of 16: one binary
    assert key(16) != key(17) and key(17) == key(18)
    assert key(2**31) != key(2**27)             # i64 against i32
    x = torch.zeros(8)
    assert key(x) == key(torch.zeros(4)) != key(x[1:])   # 16-byte alignment


class _FakeCompiled:
    """Stands for Triton's CompiledKernel: ``compiled[grid](*args)`` records the launch."""

    def __init__(self, launches: list[tuple[str, Any, tuple[Any, ...]]], tag: str) -> None:
        self.launches, self.tag = launches, tag

    def __getitem__(self, grid: tuple[int, int, int]) -> Any:
        return lambda *args: self.launches.append((self.tag, grid, args))


class _FakeJit:
    """Stands for a ``@triton.jit`` function on a GPU: counts JIT launches and builds."""

    arg_names = ["x_ptr", "s0", "XBLOCK"]

    def __init__(self) -> None:
        self.launches: list[tuple[str, Any, tuple[Any, ...]]] = []
        self.builds = 0

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        return lambda *args, **kw: self.launches.append(("jit", grid, args))

    def warmup(self, *args: Any, grid: Any, **kw: Any) -> _FakeCompiled:
        self.builds += 1
        return _FakeCompiled(self.launches, f"binary{self.builds}")


def test_binaries_are_kept_by_specialization_not_by_grid() -> None:
    spec = TritonKernelSpec("k", "", {"x_ptr": "*fp32", "s0": "i64"}, {"XBLOCK": 16})
    fn = _FakeJit()
    kernel = TritonKernel(spec, fn, interpret=False)
    x = torch.zeros(4)
    kernel.launch((1,), x, 16)   # first of its class: JIT, then the binary is kept
    kernel.launch((2,), x, 32)   # same class, new grid: the kept binary, no JIT
    kernel.launch((3,), x, 17)   # not a multiple of 16: its own binary
    kernel.launch((5,), x, 65)
    assert fn.launches == [
        ("jit", (1, 1, 1), (x, 16)),  # the grid in three dimensions, as binaries take it
        ("binary1", (2, 1, 1), (x, 32, 16)),
        ("jit", (3, 1, 1), (x, 17)),
        ("binary2", (5, 1, 1), (x, 65, 16)),
    ]
    assert fn.builds == 2


def test_launch_sizes_are_evaluated_once_per_size_values(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    from ember.runtime.compiled import triton_launcher
    from ember.runtime.compiled.triton_launcher import LaunchSizes

    sizes = LaunchSizes({"a_ptr": "*fp32", "s0": "i64", "s1": "i64"},
                        ("(s0*s1+511)//512", "s0", 1))
    calls: list[dict[str, int]] = []
    evaluate = sizes.evaluate

    def counted(env: Mapping[str, int]) -> tuple[int, ...]:
        calls.append(dict(env))
        return evaluate(env)

    monkeypatch.setattr(sizes, "evaluate", counted)
    assert sizes.at((None, 3, 1000)) == (6, 3, 1)
    assert sizes.at((None, 3, 1000)) == (6, 3, 1)
    assert sizes.at((None, 4, 1000)) == (8, 4, 1)
    assert calls == [{"s0": 3, "s1": 1000}, {"s0": 4, "s1": 1000}]
    monkeypatch.setattr(triton_launcher, "LAUNCH_SIZES_CACHE", 2)
    assert sizes.at((None, 5, 1000)) == (10, 5, 1)  # the cache was full: cleared first
    assert sizes.at((None, 3, 1000)) == (6, 3, 1) and len(calls) == 4
