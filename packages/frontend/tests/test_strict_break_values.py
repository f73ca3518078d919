"""A graph break never freezes a value, and fake tensors never reach user-visible Python.

Programs of the kind PyTorch's own capture tests use: breaks on ``Tensor.numpy()``,
inside ``itertools`` iterators, around ``torch.distributions`` objects, with iterators,
generators, closures and containers live across the break. Each program is compiled
strictly and called three times with different inputs; every call must equal eager
(whatever cannot be captured runs eagerly, correctly, on every call).
"""

from __future__ import annotations

import collections
import enum
import fractions
import functools
import itertools
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from strict_helpers import assert_same, strict


def run3(fn: Callable[..., Any], make_args: Callable[[int], tuple[Any, ...]]) -> Any:
    """Call ``fn`` eagerly and compiled on three different inputs; compare."""
    compiled = strict(fn)
    for i in range(3):
        expected = fn(*make_args(i))
        got = compiled(*make_args(i))
        assert_same(got, expected)
    return compiled


def vec(i: int) -> tuple[torch.Tensor]:
    return (torch.arange(3.0) * (i + 1) - i,)


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


# ---- fake tensors are never user-visible ---------------------------------------------------

def class_name_branch(x):
    if f"{x.__class__.__name__}" == "Tensor":
        return x + 1
    return x - 1


def type_is_tensor(x):
    y = x * 2
    if type(y) is torch.Tensor and y.__class__ is torch.Tensor:
        return y + 1
    return y - 1


def type_text(x):
    y = x * 2
    return y, str(type(y)), repr(type(x)), type(y).__module__


def repr_of_tensor(x):
    y = x + 1
    return y, len(repr(y)), str(y)


def parameter_type(p):
    return p * 2, type(p).__name__, p.__class__ is torch.nn.Parameter, isinstance(
        p, torch.nn.Parameter)


@pytest.mark.parametrize("fn", [class_name_branch, type_is_tensor, type_text,
                                repr_of_tensor], ids=lambda f: f.__name__)
def test_fake_tensors_not_visible(fn: Callable[..., Any]) -> None:
    run3(fn, vec)


def test_parameter_type_visible() -> None:
    run3(parameter_type, lambda i: (torch.nn.Parameter(torch.ones(2) * i),))


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


# ---- callbacks of library functions are interpreted (their reads guarded) --------------------

SCALE = 2.0


def reduce_with_global(x):
    return functools.reduce(lambda a, b: a * SCALE + b, [x, x + 1, x + 2])


def sorted_key_global(x):
    order = sorted([0, 1, 2], key=lambda i: (i - SCALE) ** 2)
    return [x * i for i in order]


@pytest.mark.parametrize("fn", [reduce_with_global, sorted_key_global],
                         ids=lambda f: f.__name__)
def test_library_callbacks_read_globals_each_call(fn: Callable[..., Any]) -> None:
    global SCALE
    compiled = strict(fn)
    try:
        for scale in (2.0, 0.0, 5.0):
            SCALE = scale
            x = torch.arange(3.0) + scale
            assert_same(compiled(x), fn(x))
    finally:
        SCALE = 2.0


# ---- values that change at every call, or through a class ------------------------------------

def clock(x):
    return x + time.monotonic()


def test_clock_is_not_a_constant() -> None:
    """``time.monotonic()`` runs at every call (old: the first call's time, baked)."""
    compiled = strict(clock)
    x = torch.zeros(1, dtype=torch.float64)
    for _ in range(3):
        before = time.monotonic()
        got = compiled(x).item()
        assert before <= got <= time.monotonic()


class _Holder:
    scale = 2.0


def class_attribute(x, h):
    return x * type(h).scale


def test_class_attribute_through_type_is_guarded() -> None:
    compiled = strict(class_attribute)
    try:
        for scale in (2.0, 3.0, -1.0):
            _Holder.scale = scale
            x = torch.arange(3.0)
            assert_same(compiled(x, _Holder()), class_attribute(x, _Holder()))
    finally:
        _Holder.scale = 2.0


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


# ---- tensors that code run for real reads from an argument are inputs, not constants ---------

def dist_argument(x, d):
    return d.log_prob(x), d.entropy()


def categorical_argument(x, d):
    return d.probs * x


def test_distribution_argument_read_by_torch_code() -> None:
    run3(dist_argument, lambda i: (torch.zeros(3), torch.distributions.Normal(
        torch.arange(3.0) + i, 1.0 + i, validate_args=False)))


def test_lazy_property_cache_gets_real_values() -> None:
    """``Categorical.probs`` caches into the object: the user's object gets the real
    tensor (not a fake), and the next object's probs are its own."""
    compiled = strict(categorical_argument)
    for i in range(3):
        logits = torch.arange(3.0) * i
        d = torch.distributions.Categorical(logits=logits, validate_args=False)
        expected = categorical_argument(torch.ones(3), torch.distributions.Categorical(
            logits=logits, validate_args=False))
        assert_same(compiled(torch.ones(3), d), expected)
        cached = vars(d)["probs"]
        assert type(cached) is torch.Tensor
        assert_same(cached, torch.softmax(logits, 0))


# ---- values from outside read by C code are guarded by value ---------------------------------

def set_size(x, s):
    return x * len(s) + (3 in s)


def range_sum(x, r):
    return x * sum(r)


def slice_of(x, sl):
    return x[sl]


def fraction_scale(x, f):
    return x * float(f)


@pytest.mark.parametrize("fn, make", [
    (set_size, lambda i: (torch.ones(3), set(range(i + 2)))),
    (set_size, lambda i: (torch.ones(3), frozenset(range(i + 2)))),
    (range_sum, lambda i: (torch.ones(3), range(i + 1))),
    (slice_of, lambda i: (torch.arange(5.0), slice(i, 4))),
    (fraction_scale, lambda i: (torch.ones(3), fractions.Fraction(i + 1, 3))),
], ids=["set", "frozenset", "range", "slice", "fraction"])
def test_values_read_by_c_code(fn: Callable[..., Any], make: Any) -> None:
    run3(fn, make)


def add_to_set(x, s):
    s.add(len(s))
    s |= {100}
    return x * len(s)


def test_outside_set_mutated() -> None:
    compiled = strict(add_to_set)
    for i in range(3):
        s1, s2 = set(range(i)), set(range(i))
        assert_same(compiled(torch.ones(2), s1), add_to_set(torch.ones(2), s2))
        assert s1 == s2


# ---- which object an argument is decides a branch: guarded by identity ------------------------

class _Color(enum.Enum):
    RED = 1
    GREEN = 2


_A, _B = _Holder(), _Holder()


def enum_branch(x, c):
    if c is _Color.RED:
        return x + 1
    return x - 1 if c == _Color.GREEN else x


def object_branch(x, o):
    return x + 1 if o is _A else x - 1


def function_argument(x, f):
    return f(x)


def none_branch(x, o):
    return x + 1 if o is None else x - 1


@pytest.mark.parametrize("fn, make", [
    (enum_branch, lambda i: (torch.ones(3), [_Color.RED, _Color.GREEN][i % 2])),
    (object_branch, lambda i: (torch.ones(3), [_A, _B][i % 2])),
    (function_argument, lambda i: (torch.ones(3), [torch.sin, torch.cos][i % 2])),
    (none_branch, lambda i: (torch.ones(3), [None, _Holder()][i % 2])),
], ids=["enum", "object", "builtin_function", "none"])
def test_identity_decides(fn: Callable[..., Any], make: Any) -> None:
    run3(fn, make)


def test_is_none_does_not_pin_fresh_objects() -> None:
    """``o is None`` needs no identity guard: a fresh object each call is one entry."""
    compiled = strict(none_branch)
    for _ in range(3):
        assert_same(compiled(torch.ones(3), _Holder()), none_branch(torch.ones(3), _Holder()))
    assert compiled.stats.compiles == 1
