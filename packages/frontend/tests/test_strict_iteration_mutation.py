"""Containers changed while a loop iterates them, as CPython's iterators see it
(``bytecode/iteration.py``). Before, the loop iterated a copy taken at ``GET_ITER``:
items a loop appended to its own list were never visited (a work queue stopped early),
and a dict or set changed in size did not raise."""

from __future__ import annotations

import torch
from strict_helpers import check


def queue(x):
    q = [x]
    out = []
    for t in q:
        out.append(t)
        if len(q) < 4:
            q.append(t * 2)
    return out


def enumerate_appends(x):
    xs = [x]
    for i, t in enumerate(xs, start=1):
        if i < 3:
            xs.append(t + i)
    return xs


def remove_while_iterating(x):
    xs = [1, 2, 3, 4]
    seen = []
    for v in xs:
        seen.append(v)
        if v == 2:
            xs.remove(v)
    return x * len(seen), seen, xs


def argument_list(x, xs):
    for v in xs:
        if v < 3:
            xs.append(v + 2)
    return x * len(xs)


def dict_and_set_size_changes(x):
    d = {"a": 1, "b": 2}
    s = {1, 2}
    errors = []
    try:
        for k in d:
            d["c"] = 3
    except RuntimeError as e:
        errors.append(str(e))
    try:
        for v in s:
            s.add(v + 10)
    except RuntimeError as e:
        errors.append(str(e))
    return x + 1, errors


def dict_values_read_when_given(x):
    d = {"a": 1, "b": 2}
    items, values = [], []
    for k, v in d.items():
        items.append(v)
        d["b"] = 20
    for v in d.values():
        values.append(v)
        d["b"] = 30
    return x + 1, items, values


def test_loops_see_their_containers_change() -> None:
    for fn in (queue, enumerate_appends, remove_while_iterating, dict_and_set_size_changes,
               dict_values_read_when_given):
        check(fn, torch.ones(2), graphs=1, breaks=0, compiles=1)
    check(argument_list, torch.ones(2), [1, 2], graphs=1, breaks=0, compiles=1)
