"""Infinite ``itertools`` iterators (``count``, ``cycle``, ``repeat`` without times) are
lazy during a strict capture: ``islice``/``zip``/``enumerate``/``map`` over them are one
graph, with eager's values (``bytecode/library_rules.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch

from strict_helpers import check, strict


def islice_count(x):
    out = []
    for i in itertools.islice(itertools.count(), 3):
        out.append(x * i)
    return sum(out)


def zip_count(x, xs):
    return [a * b for a, b in zip(itertools.count(), xs)]


def enumerate_islice(x):
    return [x * i * j for i, j in enumerate(itertools.islice(itertools.count(5, 2), 3))]


def count_next_cycle(x):
    c = itertools.count(1)
    a = next(c)
    b = next(c)
    return x * a + b, list(itertools.islice(itertools.cycle([x, 2 * x]), 5))


def shared_count(x):
    # the islice pulls from c lazily, interleaved with the body's next(c)
    c = itertools.count()
    out = []
    for i in itertools.islice(c, 2):
        out.append(x * i + next(c))
    return out, next(c)


def repeat_map_takewhile(x):
    rep = list(zip(itertools.repeat(x), range(2)))
    mapped = list(map(lambda a, b: a * b, itertools.count(1), [x, x]))
    taken = [x * i for i in itertools.takewhile(lambda v: v < 3, itertools.count())]
    floats = [x * i for i in itertools.islice(itertools.count(0.5, 0.25), 1, 4)]
    return rep, mapped, taken, floats


@pytest.mark.parametrize("fn, args", [
    (islice_count, (torch.ones(3),)),
    (zip_count, (torch.ones(3), [torch.ones(2), torch.ones(2)])),
    (enumerate_islice, (torch.ones(3),)),
    (count_next_cycle, (torch.ones(3),)),
    (shared_count, (torch.ones(3),)),
    (repeat_map_takewhile, (torch.ones(3),)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_infinite_iterators_one_graph(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    check(fn, *args, graphs=1, breaks=0, compiles=1)


def test_zip_strict_raises_where_cpython_does() -> None:
    def f(x, out):
        for a, b in zip([x, x], [1], strict=True):
            out.append(a * b)
        return out

    expected: list[Any] = []
    with pytest.raises(ValueError, match="argument 2 is shorter"):
        f(torch.ones(2), expected)
    got: list[Any] = []
    with pytest.raises(ValueError, match="argument 2 is shorter"):
        strict(f)(torch.ones(2), got)
    assert len(got) == len(expected) == 1


def test_reversed_iterator_is_a_type_error() -> None:
    def f(x):
        try:
            r = list(reversed(iter([1, 2])))
        except TypeError:
            r = [0]
        return x * sum(r)

    check(f, torch.ones(2), graphs=1, breaks=0)


def zip_count_with_a_break(x):
    out = []
    for i, t in zip(itertools.count(), [x, x * 2, x * 3]):
        print("break")
        out.append(t * i)
    return out


def enumerate_islice_with_a_break(x):
    out = []
    for i, j in enumerate(itertools.islice(itertools.count(5, 2), 3)):
        print("break")
        out.append(x * i * j)
    return out


def shared_count_with_a_break(x):
    c = itertools.count()
    out = []
    for i, t in zip(c, [x, x]):
        print("break")
        out.append(t * i + next(c))
    return out, next(c)


def test_a_break_in_the_loop_body_resumes_the_loop() -> None:
    # before: the lazy zip alive at the break made the whole function run eagerly; its
    # remaining items are now a list (the count is seen by nothing else), as a list
    # loop's: the same counts as `for i, t in enumerate([x, x * 2, x * 3])`
    for fn in (zip_count_with_a_break, enumerate_islice_with_a_break):
        compiled = check(fn, torch.ones(3), graphs=4 if fn is zip_count_with_a_break else 3,
                         breaks=3)
        assert compiled.stats.eager_fallback_calls == 0
    # a count also read by the body cannot be given as a list: that point runs eagerly
    compiled = check(shared_count_with_a_break, torch.ones(3), graphs=0, breaks=1)
    assert compiled.stats.eager_fallback_calls == 2


def test_count_of_a_symbolic_size() -> None:
    # before: "itertools.count of a SymInt" broke once the size became symbolic
    def f(x):
        k = x.shape[0] // 2
        starts = list(itertools.islice(itertools.count(0, k), 2))
        return [x[s:s + k].sum() for s in starts]

    compiled = strict(f)
    for n in (4, 6, 8, 10):
        x = torch.arange(float(n))
        for got, want in zip(compiled(x), f(x)):
            torch.testing.assert_close(got, want)
    assert compiled.stats.graph_breaks == 0
