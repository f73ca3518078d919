"""Values strict capture reads are never frozen or fake (issue #11 item 16).

``type()``, ``__class__`` and ``repr`` never show a fake tensor; values read by code run
for real (library callbacks, ``time``, tensors of arguments read by torch code, sets,
ranges, slices) and values whose identity decides a branch are read or guarded at every
call. Each program is compiled strictly and called three times with different inputs.
"""

from __future__ import annotations

import enum
import fractions
import functools
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
from strict_helpers import assert_same, run3, strict, vec

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
