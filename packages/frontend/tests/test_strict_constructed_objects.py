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
