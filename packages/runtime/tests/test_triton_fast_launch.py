"""The one-frame Triton launch (``triton_fast_launch.fast_launch``), with stand-ins for a
bound binary's direct launch: no GPU needed. It launches straight through the binary's
pieces once they are bound for the argument specialization and the device; everything
else (an unbound specialization, another device, a launch hook, wrong arguments) goes to
the full launch, and an exception from the C launch is never retried."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from ember.runtime.compiled import triton_fast_launch
from ember.runtime.compiled.triton_fast_launch import fast_launch
from ember.runtime.compiled.triton_kernel import specialization_key
from ember.runtime.config import config

SIGNATURE = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


class Cuda0(torch.Tensor):
    """A CPU tensor that says it is on CUDA device 0 (what the fast path reads)."""

    def get_device(self) -> int:  # type: ignore[override]
        return 0


def _tensors() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(64).as_subclass(Cuda0), torch.zeros(64).as_subclass(Cuda0)


class Setup:
    def __init__(self, static_grid: tuple[int, ...] | None = (4, 1, 1)) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.by_index: dict[int, dict[tuple[Any, ...], Any]] = {0: {}}
        self.launch = fast_launch("k", SIGNATURE, static_grid, self.grid_at, self.by_index,
                                  self.slow)

    def grid_at(self, args: Any) -> tuple[int, ...]:
        return (args[2] // 16, 1, 1)

    def slow(self, *args: Any) -> None:
        self.calls.append(("slow", args))

    def bind(self, args: tuple[Any, ...], fail: bool = False) -> None:
        def c_launch(*a: Any) -> None:
            if fail:
                raise RuntimeError("the C launch failed")
            self.calls.append(("fast", a))
        parts = (c_launch, "function", ("flag", "packed"), ("BLOCK",),
                 lambda device: f"stream{device}", lambda: 0)
        self.by_index[0][specialization_key(SIGNATURE)(args)] = parts


def test_a_bound_specialization_launches_in_one_frame() -> None:
    s = Setup()
    x, out = _tensors()
    s.launch(x, out, 64)  # not bound yet: the full launch (which would bind it)
    s.bind((x, out, 64))
    s.launch(x, out, 64)
    assert s.calls == [("slow", (x, out, 64)),
                       ("fast", (4, 1, 1, "stream0", "function", "flag", "packed", x, out, 64,
                                 "BLOCK"))]
    s.calls.clear()
    s.launch(x, out, 17)  # another specialization (17 is not a multiple of 16): not bound
    s.launch(x[1:], out[1:], 64)  # not 16-byte aligned: another specialization
    s.launch(torch.zeros(64), out, 64)  # a CPU tensor first: get_device() is -1
    assert [c[0] for c in s.calls] == ["slow", "slow", "slow"]


def test_pointers_as_ints_pass_each_tensors_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton_fast_launch, "POINTERS_AS_INTS", True)
    monkeypatch.setattr(config, "torch_launcher", False)  # Triton's launcher
    s = Setup()
    x, out = _tensors()
    s.bind((x, out, 64))
    s.launch(x, out, 64)
    assert s.calls == [("fast", (4, 1, 1, "stream0", "function", "flag", "packed",
                                 x.data_ptr(), out.data_ptr(), 64, "BLOCK"))]
    s.calls.clear()
    s.launch(x, out, 17)  # the full launch still gets the tensors
    assert s.calls == [("slow", (x, out, 17))]
    # not with torch's launcher (triton_static), which takes the tensors
    monkeypatch.setattr(config, "torch_launcher", True)
    s = Setup()
    s.bind((x, out, 64))
    s.launch(x, out, 64)
    assert s.calls[0][1][7:9] == (x, out)


def test_a_symbolic_grid_is_evaluated_and_an_empty_one_launches_nothing() -> None:
    s = Setup(static_grid=None)
    x, out = _tensors()
    s.bind((x, out, 64))
    s.launch(x, out, 64)
    s.bind((x, out, 0))
    s.launch(x, out, 0)
    assert [c[1][:3] for c in s.calls] == [(4, 1, 1)]


def test_wrong_arguments_and_hooks_take_the_full_launch(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    import triton

    s = Setup()
    x, out = _tensors()
    s.bind((x, out, 64))
    s.launch(x, out)  # the full launch names the signature
    s.launch(x, "out", 64)  # no dtype: the full launch raises
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", lambda *a: None)
    s.launch(x, out, 64)  # a profiler's hook: Triton's own runner calls it
    assert [c[0] for c in s.calls] == ["slow", "slow", "slow"]


def test_an_exception_from_the_launch_is_not_retried() -> None:
    s = Setup()
    x, out = _tensors()
    s.bind((x, out, 64), fail=True)
    with pytest.raises(RuntimeError, match="the C launch failed"):
        s.launch(x, out, 64)
    assert s.calls == []


def test_no_fast_path_without_pointers_or_with_an_empty_grid() -> None:
    def slow(*a: Any) -> None:
        pass

    assert fast_launch("k", {"n": "i32"}, (1, 1, 1), lambda a: (1, 1, 1), {}, slow) is slow
    assert fast_launch("k", SIGNATURE, (0, 1, 1), lambda a: (1, 1, 1), {}, slow) is slow
    launch = fast_launch("k", SIGNATURE, (1, 1, 1), lambda a: (1, 1, 1), {}, slow)
    assert launch is not slow and launch.__name__ == "k"
