"""A graph break never freezes a value (issue #11 item 16).

Programs of the kind PyTorch's own capture tests use: breaks on ``Tensor.numpy()``,
inside ``itertools`` iterators, around ``torch.distributions`` objects, with iterators,
generators, closures and containers live across the break. Each program is compiled
strictly and called three times with different inputs; every call must equal eager
(whatever cannot be captured runs eagerly, correctly, on every call). Fake tensors never
reach user-visible values: see ``test_strict_visible_values.py``.
"""

from __future__ import annotations

import collections
import functools
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from strict_helpers import assert_same, run3, strict, vec

# ---- values read by C code: numpy -------------------------------------------------------

def numpy_roundtrip(x):
    y = x + 1
    n = y.numpy()  # break
    return torch.from_numpy(n * 2) + x


def numpy_scalar_arg(x, s):
    return x * s


def test_numpy_break_is_not_frozen() -> None:
    run3(numpy_roundtrip, vec)


def test_numpy_scalar_argument_is_guarded() -> None:
    run3(numpy_scalar_arg, lambda i: (torch.ones(2), np.int64(i + 2)))


# ---- itertools ---------------------------------------------------------------------------

def it_chain(x):
    return [a.sum() for a in itertools.chain([x, x + 1], [x * 2])]


def it_zip_longest(x):
    out = []
    for a, b in itertools.zip_longest([x, x + 1], [1], fillvalue=0):
        out.append(a + b)
    return out


def it_zip_longest_break(x):
    out = []
    for a, b in itertools.zip_longest([x, x + 1], [1], fillvalue=0):
        print("step")
        out.append(a + b)
    return out


def it_product(x):
    return [x * i + j for i, j in itertools.product(range(2), range(2))]


def it_islice_accumulate(x):
    return list(itertools.islice(itertools.accumulate([x, x + 1, x + 2]), 2))


def it_starmap_tee(x):
    a, b = itertools.tee(itertools.starmap(torch.add, [(x, x), (x, 1)]))
    return list(a) + list(b)


def it_perm_comb(x):
    items = [x, x + 1, x * 3]
    return ([a * b for a, b in itertools.permutations(items, 2)]
            + [a - b for a, b in itertools.combinations(items, 2)])


def it_groupby_filter(x):
    parts = [(k, list(g)) for k, g in itertools.groupby([1, 1, 2], key=lambda v: v % 2)]
    kept = list(itertools.filterfalse(lambda t: t is None, [x, None, x + 1]))
    taken = list(itertools.takewhile(lambda v: v < 3, [1, 2, 5, 1]))
    return [x * len(g) + k for k, g in parts] + kept + [x * t for t in taken]


def it_chain_across_break(x):
    it = itertools.chain([x], [x + 1])
    print("break")
    return [a * 2 for a in it]


def it_count_across_break(x):
    out = []
    for _, c in zip(range(3), itertools.count()):
        out.append(x * c)
    return out


def it_next_across_break(x):
    it = itertools.chain([x, x + 1], [x + 2])
    a = next(it)
    print("break")
    return a, list(it)


ITERTOOLS = [it_chain, it_zip_longest, it_zip_longest_break, it_product,
             it_islice_accumulate, it_starmap_tee, it_perm_comb, it_groupby_filter,
             it_chain_across_break, it_count_across_break, it_next_across_break]


@pytest.mark.parametrize("fn", ITERTOOLS, ids=lambda f: f.__name__)
def test_itertools(fn: Callable[..., Any]) -> None:
    run3(fn, vec)


def test_finite_itertools_are_captured() -> None:
    """Finite itertools iterators are materialised: one graph, no break."""
    for fn in (it_chain, it_zip_longest, it_product, it_islice_accumulate, it_perm_comb):
        compiled = run3(fn, vec)
        assert compiled.stats.graph_breaks == 0, (fn.__name__, compiled.breaks)


# ---- torch.distributions ------------------------------------------------------------------

def dist_categorical_probs(x):
    d = torch.distributions.Categorical(logits=x)  # break (validation needs data)
    return d.probs, d.logits


def dist_normal_across_break(x):
    d = torch.distributions.Normal(x, torch.ones_like(x))
    print("break")
    return d.log_prob(x + 1), d.mean


def dist_normal_attrs(x):
    d = torch.distributions.Normal(x, 2.0)
    return d.mean + d.stddev, d.variance


@pytest.mark.parametrize("fn", [dist_categorical_probs, dist_normal_across_break,
                                dist_normal_attrs], ids=lambda f: f.__name__)
def test_distributions(fn: Callable[..., Any]) -> None:
    run3(fn, vec)


# ---- fake tensors do not escape across a break inside containers ---------------------------

def partial_across_break(x):
    p = functools.partial(torch.add, x)
    print("break")
    return p(x)


def deque_across_break(x):
    q = collections.deque([x, x + 1], maxlen=3)
    print("break")
    q.append(x * 2)
    return list(q)


def defaultdict_across_break(x):
    d = collections.defaultdict(list)
    d["a"].append(x)
    print("break")
    d["b"].append(x + 1)
    return d["a"] + d["b"]


@pytest.mark.parametrize("fn", [partial_across_break, deque_across_break,
                                defaultdict_across_break], ids=lambda f: f.__name__)
def test_containers_across_break(fn: Callable[..., Any]) -> None:
    run3(fn, vec)


# ---- builtins and classes --------------------------------------------------------------------

class _Base:
    def __init__(self, scale):
        self.scale = scale


class _Derived(_Base):
    def __init__(self, scale, shift=1):
        super().__init__(scale)
        self.shift = shift


class _MyNormal(torch.distributions.Normal):
    def __init__(self, loc):
        super().__init__(loc, torch.ones_like(loc))


def dict_iter_list(x):
    d = dict(iter([("a", x), ("b", x + 1)]))
    print("break")
    return d["a"] * d["b"]


def dict_update_zip(x, d):
    d.update(zip(["a", "b"], [x, x * 2]))
    d.update(zip(["c"], [x + 1]), e=x)
    return d


def super_init(x):
    o = _Derived(2)
    print("break")
    return x * o.scale + o.shift


def super_init_torch_base(x):
    return _MyNormal(x).log_prob(x)


def test_dict_iter_list() -> None:
    run3(dict_iter_list, vec)


def test_dict_update_zip() -> None:
    compiled = strict(dict_update_zip)
    for i in range(3):
        x = vec(i)[0]
        d1: dict[str, Any] = {"z": i}
        d2: dict[str, Any] = {"z": i}
        assert_same(compiled(x, d1), dict_update_zip(x, d2))
        assert_same(d1, d2)


@pytest.mark.parametrize("fn", [super_init, super_init_torch_base], ids=lambda f: f.__name__)
def test_super_init(fn: Callable[..., Any]) -> None:
    run3(fn, vec)


# ---- more programs of the same kind (regressions) ---------------------------------------------

def gen_across_break(x):
    def gen(n):
        for i in range(n):
            yield x * i
    g = gen(3)
    first = next(g)
    print("break")
    return first, list(g)


def enumerate_zip_map_filter(x):
    pairs = list(zip(map(lambda t: t * 2, [x, x + 1]), enumerate([x, x - 1])))  # noqa: C417
    print("break")
    kept = list(filter(lambda t: t[1][0] > 0, pairs))
    return [a + b for a, (_, b) in kept], len(kept)


def listcomp_across_break(x):
    ys = [x * i for i in range(3)]
    print(ys[0])  # print() of a tensor breaks
    return [y + 1 for y in ys]


def closure_mutated_across_break(x):
    n = 0

    def bump(t):
        nonlocal n
        n += 1
        return t + n

    y = bump(x)
    print("break")
    y = bump(y)
    return y, n


def iter_across_break(x):
    it = iter([x, x + 1, x + 2])
    a = next(it)
    print("break")
    b = next(it)
    return a + b, list(it)


@pytest.mark.parametrize("fn", [gen_across_break, enumerate_zip_map_filter,
                                listcomp_across_break, closure_mutated_across_break,
                                iter_across_break], ids=lambda f: f.__name__)
def test_values_live_across_break(fn: Callable[..., Any]) -> None:
    run3(fn, vec)


# ---- captured whole: no break needed --------------------------------------------------------

class _Plain:
    def __init__(self, v):
        super().__init__()  # object.__init__
        self.v = v


def super_init_object(x):
    return _Plain(x).v + 1


def ordered_dict_update_zip(x):
    d = collections.OrderedDict()
    d.update(zip(["a", "b"], [x, x + 1]))
    return d["b"] - d["a"]


def dict_fromkeys(x):
    return x * dict.fromkeys(["a", "b"], 2)["b"]


def dict_from_iter(x):
    return dict(iter([("a", x), ("b", x + 1)]))["b"]


@pytest.mark.parametrize("fn", [super_init_object, ordered_dict_update_zip, dict_fromkeys,
                                dict_from_iter], ids=lambda f: f.__name__)
def test_captured_without_break(fn: Callable[..., Any]) -> None:
    import ember.frontend as ef

    compiled = ef.compile(fn, backend="eager", fullgraph=True,
                          options={"capture": "strict"})
    for i in range(3):
        x = vec(i)[0]
        assert_same(compiled(x), fn(x))


# ---- generators run lazily, interleaved with their consumer, as in CPython -------------------

def gen_side_effect_order(x):
    out = []

    def gen():
        for i in range(3):
            out.append(i)
            yield x * i

    for v in gen():
        out.append(-1)
    return out


def gen_reads_consumer_state(x):
    state = {"n": 0}

    def gen():
        for _ in range(3):
            state["n"] += 1
            yield x * state["n"]

    out = []
    for v in gen():
        state["n"] *= 10
        out.append(v)
    return out


def gen_stopped_by_consumer(x):
    stop = [False]

    def gen():
        i = 0
        while i < 100 and not stop[0]:
            yield x * i
            i += 1

    out = []
    for v in gen():
        out.append(v)
        if len(out) == 3:
            stop[0] = True
    return out


def gen_zip_enumerate(x):
    def gen():
        for i in range(5):
            yield x + i

    return [(i, a * b) for i, (a, b) in enumerate(zip([1, 2, 3], gen()))]


def gen_break_inside(x):
    def gen():
        for i in range(3):
            print("step", i)
            yield x * i

    return [v + 1 for v in gen()]


@pytest.mark.parametrize("fn", [gen_side_effect_order, gen_reads_consumer_state,
                                gen_stopped_by_consumer, gen_zip_enumerate,
                                gen_break_inside], ids=lambda f: f.__name__)
def test_generators_are_lazy(fn: Callable[..., Any]) -> None:
    run3(fn, vec)


def gen_islice_endless(x):
    def gen():
        i = 0
        while True:
            yield x * i
            i += 1

    return list(itertools.islice(gen(), 3)) + [v for _, v in zip(range(2), gen())]


def gen_any_short_circuit(x):
    seen = []

    def gen():
        for i in range(5):
            seen.append(i)
            yield i

    return x * any(v > 1 for v in gen()), seen


@pytest.mark.parametrize("fn", [gen_islice_endless, gen_any_short_circuit],
                         ids=lambda f: f.__name__)
def test_generators_stop_where_python_stops(fn: Callable[..., Any]) -> None:
    compiled = run3(fn, vec)
    assert compiled.stats.graph_breaks == 0
