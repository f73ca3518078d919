"""An object a standard-library class makes (constructed for real while capturing) that is
live at a graph break, e.g. the ``warnings.catch_warnings()`` of a ``with`` block whose
``__enter__`` breaks. Before, it was a constant of the first call, reused at every later
call: "Cannot enter catch_warnings() twice". It is constructed again after the graph
(``New("call")`` in ``bytecode/state.py``); a library-made object the capture wrote to
runs that resume point eagerly."""

from __future__ import annotations

import warnings

import torch
from strict_helpers import strict


def quiet(x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.warn("hello")
    return x + 1


def test_catch_warnings_every_call() -> None:
    compiled = strict(quiet)
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert not [w for w in caught if "hello" in str(w.message)]
    assert list(warnings.filters) == before


def test_builtin_mutable_object_is_new_at_every_call() -> None:
    # before: the bytearray was the first call's, appended to at every call (b"xyzz")
    def f(x):
        ba = bytearray(b"xy")
        ba.append(122)
        return x * len(ba), bytes(ba)

    compiled = strict(f)
    for _ in range(3):
        got = compiled(torch.ones(2))
        assert got[1] == b"xyz"
        torch.testing.assert_close(got[0], torch.full((2,), 3.0))


def test_bin_hex_oct_are_values() -> None:
    def f(x):
        return x * len(bin(5)), hex(255), oct(8)

    compiled = strict(f)
    assert compiled(torch.ones(1))[1:] == ("0xff", "0o10")
    assert compiled.stats.graph_breaks == 0
