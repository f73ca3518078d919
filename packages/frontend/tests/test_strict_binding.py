"""Strict capture binds the arguments of inlined calls exactly as CPython does.

A generated matrix: every signature in ``SIGNATURES`` x every call shape in
``CALL_SHAPES`` (positional, keywords, ``*`` and ``**`` splats, mixtures and invalid
calls). Each case is checked three ways: the binder against
``inspect.signature(f).bind``; the eager call against that binding (the matrix itself is
right); and a strictly compiled caller, which inlines the callee, against eager (same
values, or the same ``TypeError`` message).
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import pytest
import torch
from ember.frontend.bytecode.binding import BindError, bind_arguments
from strict_helpers import assert_same, strict

# parameter lists; every function returns its locals (and one tensor op)
SIGNATURES = [
    "a, b",
    "a, b=2",
    "a, /, b, c=3",
    "a, *args",
    "a, *args, k, m=5",
    "a, b=2, *args, k=4, **kwargs",
    "*args, **kwargs",
    "a, /, **kwargs",
    "a, *, k",
    "a=1, /, b=2, *, c=3, **kw",
    "a, b, /, c, *args, d, e=5, **kw",
    "a, b=2, /, *args, k=4",
]

# call shapes: the text between the parentheses; ``x`` is a tensor, ``t`` a tuple and
# ``d`` a dict argument of the compiled caller
_POSITIONAL = ["", "x", "x, 1", "x, 1, 2", "x, 1, 2, 3, 4"]
_KEYWORDS = ["", "a=x", "b=1", "k=2", "m=3", "c=4, d=5", "e=6", "zz=7", "a=1, b=x",
             "kwargs=8"]
CALL_SHAPES = sorted({
    ", ".join(p for p in (pos, kw) if p)
    for pos, kw in itertools.product(_POSITIONAL, _KEYWORDS)
} | {
    "*t", "x, *t", "*t, k=1", "**d", "x, **d", "*t, **d", "x, *t, k=1, **d",
    "*[x, 1, 2]", "**{'a': x, 'b': 1}", "x, *(1,), **{'k': 2}", "**{'a': x, 'k': 1}",
    "x, **{'zz': 1, 'k': 2}", "x, 1, **{'b': 2}", "**{1: x}", "x, *3", "x, **3",
    "x, k=1, **{'k': 2}",
})
_SPLAT_T = (1, 2)
_SPLAT_D = {"k": 3, "e": 4}


def _make(params: str) -> Any:
    names = [p.split("=")[0].strip(" *") for p in params.split(",")
             if p.strip() not in ("/", "*")]
    body = ", ".join(f"{n!r}: {n}" for n in names)
    scope: dict[str, Any] = {"torch": torch}
    exec(f"def callee({params}):\n    return {{{body}}}, torch.ones(2) * 2\n", scope)  # noqa: S102
    return scope["callee"]


def _caller(callee: Any, shape: str) -> Any:
    scope: dict[str, Any] = {"callee": callee}
    exec(f"def caller(x, t, d):\n    return callee({shape})\n", scope)  # noqa: S102
    return scope["caller"]


def _outcome(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except TypeError as e:
        return e


CASES = [(s, c) for s in SIGNATURES for c in CALL_SHAPES]


def _splat_args(shape: str, x: torch.Tensor) -> tuple[list[Any], dict[Any, Any]] | None:
    """The positional and keyword arguments a call shape passes (for inspect); None
    when the call site itself raises (a keyword repeated by a ``**`` splat)."""
    captured: dict[str, Any] = {}

    def record(*args: Any, **kwargs: Any) -> None:
        captured["args"], captured["kwargs"] = list(args), kwargs

    try:
        _caller(record, shape)(x, _SPLAT_T, dict(_SPLAT_D))
    except TypeError:
        return None
    return captured["args"], captured["kwargs"]


def _inspect_is_wrong(sig: inspect.Signature, kwargs: dict[Any, Any]) -> bool:
    """``inspect.Signature.bind`` refuses a positional-only name passed as a keyword
    even when ``**kwargs`` takes it; CPython binds it into ``**kwargs``."""
    params = sig.parameters.values()
    return any(p.kind is p.VAR_KEYWORD for p in params) and any(
        p.kind is p.POSITIONAL_ONLY and p.name in kwargs for p in params)


def _inspect_binds(sig: inspect.Signature, args: list[Any], kwargs: dict[Any, Any]) -> bool:
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


@pytest.mark.parametrize("params", SIGNATURES)
def test_binder_matches_cpython_and_inspect(params: str) -> None:
    """For every call shape the binder's locals equal the locals CPython gives the
    callee (and ``inspect.signature(f).bind(...)`` with defaults applied, where inspect
    agrees with CPython); it fails exactly where the call raises TypeError."""
    callee = _make(params)
    sig = inspect.signature(callee)
    x = torch.zeros(2)
    for shape in CALL_SHAPES:
        splat = _splat_args(shape, x)
        if splat is None:
            continue
        args, kwargs = splat
        eager = _outcome(callee, *args, **kwargs)
        if isinstance(eager, TypeError):
            with pytest.raises(BindError):
                bind_arguments(callee, args, kwargs)
            assert not _inspect_binds(sig, args, kwargs), shape
            continue
        got = bind_arguments(callee, args, kwargs).values
        assert list(got) == list(callee.__code__.co_varnames[:len(got)]), shape
        assert got == eager[0], shape
        if not _inspect_is_wrong(sig, kwargs):
            bound = sig.bind(*args, **kwargs)
            bound.apply_defaults()
            assert dict(bound.arguments) == got, shape


@pytest.mark.parametrize("params", SIGNATURES)
def test_inlined_binding_matches_eager(params: str) -> None:
    """Each call shape, compiled strictly with the callee inlined, gives eager's values,
    or eager's TypeError with the same message; eager agrees with inspect."""
    callee = _make(params)
    sig = inspect.signature(callee)
    for shape in CALL_SHAPES:
        caller = _caller(callee, shape)
        compiled = strict(caller)
        for i in range(2):
            x = torch.full((2,), float(i))
            splat = _splat_args(shape, x)
            expected = _outcome(caller, x, _SPLAT_T, dict(_SPLAT_D))
            got = _outcome(compiled, x, _SPLAT_T, dict(_SPLAT_D))
            binds = not isinstance(expected, TypeError)
            if splat is not None and not _inspect_is_wrong(sig, splat[1]):
                assert _inspect_binds(sig, *splat) == binds, (params, shape)
            if isinstance(expected, TypeError):
                assert type(got) is TypeError and str(got) == str(expected), (params, shape)
            else:
                assert_same(got, expected)
        if binds:
            assert compiled.stats.graph_breaks == 0, (params, shape, compiled.breaks)


def _make_method_owner(params: str) -> Any:
    names = [p.split("=")[0].strip(" *") for p in params.split(",")
             if p.strip() not in ("/", "*")]
    body = ", ".join(f"{n!r}: {n}" for n in names)
    scope: dict[str, Any] = {"torch": torch}
    exec(f"class Owner:\n    def m(self, {params}):\n"  # noqa: S102
         f"        return {{{body}}}, torch.ones(2) * 2\n", scope)
    return scope["Owner"]()


METHOD_SHAPES = ["", "x", "x, 1", "x, 1, 2, 3", "a=x", "x, b=1", "x, k=2", "x, zz=7",
                 "x, a=1", "*t", "x, **d", "x, *t, k=1, **d", "**{'a': x, 'b': 1}"]


@pytest.mark.parametrize("params", SIGNATURES)
def test_inlined_method_binding_matches_eager(params: str) -> None:
    """The same for a bound method (``self`` bound first): values or CPython's error."""
    owner = _make_method_owner(params)
    for shape in METHOD_SHAPES:
        scope: dict[str, Any] = {"o": owner}
        exec(f"def caller(x, t, d):\n    return o.m({shape})\n", scope)  # noqa: S102
        caller = scope["caller"]
        compiled = strict(caller)
        for i in range(2):
            x = torch.full((2,), float(i))
            expected = _outcome(caller, x, _SPLAT_T, dict(_SPLAT_D))
            got = _outcome(compiled, x, _SPLAT_T, dict(_SPLAT_D))
            if isinstance(expected, TypeError):
                assert type(got) is TypeError and str(got) == str(expected), (params, shape)
            else:
                assert_same(got, expected)


def test_keyword_only_defaults_with_varargs() -> None:
    """The case of the issue: ``*args``, keyword-only defaults and ``**kwargs`` called
    with keywords (the old binder put ``args`` into ``k``)."""

    def inner(a, *args, k=4, **kwargs):
        return a * k + sum(args) + kwargs["z"]

    def outer(x):
        return inner(x, 1, 2, k=3, z=5)

    x = torch.arange(3.0)
    assert_same(strict(outer)(x), outer(x))


def test_entry_binding_errors_are_pythons() -> None:
    """A compiled function called with arguments that do not bind raises CPython's own
    TypeError (not inspect's wording)."""

    def f(a, b, *, k):
        return a + b + k

    compiled = strict(f)
    for args, kwargs in [((1,), {"k": 1}), ((1, 2, 3), {"k": 1}), ((1, 2), {}),
                         ((1, 2), {"k": 1, "z": 2}), ((1, 2), {"a": 1, "k": 1})]:
        with pytest.raises(TypeError) as eager:
            f(*args, **kwargs)
        with pytest.raises(TypeError) as got:
            compiled(*args, **kwargs)
        assert str(got.value) == str(eager.value)


def test_defaults_are_read_at_every_call() -> None:
    """A default changed after the first call is seen (entry function and inlined
    callee): defaults are guarded, not frozen."""

    def inner(x, n=2):
        return x * n

    def outer(x, m=1):
        return inner(x) + m

    compiled = strict(outer)
    x = torch.ones(2)
    assert_same(compiled(x), outer(x))
    inner.__defaults__ = (5,)
    outer.__defaults__ = (10,)
    assert_same(compiled(x), outer(x))
    assert compiled(x)[0].item() == 15.0


def test_closure_defaults_of_fresh_functions() -> None:
    """Functions made by a factory share their code but not their defaults."""

    def make(n):
        def scale(x, n=n):
            return x * n
        return scale

    fns = {"f": make(2)}

    def outer(x):
        return fns["f"](x)

    compiled = strict(outer)
    x = torch.ones(2)
    assert_same(compiled(x), outer(x))
    fns["f"] = make(7)
    assert_same(compiled(x), outer(x))


def test_defaults_of_a_submodule_forward_and_of_a_method_are_guarded() -> None:
    """Before: the defaults of a submodule's ``forward`` and of a method called on
    ``self`` were read once and never guarded (a config value as a default went stale,
    also across processes through the capture cache)."""

    class Scale(torch.nn.Module):
        def forward(self, x, s=2.0):
            return x * s

    class Top(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = Scale()

        def helper(self, x, b=1.0):
            return x + b

        def forward(self, x):
            return self.helper(self.scale(x))

    model = Top()
    compiled = strict(model)
    x = torch.ones(3)
    assert_same(compiled(x), model(x))
    Scale.forward.__defaults__ = (5.0,)
    assert_same(compiled(x), model(x))
    Top.helper.__defaults__ = (10.0,)
    assert_same(compiled(x), model(x))
    assert compiled(x)[0].item() == 15.0
