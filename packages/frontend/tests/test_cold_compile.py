"""Cold compile (issue #17 item 5): Python's garbage collector is paused while Ember
captures and compiles (a cold compile spent a quarter of its time in full collections),
and the stage profile's ``capture`` covers the whole capture."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from ember.frontend import compiled
from ember.frontend.bytecode import strict
from ember.runtime.ir.gc_pause import collector_paused
from ember.runtime.phases import last_compile_profile, phase


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the collector was on at each compile_program call (both capture modes
    call it through ``ember.frontend.compiled``)."""
    seen: list[bool] = []
    real = compiled.compile_program  # type: ignore[attr-defined]

    def compile_program(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(compiled, "compile_program", compile_program)
    return seen


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_the_collector_is_off_while_compiling_and_on_after(
        capture: str, monkeypatch: pytest.MonkeyPatch, collector_on: None) -> None:
    import ember.frontend

    seen = _spy(monkeypatch)
    fast = ember.frontend.compile(torch.nn.Linear(4, 4), backend="eager",
                                  options={"capture": capture})
    fast(torch.randn(2, 4))
    assert seen == [False] and gc.isenabled()


def test_a_collector_the_user_disabled_stays_disabled(
        monkeypatch: pytest.MonkeyPatch, collector_on: None) -> None:
    import ember.frontend

    seen = _spy(monkeypatch)
    gc.disable()
    fast = ember.frontend.compile(torch.nn.Linear(4, 4), backend="eager")
    fast(torch.randn(2, 4))
    assert seen == [False] and not gc.isenabled()


def test_the_collector_resumes_when_the_last_of_several_compiles_ends(
        collector_on: None) -> None:
    inner_done, outer_may_end = threading.Event(), threading.Event()
    states: list[bool] = []

    def other_thread() -> None:
        with collector_paused():
            inner_done.set()
            outer_may_end.wait(timeout=10)

    with collector_paused():
        with collector_paused():  # nested (a compile inside a capture)
            states.append(gc.isenabled())
        states.append(gc.isenabled())
        thread = threading.Thread(target=other_thread)
        thread.start()
        inner_done.wait(timeout=10)
    states.append(gc.isenabled())  # the other thread still compiles
    outer_may_end.set()
    thread.join()
    states.append(gc.isenabled())
    assert states == [False, False, False, True]


def test_the_capture_phase_includes_the_first_check_of_the_code(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check that the interpreter runs the function's bytecode imports the
    interpreter on a first compile (0.7 s of a cold ResNet compile, untimed before)."""
    import ember.frontend

    real = strict.StrictFunction._check_supported

    def check(self: Any) -> bool:
        with phase("code check"):  # nested under the phase open now, if any
            return real(self)

    monkeypatch.setattr(strict.StrictFunction, "_check_supported", check)
    fast = ember.frontend.compile(torch.nn.Linear(4, 4), backend="eager")
    fast(torch.randn(2, 4))
    profile = last_compile_profile()
    assert profile is not None
    assert list(profile.phases)[:2] == ["capture", "capture/code check"]
    assert profile.phases["capture"].calls == 1
