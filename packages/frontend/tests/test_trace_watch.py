"""The trace capture (``capture="trace"``) runs the Python once, at capture
(``trace_watch.py``). Before: a call of a function marked ``ember.frontend.disable`` /
``torch.compiler.disable`` was traced through (its side effects ran once, at capture,
never at later calls), and a global or nonlocal counter the function rebinds was
updated once, silently. Now the disabled call is refused with a ``CaptureError`` naming
the call's line, and the rebinding is a ``TraceSideEffectWarning`` naming its line."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.trace import CaptureError
from ember.frontend.trace_watch import TraceSideEffectWarning

LOG: list[int] = []
COUNT = 0


@ef.disable
def _ember_disabled(x: torch.Tensor) -> torch.Tensor:
    LOG.append(1)
    return x


@torch.compiler.disable
def _torch_disabled(x: torch.Tensor) -> torch.Tensor:
    LOG.append(2)
    return x


def _trace(fn: Any) -> Any:
    return ef.compile(fn, backend="eager", options={"capture": "trace"})


@pytest.mark.parametrize("callee", [_ember_disabled, _torch_disabled])
def test_a_disabled_call_is_refused_at_its_line(callee: Any) -> None:
    LOG.clear()

    def f(x: torch.Tensor) -> torch.Tensor:
        y = callee(x + 1)  # the call
        return y * 2

    with pytest.raises(CaptureError, match=r"test_trace_watch\.py:\d+ in f: y = callee\(x \+ 1\)"
                                           r"(.|\n)*marked (ember|torch)\.\w+\.disable"
                                           r"(.|\n)*strict capture"):
        _trace(f)(torch.ones(2))
    assert LOG == []  # the body never ran on fake tensors
    strict = ef.compile(f, backend="eager")  # strict: eagerly, at every call
    for _ in range(2):
        torch.testing.assert_close(strict(torch.ones(2)), torch.full((2,), 4.0))
    assert LOG == [LOG[0]] * 2


def test_a_refusal_the_code_catches_still_fails_the_trace() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            return _ember_disabled(x)
        except Exception:
            return x

    with pytest.raises(CaptureError, match="marked ember.frontend.disable"):
        _trace(f)(torch.ones(2))


def test_only_the_marked_function_of_a_shared_code_is_refused() -> None:
    # every @contextmanager function runs one wrapper code (contextlib's helper)
    @contextlib.contextmanager
    def marked() -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def other() -> Iterator[None]:
        yield

    ef.disable(marked)

    def make(k: int) -> Any:
        def scale(x: torch.Tensor) -> torch.Tensor:
            return x * k
        return scale

    scale2, scale3 = make(2), make(3)
    ef.disable(scale2)

    def f(x: torch.Tensor) -> torch.Tensor:
        with other():
            return scale3(x)

    torch.testing.assert_close(_trace(f)(torch.ones(2)), torch.full((2,), 3.0))

    def g(x: torch.Tensor) -> torch.Tensor:
        return scale2(x)

    with pytest.raises(CaptureError, match=r"call to \S*make.<locals>.scale, marked"):
        _trace(g)(torch.ones(2))


def test_torch_own_disabled_code_is_still_traced() -> None:
    # a TorchDispatchMode's __torch_dispatch__ is under torch.compiler.disable; the
    # recorder's mode runs at every op of every trace
    model = torch.nn.Linear(3, 2)
    torch.testing.assert_close(_trace(model)(torch.ones(1, 3)), model(torch.ones(1, 3)))


def test_a_rebound_global_warns_at_its_line() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        global COUNT
        COUNT += 1
        return x * 2

    compiled = _trace(f)
    with pytest.warns(TraceSideEffectWarning, match=r"COUNT \+= 1: .*global variable 'COUNT'"
                                                    r" once, at capture") as caught:
        compiled(torch.ones(2))
    assert caught[0].filename == __file__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled(torch.ones(2))  # a cache hit: nothing runs, nothing warns


def test_a_rebound_nonlocal_warns_and_unchanged_values_do_not() -> None:
    n = 0
    limit = 3

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal n, limit
        n += 1
        limit = limit  # the same object: not a change
        return x + n

    with pytest.warns(TraceSideEffectWarning, match=r"n \+= 1: .*nonlocal variable 'n'") as w:
        _trace(f)(torch.ones(2))
    assert [str(c.message).count("'limit'") for c in w] == [0]


def test_a_cell_of_the_traced_call_itself_does_not_warn() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        total = 0

        def add(k: int) -> None:
            nonlocal total
            total += k

        add(2)
        kept = [y for k in range(3) if (y := k * 2)]
        return x * total + len(kept)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(_trace(f)(torch.ones(2)), torch.full((2,), 4.0))


def test_a_branch_not_taken_does_not_warn() -> None:
    def f(x: torch.Tensor, flag: bool) -> torch.Tensor:
        global COUNT
        if flag:
            COUNT = 0
        return x * 2

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _trace(f)(torch.ones(2), False)


def test_a_profiler_already_installed_turns_the_watch_off() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return _ember_disabled(x) * 2

    def profiler(frame: Any, event: str, arg: Any) -> None:
        return None

    sys.setprofile(profiler)
    try:
        out = _trace(f)(torch.ones(2))  # not checked (logged under fallbacks)
        assert sys.getprofile() is profiler
    finally:
        sys.setprofile(None)
    torch.testing.assert_close(out, torch.full((2,), 2.0))


LAST: Any = None


class _Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.step = 0
        self.lin = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.step += 1
        return self.lin(x)


def test_a_rebound_module_attribute_warns() -> None:
    m = _Counting()
    with pytest.warns(TraceSideEffectWarning, match=r"changed self\.step once, at capture"):
        _trace(m)(torch.ones(2))
    assert m.step == 1


class _Caching(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cache = torch.zeros(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache = self.cache + x
        return x * 2


def test_a_computed_tensor_stored_outside_the_result_is_refused_and_put_back() -> None:
    # before: the module (or global) was left holding a FakeTensor after the capture
    m = _Caching()
    original = m.cache
    with pytest.raises(CaptureError, match=r"stores a tensor it computed in self\.cache"):
        _trace(m)(torch.ones(2))
    assert m.cache is original

    def f(x: torch.Tensor) -> torch.Tensor:
        global LAST
        LAST = x * 3
        return x + 1

    with pytest.raises(CaptureError, match=r"stores a tensor it computed in the global "
                                           r"'LAST'"), warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceSideEffectWarning)
        _trace(f)(torch.ones(2))
    assert LAST is None
