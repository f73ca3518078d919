"""A bound method of an outside list or dict (``log.append`` passed in, or held by a
closure) called inside a strict capture. Before: called for real at capture time, so the
mutation happened once, and every later call (a cache hit) skipped it. Now it is a
mutation of the container's shadow, replayed at every call. A function that library
code run for real made around the program's values (``contextlib.ExitStack``'s callback
wrapper) is no constant of the first call either (``bytecode/state.py``)."""

from __future__ import annotations

import contextlib

import torch
from strict_helpers import strict


def held_across_a_break(x, cb):
    h = cb
    print("break")
    h("hi")
    return x * 2


def in_a_closure(x, cb):
    def g():
        cb("hi")

    print("break")
    g()
    return x * 2


def without_a_break(x, cb):
    cb("hi")
    return x * 2


def test_outside_bound_methods_mutate_at_every_call() -> None:
    for fn in (held_across_a_break, in_a_closure, without_a_break):
        compiled = strict(fn)
        for _ in range(3):
            log: list[str] = []
            torch.testing.assert_close(compiled(torch.ones(2), log.append), torch.full((2,), 2.0))
            assert log == ["hi"], fn.__name__


def test_another_method_of_the_same_list_recompiles() -> None:
    compiled = strict(without_a_break)
    log: list[str] = []
    compiled(torch.ones(2), log.append)
    compiled(torch.ones(2), log.remove)  # removes the "hi" the first call appended
    assert log == []
    assert compiled.stats.recompiles == 1


def test_exit_stack_callback_runs_at_every_call() -> None:
    def f(x):
        log = []
        with contextlib.ExitStack() as stack:
            stack.callback(log.append, "cb")
            y = x * 2
        return y, log

    compiled = strict(f)
    for _ in range(3):
        assert compiled(torch.ones(2))[1] == ["cb"]
