"""The one guard model: every kind in the table is checked, described and explained,
and both capture modes emit guards of the table's kinds (and only those)."""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.frontend.bytecode.sources import LocalSource
from ember.frontend.guard_model import GUARD_KINDS, Guard, alias_pattern, tensor_guard
from ember.frontend.guards import GuardSet, compile_matcher
from ember.frontend.size_guards import RelationSource, SizeSource, SymbolicTensor
from ember.frontend.trace import trace_capture
from ember.frontend.trace_guards import ArgumentSource, SpecSource, TraceCall
from ember.runtime.config import patch
from strict_helpers import strict


class Iter:
    def __init__(self, items: list[Any], position: int) -> None:
        self.item_list, self.position = items, position


X, Y, IT = LocalSource("x"), LocalSource("y"), LocalSource("it")
OBJ = object()
SPEC = ("spec", 1)
HOOKED = torch.nn.ReLU()
HOOKED.register_forward_hook(lambda *_: None)
X0, Y0 = SizeSource(X, 0), SizeSource(Y, 0)
SYMBOLIC = SymbolicTensor(torch.float32, ("s0", 3), (3, 1), torch.device("cpu"), False, 0,
                          (("s0", X0),))

# kind -> (a guard, a state it passes on, a state it fails on)
SAMPLES: dict[str, tuple[Guard, Any, Any]] = {
    "tensor": (tensor_guard(X, torch.zeros(2)), {"x": torch.ones(2)}, {"x": torch.ones(3)}),
    "equals": (Guard("equals", X, 3), {"x": 3}, {"x": 3.0}),
    "id": (Guard("id", X, OBJ), {"x": OBJ}, {"x": object()}),
    "type": (Guard("type", X, int), {"x": 1}, {"x": "1"}),
    "len": (Guard("len", X, 2), {"x": [1, 2]}, {"x": [1]}),
    "keys": (Guard("keys", X, ("a", "b")), {"x": {"a": 1, "b": 2}}, {"x": {"b": 2, "a": 1}}),
    "distinct": (Guard("distinct", None, (X, Y)), {"x": OBJ, "y": object()},
                 {"x": OBJ, "y": OBJ}),
    "same": (Guard("same", X, Y), {"x": OBJ, "y": OBJ}, {"x": OBJ, "y": object()}),
    "aliasing": (Guard("aliasing", None, ((X, Y), ((0, 0), (1, 1)))),
                 {"x": torch.ones(2), "y": torch.ones(2)}, {"x": OBJ, "y": OBJ}),
    "global": (Guard("global", None, ("torch.get_default_dtype()", torch.float32)),
               {}, None),
    "grad_mode": (Guard("grad_mode", None, True), {}, None),
    "remaining": (Guard("remaining", IT, (2, True)), {"it": Iter([1, 2, 3], 1)},
                  {"it": Iter([1, 2, 3, 4], 1)}),
    "structure": (Guard("structure", X, SPEC), {"x": SPEC}, {"x": ("spec", 2)}),
    "no_hooks": (Guard("no_hooks", X, None), {"x": torch.nn.ReLU()}, {"x": HOOKED}),
    "symbolic_tensor": (Guard("symbolic_tensor", X, SYMBOLIC), {"x": torch.ones(5, 3)},
                        {"x": torch.ones(5, 4)}),
    "size_range": (Guard("size_range", X0, ("s0", 2, 64)), {"x": torch.ones(64)},
                   {"x": torch.ones(65)}),
    "size_relation": (Guard("size_relation", RelationSource((("_size", Y0), ("s0", X0))),
                            "_size == 2*s0"), {"x": torch.ones(3), "y": torch.ones(6)},
                      {"x": torch.ones(3), "y": torch.ones(5)}),
}


# kind -> how its sample's failure is explained (a regular expression)
EXPLAINED: dict[str, str] = {
    "tensor": re.escape("x.shape == (2,) (got (3,))"),
    "equals": re.escape("x == 3 (got 3.0)"),
    "id": r"x is <object at 0x[0-9a-f]+> \(got <object at 0x[0-9a-f]+>\)",
    "type": re.escape("type(x) is int (got str)"),
    "len": re.escape("len(x) == 2 (got 1)"),
    "keys": re.escape("list(x.keys()) == ['a', 'b']"),
    "distinct": re.escape("x, y are distinct tensors"),
    "same": re.escape("x is y"),
    "aliasing": re.escape("no two tensor arguments share memory"),
    "global": re.escape("torch.get_default_dtype() == torch.float32 (got torch.float64)"),
    "grad_mode": re.escape("torch.is_grad_enabled() == True (got False)"),
    "remaining": re.escape("len(it.item_list) - it.position <= 2 (got 3 left)"),
    "structure": re.escape("the arguments' structure is unchanged (got ('spec', 2))"),
    "no_hooks": re.escape("x has no module hooks (_forward_pre_hooks, _forward_hooks, "
                          "_backward_hooks, _backward_pre_hooks, _forward_hooks_always_called "
                          "empty) (got hooks in _forward_hooks)"),
    "symbolic_tensor": re.escape("x.size(1) == 3 (got 4)"),
    "size_range": re.escape("x.size(0) in [2, 64] (symbol s0) (got 65)"),
    "size_relation": re.escape("y.size(0) == 2 * x.size(0) (got y.size(0) = 5, "
                               "x.size(0) = 3)"),
}


def state(values: dict[str, Any]) -> SimpleNamespace:
    return SimpleNamespace(locals=values)


def test_every_kind_has_a_sample() -> None:
    assert set(SAMPLES) == set(EXPLAINED) == set(GUARD_KINDS)


@pytest.mark.parametrize("kind", sorted(GUARD_KINDS))
def test_every_kind_is_checked_described_and_explained(kind: str) -> None:
    guard, passing, failing = SAMPLES[kind]
    row = GUARD_KINDS[kind]
    assert callable(row.check) and callable(row.describe) and callable(row.explain)
    match = compile_matcher([guard])
    assert match(state(passing), None) == []
    text = guard.describe()
    assert text and "\n" not in text
    guards = GuardSet()
    guards.add(guard)
    if failing is None:  # global state: fails under the other value
        with torch.set_grad_enabled(False):
            torch.set_default_dtype(torch.float64)
            try:
                failure = guards.first_failure(state({}), None)
            finally:
                torch.set_default_dtype(torch.float32)
    else:
        assert match(state(failing), None) is None
        failure = guards.first_failure(state(failing), None)
    assert failure is not None and failure.guard is guards.guards[0]
    assert re.fullmatch(EXPLAINED[kind], str(failure)), str(failure)
    assert failure.located().endswith("; guard from " + guard.origin_text())


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown guard kind 'shape'"):
        Guard("shape", X, (2, 3))


def test_global_state_explanations_show_the_value_seen() -> None:
    # NOTE: the one model explains grad-mode, global and identity failures with the value
    # seen, in both capture modes (the strict capture showed only the guard before)
    guards = GuardSet()
    guards.add(Guard("grad_mode", None, True))
    with torch.no_grad():
        failure = guards.first_failure(state({}), None)
    assert str(failure) == "torch.is_grad_enabled() == True (got False)"
    assert str(GuardSet(guards=[SAMPLES["id"][0]]).first_failure(
        state({"x": 1}), None)).endswith(f"(got <int at 0x{id(1):x}>)")


def test_trace_and_strict_guards_are_one_model() -> None:
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x: torch.Tensor, y: torch.Tensor, n: int) -> torch.Tensor:
            out: torch.Tensor = self.lin(x) * n + y
            return out

    net = Net()
    args = (torch.randn(2, 3), torch.randn(2, 3), 2)
    traced = trace_capture(net, net, args, {}).guards
    trace_kinds = {g.kind for g in traced.guards}
    assert trace_kinds == {"structure", "grad_mode", "global", "tensor", "equals",
                           "aliasing"}
    compiled = strict(net)
    compiled(*args)
    (segment,) = compiled._compiled.segments[0]
    strict_kinds = {g.kind for g in segment.guards.guards}
    assert {"tensor", "equals", "type", "grad_mode", "global", "distinct"} <= strict_kinds
    assert (trace_kinds | strict_kinds) <= set(GUARD_KINDS)
    assert type(traced) is type(segment.guards) is GuardSet
    assert all(type(g) is Guard for g in [*traced.guards, *segment.guards.guards])


def test_trace_guards_read_the_call() -> None:
    guards = GuardSet()
    guards.add(Guard("structure", SpecSource(), SPEC))
    guards.add(Guard("aliasing", None, ((ArgumentSource(0, "a"), ArgumentSource(1, "b")),
                                        alias_pattern([torch.ones(1), torch.ones(1)]))))
    t = torch.ones(2)
    match = guards.matcher([ArgumentSource(1, "b")])
    assert match(TraceCall([t, torch.ones(2)], [], SPEC), None) is not None
    assert match(TraceCall([t, t], [], SPEC), None) is None
    failure = guards.first_failure(TraceCall([t, t], [], ("other",)), None)
    assert str(failure) == "the arguments' structure is unchanged (got ('other',))"


def test_both_modes_log_the_grad_mode_failure(capsys: Any) -> None:
    # NOTE: the trace capture showed ``torch.is_grad_enabled() is True (got False)``;
    # the one model's grad_mode row says ``==``, as the strict capture's did
    for capture in ("trace", "strict"):
        f = ef.compile(lambda x: x + 1, backend="eager", options={"capture": capture})
        with patch(logs=frozenset({"recompiles"})):
            f(torch.ones(2))
            with torch.no_grad():
                f(torch.ones(2))
        assert f.stats.compiles == 2
        err = capsys.readouterr().err
        assert "guard failed: torch.is_grad_enabled() == True (got False); guard from " \
            in err, (capture, err)


def test_a_module_without_hooks_gets_one_hook_guard(
        capsys: pytest.CaptureFixture[str]) -> None:
    # NOTE: five length guards per module were most of a decoder stack's guard time;
    # a module with hooks keeps a length guard per non-empty table
    inner = torch.nn.Linear(2, 2)
    model = torch.nn.Sequential(inner, torch.nn.ReLU())
    compiled = ef.compile(model, backend="eager")
    x = torch.randn(3, 2)
    with patch(logs=frozenset({"guards"})):
        compiled(x)
    err = capsys.readouterr().err
    assert err.count("has no module hooks") == 2, err  # the two layers (called inside)
    assert "hooks) ==" not in err
    seen: list[str] = []
    inner.register_forward_hook(lambda m, a, out: seen.append("hook") or out * 2)
    with patch(logs=frozenset({"guards"})):
        torch.testing.assert_close(compiled(x), model(x))
    assert seen == ["hook", "hook"], "the hook added after compiling runs (a recompile)"
    assert compiled.stats.compiles == 2
    err = capsys.readouterr().err
    assert "len(self[0]._forward_hooks) == 1" in err, err
    assert err.count("has no module hooks") == 1, err


def test_a_keys_guard_over_tensor_keys_shows_them_by_type_and_shape() -> None:
    # an optimizer's state is keyed by parameters: their repr would print every element
    w, b = torch.nn.Parameter(torch.ones(300, 4)), torch.nn.Parameter(torch.ones(300))
    guard = Guard("keys", LocalSource("state"), [w, b, "step"])
    assert guard.describe() == ("list(state.keys()) == [<a Parameter of shape (300, 4)>, "
                                "<a Parameter of shape (300,)>, 'step']")
