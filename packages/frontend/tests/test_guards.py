"""Guards of the tracing mode: what recompiles, what hits the cache, the check function."""

from __future__ import annotations

import math

import ember.frontend as ef
import pytest
import torch
from ember.frontend import capture_modes
from ember.frontend.guards import GuardSet
from ember.frontend.pytree import flatten
from ember.frontend.trace_guards import ArgumentSource, TraceCall, add_tensor, add_value


@pytest.fixture(autouse=True)
def _tracing_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests cover the tracing capture mode's guards and cache; the strict mode's
    have their own (test_strict_guards.py)."""
    monkeypatch.setattr(capture_modes, "DEFAULT_CAPTURE_MODE", "trace")



def double(x: torch.Tensor, n: int = 2) -> torch.Tensor:
    return x * n


def compiled_double():  # type: ignore[no-untyped-def]
    return ef.compile(double, backend="eager")


def test_same_metadata_hits_the_cache() -> None:
    f = compiled_double()
    for _ in range(3):
        x = torch.randn(3, 4)
        assert torch.equal(f(x), x * 2)
    assert (f.stats.compiles, f.stats.recompiles, f.stats.cache_hits) == (1, 0, 2)
    assert f.stats.graphs == 1 and f.stats.graph_breaks == 0


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda: torch.randn(3, 4, dtype=torch.float64), id="dtype"),
        pytest.param(lambda: torch.randn(5, 4), id="shape"),
        pytest.param(lambda: torch.randn(4, 3).t(), id="strides"),
        pytest.param(lambda: torch.randn(3, 4, requires_grad=True), id="requires_grad"),
    ],
)
def test_tensor_metadata_change_recompiles(variant) -> None:  # type: ignore[no-untyped-def]
    f = compiled_double()
    f(torch.randn(3, 4))
    x = variant()
    assert torch.equal(f(x), x * 2)
    assert (f.stats.compiles, f.stats.recompiles) == (2, 1)
    f(x.detach().clone().requires_grad_(x.requires_grad) if x.is_contiguous() else x)
    assert f.stats.compiles == 2


def test_non_tensor_argument_is_guarded_by_value() -> None:
    f = compiled_double()
    x = torch.randn(3)
    assert torch.equal(f(x, 3), x * 3)
    assert torch.equal(f(x, 3), x * 3)
    assert torch.equal(f(x, 4), x * 4)
    assert (f.stats.compiles, f.stats.cache_hits) == (2, 1)
    assert torch.equal(f(x, n=4), x * 4)  # a keyword is another argument structure
    assert f.stats.compiles == 3


def test_bool_and_int_are_different_values() -> None:
    f = compiled_double()
    x = torch.randn(3)
    f(x, 1)
    assert torch.equal(f(x, True), x * True)
    assert f.stats.compiles == 2


def test_grad_mode_is_guarded() -> None:
    f = compiled_double()
    x = torch.randn(3)
    f(x)
    with torch.no_grad():
        f(x)
    f(x)
    assert (f.stats.compiles, f.stats.cache_hits) == (2, 1)


def test_submodule_training_flag_is_guarded() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).eval()
    compiled = ef.compile(model, backend="eager")
    x = torch.randn(2, 4)
    assert torch.equal(compiled(x), model(x))
    model[1].train()  # only a submodule changes
    torch.manual_seed(0)
    out = compiled(x)
    torch.manual_seed(0)
    assert torch.equal(out, model(x))
    assert compiled.stats.compiles == 2


def call(*leaves: object) -> TraceCall:
    return TraceCall(list(leaves), [], None)


def test_guard_set_is_one_function_and_names_the_failure() -> None:
    # NOTE: one model with the strict capture: a tensor's metadata is one ``tensor``
    # guard (it was seven), and the check function is the shared matcher
    guards = GuardSet()
    add_tensor(guards, ArgumentSource(0, "x"), torch.randn(2, 3))
    add_value(guards, ArgumentSource(1, "n"), 5)
    assert [g.kind for g in guards.guards] == ["tensor", "equals"]
    match = guards.matcher()
    assert match.__ember_source__.count("def ") == 1  # type: ignore[attr-defined]
    assert match(call(torch.randn(2, 3), 5), None) == []
    assert match(call(torch.randn(2, 3), 6), None) is None
    failure = guards.first_failure(call(torch.randn(2, 4), 5), None)
    assert failure is not None and str(failure) == "x.shape == (2, 3) (got (2, 4))"
    failure = guards.first_failure(call(torch.randn(2, 3), 6), None)
    assert str(failure) == "n == 5 (got 6)"
    assert guards.first_failure(call(torch.randn(2, 3), 5), None) is None


def test_guard_count_of_a_capture() -> None:
    from ember.frontend.trace import trace_capture

    cap = trace_capture(double, None, (torch.randn(2), 3), {})
    kinds = [g.kind for g in cap.guards.guards]
    # structure, grad mode, inference mode, default dtype, autocast cpu/cuda, one per
    # tensor, one per non-tensor argument (no aliasing guard: a single tensor)
    assert kinds == ["structure", "grad_mode", "global", "global", "global", "global",
                     "tensor", "equals"]
    texts = [g.describe() for g in cap.guards.guards]
    assert texts[2] == "torch.is_inference_mode_enabled() == False"
    assert texts[6].startswith("x.dtype == torch.float32 and x.shape == (2,)")
    assert texts[7] == "n == 3 (int)"


def test_passing_one_tensor_twice_is_another_graph() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        return a + b

    compiled = ef.compile(f, backend="eager")
    x, y = torch.randn(3), torch.randn(3)
    expected = f(x.clone(), y.clone())
    assert torch.equal(compiled(x.clone(), y.clone()), expected)
    z = torch.randn(3)
    z_ref = z.clone()
    assert torch.equal(compiled(z, z), f(z_ref, z_ref))
    assert compiled.stats.compiles == 2
    leaves, spec = flatten(((z, z), {}))
    failure = compiled._entries[0].guards.first_failure(TraceCall(leaves, [], spec), None)
    assert failure is not None
    assert failure.guard.describe() == "no two tensor arguments share memory"


def test_views_sharing_storage_and_offsets_are_guarded() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.mul_(2)
        return b + 1

    compiled = ef.compile(f, backend="eager")
    base = torch.randn(8)
    ref = base.clone()
    assert torch.equal(compiled(base[:4], base[4:]), f(ref[:4], ref[4:]))
    # b now views the memory that a mutates: another graph
    assert torch.equal(compiled(base[:4], base[:4].view(2, 2).view(4)),
                       f(ref[:4], ref[:4].view(2, 2).view(4)))
    assert torch.equal(base, ref)
    assert compiled.stats.compiles == 2
    x = torch.randn(6)
    compiled(x[2:6], torch.randn(4))  # a storage offset of 2 instead of 0
    assert compiled.stats.compiles == 3
    leaves, spec = flatten(((x[2:6], torch.randn(4)), {}))
    failure = compiled._entries[0].guards.first_failure(TraceCall(leaves, [], spec), None)
    assert str(failure) == "a.storage_offset() == 0 (got 2)"


def test_autocast_and_default_dtype_are_guarded() -> None:
    f = ef.compile(lambda a, b: a @ b, backend="eager")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    assert f(a, b).dtype == torch.float32
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = f(a, b)
        assert out.dtype == torch.bfloat16 and torch.equal(out, a @ b)
    assert f.stats.compiles == 2
    f(a, b)
    assert f.stats.compiles == 2 and f.stats.cache_hits == 1


def test_nan_argument_hits_the_cache() -> None:
    def scale_unless_nan(x: torch.Tensor, s: float) -> torch.Tensor:
        return x if math.isnan(s) else x * s  # NOTE: keeps nan out of the graph's arguments

    f = ef.compile(scale_unless_nan, backend="eager")
    x = torch.randn(2)
    assert torch.equal(f(x, float("nan")), x)
    f(x, float("nan"))
    assert (f.stats.compiles, f.stats.cache_hits) == (1, 1)
    f(x, 2.0)
    assert f.stats.compiles == 2
