"""Triton's scratch allocator in every launching thread (``triton_scratch``): a binary
whose metadata asks for global scratch memory (TMA descriptors) finds an allocator in
whichever thread launches it, through the direct launch, Triton's runner and the JIT
path; one asking for none leaves the thread as it was; a user's allocator is kept. On
the CPU with fake binaries (their metadata and runner); the real thing is
``test_matmul_tma_safety.py``'s CUDA tests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

triton = pytest.importorskip("triton")

from ember.runtime.compiled import triton_scratch
from ember.runtime.compiled.triton_kernel import (
    TritonKernel,
    TritonKernelSpec,
    binary_launch,
)
from ember.runtime.compiled.triton_scratch import (
    needs_global_scratch,
    scratch_allocation,
)
from triton.runtime import _allocation


def _current_allocator() -> Any:
    return _allocation._allocator.get()


class _Binary:
    """A compiled binary whose runner records the allocator Triton would ask at that
    launch (Triton's launcher reads the context's allocator in the launching thread)."""

    def __init__(self, scratch: int) -> None:
        self.metadata = SimpleNamespace(global_scratch_size=scratch, global_scratch_align=128)
        self.seen: list[Any] = []
        self.function, self.packed_metadata = "fn", "packed"

    @property
    def run(self) -> Any:
        return lambda *a: self.seen.append(_current_allocator())

    def __getitem__(self, grid: Any) -> Any:
        def runner(*args: Any) -> None:  # not Triton's thin runner: launched through it
            self.seen.append(_current_allocator())
        return runner


class _DirectBinary(_Binary):
    """Shaped like Triton's CompiledKernel: launched directly (``binary_launch``)."""

    def __getitem__(self, grid: Any) -> Any:
        def runner(*args: Any, stream: Any = None) -> None:
            launch_metadata = None
            self.run(grid[0], grid[1], grid[2], stream, self.function, self.packed_metadata, launch_metadata,
                     None, None, *args)
        return runner


class _Driver:
    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int) -> int:
        return 0


@pytest.fixture
def fake_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.runtime import driver

    monkeypatch.setattr(driver, "_active", _Driver())


def _in_thread(fn: Callable[[], None]) -> None:
    """Run ``fn`` in a fresh thread (a fresh context: no allocator), re-raising."""
    errors: list[BaseException] = []

    def body() -> None:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(e)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]


def test_a_fresh_thread_has_no_allocator() -> None:
    """What the rule is for: Triton's allocator slot does not follow into a thread."""
    seen: list[Any] = []
    _in_thread(lambda: seen.append(_current_allocator()))
    assert isinstance(seen[0], _allocation.NullAllocator)


@pytest.mark.parametrize("binary_type", [_Binary, _DirectBinary])
def test_a_binary_needing_scratch_finds_an_allocator_in_any_thread(
        binary_type: type[_Binary], fake_driver: None) -> None:
    binary = binary_type(scratch=384)
    launch = binary_launch(binary, ())
    _in_thread(lambda: launch((1, 1, 1), ("x",)))

    def twice() -> None:
        launch((2, 1, 1), ("x",))
        launch((3, 1, 1), ("x",))

    _in_thread(twice)
    assert binary.seen == [scratch_allocation] * 3


def test_a_binary_without_scratch_leaves_the_thread_alone() -> None:
    binary = _Binary(scratch=0)
    launch = binary_launch(binary, ())
    _in_thread(lambda: launch((1, 1, 1), ("x",)))
    assert len(binary.seen) == 1 and isinstance(binary.seen[0], _allocation.NullAllocator)


def test_the_users_allocator_is_kept() -> None:
    def mine(size: int, alignment: int, stream: int | None) -> Any:
        raise AssertionError("not called here")

    binary = _Binary(scratch=128)
    launch = binary_launch(binary, ())

    def body() -> None:
        triton.set_allocator(mine)
        launch((1, 1, 1), ("x",))

    _in_thread(body)
    assert binary.seen == [mine]


class _JitFunction:
    """A ``@triton.jit`` function's launch surface; ``warmup`` yields ``binary``."""

    def __init__(self, binary: _Binary) -> None:
        self.binary = binary
        self.arg_names = ["x"]
        self.launched: list[Any] = []

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **options: self.launched.append(_current_allocator())

    def warmup(self, *args: Any, **options: Any) -> _Binary:
        return self.binary


def test_the_jit_path_installs_one_before_triton_builds_the_binary() -> None:
    """The first launch of a specialization goes through Triton's JIT, which says what
    the binary needs only once built: an allocator is there before it launches; later
    launches call the binary, whose metadata asks for scratch memory."""
    binary = _Binary(scratch=256)
    fn = _JitFunction(binary)
    kernel = TritonKernel(TritonKernelSpec("k", "", {"x": "i32"}), fn, interpret=False)
    _in_thread(lambda: kernel.launch((1,), 5))
    assert fn.launched == [scratch_allocation]
    _in_thread(lambda: kernel.launch((1,), 5))  # the bound binary, in another thread
    assert binary.seen == [scratch_allocation]


def test_an_interpreted_kernel_sets_no_allocator() -> None:
    fn = _JitFunction(_Binary(scratch=0))
    kernel = TritonKernel(TritonKernelSpec("k", "", {"x": "i32"}), fn, interpret=True)
    _in_thread(lambda: kernel.launch((1,), 5))
    assert isinstance(fn.launched[0], _allocation.NullAllocator)


@pytest.mark.parametrize(("metadata", "needs"), [
    (SimpleNamespace(global_scratch_size=128), True),
    (SimpleNamespace(global_scratch_size=0), False),
    (SimpleNamespace(shared=0), False),  # a Triton before the field
    ({"global_scratch_size": 64}, True),
    (None, False),
])
def test_needs_global_scratch_reads_the_metadata(metadata: Any, needs: bool) -> None:
    assert needs_global_scratch(SimpleNamespace(metadata=metadata)) is needs


def test_the_check_is_once_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    installs: list[Any] = []
    monkeypatch.setattr(triton, "set_allocator", installs.append)

    def body() -> None:
        for _ in range(3):
            triton_scratch.ensure_scratch_allocator()

    _in_thread(body)
    _in_thread(body)
    assert installs == [scratch_allocation] * 2
