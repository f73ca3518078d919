"""Recompiles that do not count loop iterations, and recompile-limit fallbacks that are
never silent (strict and trace capture)."""

from __future__ import annotations

import re
import warnings
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.compiled import RecompileLimitWarning
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn


@ef.disable
def _opaque(x: torch.Tensor) -> torch.Tensor:  # a graph break wherever it is called
    return x


class PrintingLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.scale = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.lin(x)
        print(end="")  # graph break inside every layer
        return torch.tanh(x) * self.scale


class DisabledCallLayer(PrintingLayer):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _opaque(self.lin(x))  # graph break inside an inlined helper of every layer
        return torch.tanh(x) * self.scale


class Stack(nn.Module):
    def __init__(self, layer: type[nn.Module], n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layer() for _ in range(n))
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class SlicedStack(Stack):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[: self.n]:  # the Llama decoder loop
            x = layer(x)
        return x


class EnumeratedStack(Stack):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):  # the index is never read: not guarded
            x = layer(x)
        return x


def _run(model: nn.Module, calls: int = 3) -> list[tuple[int, int]]:
    """Compile ``model``, call it ``calls`` times (compared with eager); the
    (compiles, eager_fallback_calls) after each call."""
    compiled = strict(model)
    x = torch.randn(2, 8)
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitWarning)
        for _ in range(calls):
            torch.testing.assert_close(compiled(x), model(x))
            seen.append((compiled.stats.compiles, compiled.stats.eager_fallback_calls))
    return seen


@pytest.mark.parametrize("stack", [Stack, SlicedStack, EnumeratedStack])
@pytest.mark.parametrize("layer", [PrintingLayer, DisabledCallLayer])
def test_compiles_do_not_grow_with_the_number_of_layers(stack: Any, layer: Any,
                                                        capsys: Any) -> None:
    torch.manual_seed(0)
    shallow = _run(stack(layer, 4))
    deep = _run(stack(layer, 32))
    # the layers share one compiled forward, the loop resumes into one entry whatever
    # the layer, and calls 2 and 3 only hit the cache
    assert shallow == deep
    assert shallow[0] == shallow[1] == shallow[2]
    compiles, fallbacks = deep[-1]
    assert fallbacks == 0 and compiles <= 8


def test_an_enumerate_index_that_is_read_is_still_guarded() -> None:
    class Indexed(Stack):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for i, layer in enumerate(self.layers):
                x = layer(x) * (i + 1)
            return x

    model = Indexed(PrintingLayer, 4)
    compiled = strict(model)
    x = torch.randn(2, 8)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompile_limit_fallbacks == 0


def test_a_layer_per_call_is_a_cache_hit_not_a_constant() -> None:
    # the layers' parameters are graph inputs read through each layer: changing one
    # layer's weights after compiling changes the result, without recompiling
    model = Stack(PrintingLayer, 6)
    compiled = strict(model)
    x = torch.randn(2, 8)
    compiled(x)
    compiles = compiled.stats.compiles
    with torch.no_grad():
        model.layers[4].lin.weight.mul_(-1)
    torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.compiles == compiles


def test_what_differs_between_layers_is_still_guarded() -> None:
    model = Stack(PrintingLayer, 6)
    for i, layer in enumerate(model.layers):
        layer.scale = 0.5 if i % 2 else 2.0  # two values: two variants, not six
    compiled = strict(model)
    x = torch.randn(2, 8)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.recompile_limit_fallbacks == 0
    shared = Stack(PrintingLayer, 6)
    compiled_shared = strict(shared)
    compiled_shared(x)
    assert compiled.stats.compiles > compiled_shared.stats.compiles


def test_a_backward_hook_on_one_layer_is_not_skipped() -> None:
    model = Stack(PrintingLayer, 4)
    compiled = strict(model)
    x = torch.randn(2, 8)
    compiled(x).sum().backward()  # compiled without hooks
    seen: list[int] = []
    model.layers[2].lin.register_full_backward_hook(lambda *a: seen.append(2))
    compiled(x).sum().backward()
    assert seen == [2]


def test_a_longer_module_list_is_a_guard_miss_not_a_stale_loop() -> None:
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    model = Plain()
    compiled = strict(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(compiled(x), model(x))
    model.layers.append(nn.Linear(4, 4))
    torch.testing.assert_close(compiled(x), model(x))
    assert compiled.stats.compiles == 2


def test_a_sliced_module_list_reads_the_current_members() -> None:
    model = SlicedStack(DisabledCallLayer, 4)
    compiled = strict(model)
    x = torch.randn(2, 8)
    torch.testing.assert_close(compiled(x), model(x))
    model.layers[1] = DisabledCallLayer()  # same type, other weights: read, not baked in
    torch.testing.assert_close(compiled(x), model(x))
    model.n = 2
    torch.testing.assert_close(compiled(x), model(x))


def test_identity_of_a_module_is_guarded_when_the_code_compares_it() -> None:
    class Last(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
                print(end="")
                if layer is self.layers[-1]:
                    x = x * 10
            return x

    model = Last()
    compiled = strict(model)
    x = torch.randn(2, 4)
    for _ in range(2):
        torch.testing.assert_close(compiled(x), model(x))


def test_code_run_for_real_on_a_module_pins_it() -> None:
    class Named(nn.Module):
        def __init__(self, tag: str) -> None:
            super().__init__()
            self.tag = tag

        def extra_repr(self) -> str:
            return self.tag

    class Uses(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Named("a"), Named("bb")

        def forward(self, x: torch.Tensor, which: int) -> torch.Tensor:
            mod = self.a if which == 0 else self.b
            return x * len(repr(mod))  # repr runs for real: its result is a constant

    model = Uses()
    compiled = strict(model)
    x = torch.randn(3)
    for which in (0, 1, 0, 1):
        torch.testing.assert_close(compiled(x, which), model(x, which))


def test_a_bound_method_handed_to_library_code_pins_its_module() -> None:
    import inspect

    class Sig(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # run for real (inspect.signature has a rule of its own: test_signature_rule)
            n = len(inspect.getfullargspec(self.lin.forward).args)
            return self.lin(x) * n

    model = Sig()
    compiled = strict(model)
    x = torch.randn(2, 3)
    torch.testing.assert_close(compiled(x), model(x))
    guards = compiled._compiled.guard_text()
    assert "type(self.lin) is Linear" in guards and "self.lin is <Linear at 0x" in guards


# ---- recompile-limit fallbacks ------------------------------------------------------


def _line_of(fn: Any, text: str) -> int:
    import inspect

    lines, first = inspect.getsourcelines(fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


def scaled(x: torch.Tensor, n: int) -> torch.Tensor:
    return x * 2 + n


FACTOR = 1.0


def reads_a_global(x: torch.Tensor) -> torch.Tensor:
    y = x.sin()
    y = y * FACTOR  # the guard on FACTOR is installed here
    return y


def test_strict_limit_warns_once_counts_and_logs_guard_and_line(capsys: Any) -> None:
    global FACTOR
    compiled = strict(reads_a_global)
    x = torch.randn(3)
    with patch(recompile_limit=2, logs=frozenset({"recompiles"})), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for factor in range(5):
            FACTOR = float(factor)
            torch.testing.assert_close(compiled(x), reads_a_global(x))
    limit = [w for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(limit) == 1
    assert (compiled.stats.compiles, compiled.stats.recompile_limit_fallbacks,
            compiled.stats.eager_fallback_calls) == (2, 3, 3)
    line = _line_of(reads_a_global, "y = y * FACTOR")
    where = f"{__file__}:{line} in reads_a_global: y = y * FACTOR"
    message = str(limit[0].message)
    assert "G['FACTOR'] == 1.0 (got 2.0)" in message and where in message
    err = capsys.readouterr().err
    assert f"guard failed: G['FACTOR'] == 0.0 (got 1.0); guard from {where}" in err
    # every fallback is logged, with the guard and the line
    found = re.findall(rf"G\['FACTOR'\] == 1.0 \(got [234].0\); guard from {re.escape(where)}",
                       err)
    assert len(found) == 3


def test_strict_fallback_past_the_warning_does_not_diagnose_guards(monkeypatch: Any) -> None:
    from ember.frontend.bytecode.guards import GuardSet

    diagnosed: list[int] = []
    original = GuardSet.failure_text

    def counting(self: GuardSet, state: Any, ctx: Any) -> str:
        diagnosed.append(1)
        return original(self, state, ctx)

    monkeypatch.setattr(GuardSet, "failure_text", counting)
    compiled = strict(scaled)
    x = torch.randn(3)
    with patch(recompile_limit=1), warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for n in range(6):
            torch.testing.assert_close(compiled(x, n), scaled(x, n))
    # once, for the warning; the other four fallbacks (logs off) only count
    assert len(diagnosed) == 1 and compiled.stats.recompile_limit_fallbacks == 5


def test_strict_guard_on_an_argument_names_the_def_line(capsys: Any) -> None:
    compiled = strict(scaled)
    x = torch.randn(3)
    with patch(logs=frozenset({"recompiles"})):
        compiled(x, 1)
        compiled(x, 2)
    where = f"{__file__}:{_line_of(scaled, 'def scaled')} in scaled: def scaled("
    assert f"n == 1 (got 2); guard from {where}" in capsys.readouterr().err


def test_strict_limit_warns_once_per_function_across_resume_points() -> None:
    def two_breaks(x: torch.Tensor, n: int) -> torch.Tensor:
        y = x + n
        print(end="")
        y = y * n
        print(end="")
        return y - n

    compiled = strict(two_breaks)
    x = torch.randn(3)
    with patch(recompile_limit=1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(3):
            torch.testing.assert_close(compiled(x, n), two_breaks(x, n))
    assert len([w for w in caught if issubclass(w.category, RecompileLimitWarning)]) == 1
    assert compiled.stats.recompile_limit_fallbacks == 2


def test_strict_guard_origin_names_the_user_line_not_torch_code() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)  # nn.Linear.forward reads the weight

    model = Block()
    compiled = strict(model)
    compiled(torch.randn(2, 4))
    (seg,) = compiled._compiled.segments[0]
    weight = next(g for g in seg.guards.guards if g.kind == "tensor"
                  and g.source is not None and g.source.expr() == "self.lin.weight")
    assert weight.origin is not None
    text = "return self.lin(x)  # nn.Linear.forward reads the weight"
    assert (weight.origin.file, weight.origin.text) == (__file__, text)


def test_trace_limit_warns_once_counts_and_logs_guard_and_def_line(capsys: Any) -> None:
    compiled = ef.compile(scaled, backend="eager", options={"capture": "trace"},
                          dynamic=False)  # each size a recompile
    with patch(recompile_limit=2, logs=frozenset({"recompiles"})), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 5):
            x = torch.randn(n)
            torch.testing.assert_close(compiled(x, 1), scaled(x, 1))
    limit = [w for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(limit) == 1
    assert (compiled.stats.recompile_limit_fallbacks, compiled.stats.eager_fallback_calls) \
        == (2, 2)
    where = f"{__file__}:{_line_of(scaled, 'def scaled')} in scaled: def scaled("
    assert "x.shape == (2,) (got (3,))" in str(limit[0].message)
    assert where in str(limit[0].message)
    err = capsys.readouterr().err
    assert "recompiling scaled (entry 2 of at most 2): guard failed: x.shape == (1,) " \
        f"(got (2,)); guard from {where}" in err
    assert f"x.shape == (2,) (got (4,)); guard from {where}" in err  # each fallback


def test_the_entry_that_matched_last_is_checked_first() -> None:
    """A decode loop: after a static entry and a dynamic one exist, each call that the
    dynamic entry serves checks only its guards, not the static entry's first."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * 2

    compiled = strict(f)
    compiled(torch.randn(3, 4))  # static entry
    compiled(torch.randn(5, 4))  # automatic dynamic: a second, symbolic entry
    strict_fn = getattr(compiled, "_compiled", compiled)
    entries = strict_fn.segments[0]
    assert len(entries) == 2
    checked: list[int] = []
    for i, seg in enumerate(entries):
        def counting(state: Any, ctx: Any, _i: int = i, _match: Any = seg.match) -> Any:
            checked.append(_i)
            return _match(state, ctx)
        seg.match = counting  # type: ignore[method-assign]
    for n in (6, 7, 8):
        x = torch.randn(n, 4)
        torch.testing.assert_close(compiled(x), f(x))
    # the first call after the capture tries the static entry, then the dynamic one;
    # the next calls go straight to the dynamic entry (before: 0, 1 every call)
    assert checked == [0, 1, 1, 1], checked
    assert compiled.stats.compiles == 2
    x = torch.randn(3, 4)  # both entries hold: either is a correct answer
    torch.testing.assert_close(compiled(x), f(x))
    assert compiled.stats.compiles == 2


def test_a_list_growing_every_call_recompiles_to_the_limit_then_says_why() -> None:
    """As torch.compile does: a list's length is guarded (the loop over it is unrolled),
    each new length compiles until the limit, then calls run eagerly; the warning names
    the length guard and what to do about it."""
    def f(x, xs):
        for t in xs:
            x = x + t
        return x

    compiled = strict(f)
    xs: list[torch.Tensor] = []
    with patch(recompile_limit=8), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(12):
            xs.append(torch.ones(2))
            torch.testing.assert_close(compiled(torch.ones(2), xs), f(torch.ones(2), xs))
    assert (compiled.stats.compiles, compiled.stats.recompile_limit_fallbacks) == (8, 4)
    limit = [str(w.message) for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(limit) == 1
    assert "len(xs) == 8 (got 9)" in limit[0]
    assert "each new length compiles a new variant" in limit[0]
