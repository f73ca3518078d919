"""``locals()``, ``vars()``, ``dir()``, ``globals()`` and frame introspection inside a
strict capture. Before, they described Ember's own frame: ``locals()["y"]`` raised
KeyError, ``globals()["K"]`` KeyError at the break that ran it, and
``inspect.currentframe().f_code.co_name`` was ``'direct'``."""

from __future__ import annotations

import inspect
import sys

import torch
from strict_helpers import check, strict

K = 3


def locals_and_vars(x):
    y = x * 2
    z = 1

    def inner():
        return z

    seen = locals()
    return seen["y"], sorted(seen), dir(), sorted(vars()), inner()


def locals_after_a_break(x):
    y = x + 1
    print("break")
    return sorted(locals()), locals()["y"]


def reads_globals(x):
    g = globals()
    return x * g["K"], "K" in g


def current_frame(x):
    return x + 1, inspect.currentframe().f_code.co_name, sys._getframe(0).f_code.co_name


def test_locals_describe_the_program_frame() -> None:
    check(locals_and_vars, torch.ones(2), graphs=1, breaks=0)
    check(locals_after_a_break, torch.ones(2), graphs=1, breaks=1)


def test_globals_breaks_and_reads_the_program_globals() -> None:
    compiled = check(reads_globals, torch.ones(2), graphs=1, breaks=1)
    assert "globals()" in compiled.breaks[0].reason


def test_frame_introspection_runs_eagerly() -> None:
    compiled = strict(current_frame)
    assert compiled(torch.ones(2))[1:] == ("current_frame", "current_frame")
    assert "frame introspection" in compiled.breaks[0].reason


class _Point:
    def __init__(self) -> None:
        self.a = 1
        self.b = 2


_POINT = _Point()


def test_vars_of_an_object() -> None:
    # before: "call to vars, a function Ember cannot look into" (a break)
    def made_here(x):
        class O:
            pass

        o = O()
        for i, name in enumerate(["a", "b"]):
            setattr(o, name, x * i)
        delattr(o, "a")
        return getattr(o, "b"), hasattr(o, "a"), sorted(vars(o))

    def outside(x):
        d = vars(_POINT)
        _POINT.c = 3
        return x * d["a"], sorted(vars(_POINT)), sorted(d)

    check(made_here, torch.ones(2), graphs=1, breaks=0)
    compiled = strict(outside)
    for _ in range(2):
        vars(_POINT).pop("c", None)
        want = outside(torch.ones(2))
        vars(_POINT).pop("c", None)
        got = compiled(torch.ones(2))
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:] and _POINT.c == 3
    assert compiled.stats.graph_breaks == 0
