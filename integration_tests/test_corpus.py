"""The capture corpus end to end: capture each case, round-trip it through the file
format and the text form, verify it, run it in the reference interpreter and through
``ember.frontend.compile(backend="eager")``, and compare with eager EXACTLY (same ops in
the same order give the same bits), inputs and module state included."""

from __future__ import annotations

import copy
import io
import warnings
from typing import Any

import ember.frontend as ef
import pytest
import torch
from corpus import CASES, CorpusCase
from corpus.compare import clone_tree
from ember.frontend.pytree import flatten
from ember.runtime.config import patch
from ember.runtime.interpreter import run_program
from ember.runtime.ir import InputKind, Program, load, parse_program, print_program, save, verify


def _copy_fn(fn: Any) -> Any:
    return copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn


def assert_same(actual: Any, expected: Any, what: str) -> None:
    a_leaves, a_spec = flatten(actual)
    e_leaves, e_spec = flatten(expected)
    assert a_spec == e_spec, f"{what}: structure {a_spec} != {e_spec}"
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
        if isinstance(e, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"{what}[{i}] is not a tensor"
            assert a.dtype == e.dtype and a.shape == e.shape, f"{what}[{i}] meta differs"
            assert torch.equal(a, e), f"{what}[{i}] differs: max err {(a - e).abs().max()}"
        else:
            assert a == e, f"{what}[{i}]: {a!r} != {e!r}"


def _state(fn: Any) -> dict[str, torch.Tensor]:
    return dict(fn.state_dict()) if isinstance(fn, torch.nn.Module) else {}


def _run_eager(c: CorpusCase, fn: Any, args: tuple, kwargs: dict) -> Any:  # type: ignore[type-arg]
    if c.random:
        torch.manual_seed(1234)
    return fn(*args, **kwargs)


def _flat_inputs(program: Program, fn: Any, args: tuple, kwargs: dict) -> list[Any]:  # type: ignore[type-arg]
    """Every placeholder's value: the module's live state by qualified name, then the
    tensor leaves of the arguments."""
    state: dict[str, torch.Tensor] = {}
    if isinstance(fn, torch.nn.Module):
        state.update(fn.named_parameters())
        state.update(fn.named_buffers())
    tensors = iter(x for x in flatten((args, kwargs))[0] if isinstance(x, torch.Tensor))
    result = []
    for spec in program.signature.inputs["forward"]:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            assert spec.target is not None
            result.append(state[spec.target])
        else:
            result.append(next(tensors))
    assert next(tensors, None) is None, "more tensor arguments than user inputs"
    return result


@pytest.fixture(scope="module")
def captured() -> dict[str, tuple[CorpusCase, Any, Any, Program]]:
    """Each case captured once: (case, built fn, its inputs, program)."""
    torch.manual_seed(0)
    result = {}
    for c in CASES:
        fn = c.build()
        args, kwargs = c.inputs()
        result[c.name] = (c, fn, (args, kwargs), ef.capture(fn, *clone_tree(args), **clone_tree(kwargs)))
    return result


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_capture_round_trips_and_verifies(name: str, captured: Any) -> None:
    _, _, _, program = captured[name]
    assert program.dialect == "aten" and program.forward.calls()
    verify(program, "aten")
    buffer = io.BytesIO()
    save(program, buffer)
    buffer.seek(0)
    assert load(buffer) == program
    assert parse_program(print_program(program), tensors=program.tensors) == program


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_interpreter_matches_eager_exactly(name: str, captured: Any) -> None:
    c, fn, (args, kwargs), program = captured[name]
    fn_e, fn_i = _copy_fn(fn), _copy_fn(fn)
    args_e, kwargs_e = clone_tree(args), clone_tree(kwargs)
    args_i, kwargs_i = clone_tree(args), clone_tree(kwargs)
    expected = _run_eager(c, fn_e, args_e, kwargs_e)
    if c.random:
        torch.manual_seed(1234)
    flat = run_program(program, _flat_inputs(program, fn_i, args_i, kwargs_i))
    expected_tensors = [x for x in flatten(expected)[0] if isinstance(x, torch.Tensor)]
    assert_same(flat, expected_tensors, "outputs")
    assert_same((args_i, kwargs_i), (args_e, kwargs_e), "inputs after the call")
    assert_same(_state(fn_i), _state(fn_e), "module state after the call")


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_compile_eager_backend_matches_eager(name: str, captured: Any) -> None:
    c, fn, (args, kwargs), _ = captured[name]
    fn_e, fn_c = _copy_fn(fn), _copy_fn(fn)
    compiled = ef.compile(fn_c, backend="eager")
    for _ in range(2):  # the second call is a cache hit
        args_e, kwargs_e = clone_tree(args), clone_tree(kwargs)
        args_c, kwargs_c = clone_tree(args), clone_tree(kwargs)
        expected = _run_eager(c, fn_e, args_e, kwargs_e)
        actual = _run_eager(c, compiled, args_c, kwargs_c)
        assert_same(actual, expected, "outputs")
        assert_same((args_c, kwargs_c), (args_e, kwargs_e), "inputs after the call")
        assert_same(_state(fn_c), _state(fn_e), "module state after the call")
    assert (compiled.stats.compiles, compiled.stats.cache_hits) == (1, 1)


def _case(name: str) -> CorpusCase:
    return next(c for c in CASES if c.name == name)


def test_recompiles_on_new_shape_only() -> None:
    model = _case("mlp_relu").build()
    compiled = ef.compile(model, backend="eager")
    for _ in range(3):
        compiled(torch.randn(4, 16))
    assert (compiled.stats.compiles, compiled.stats.recompiles) == (1, 0)
    assert compiled.stats.cache_hits == 2
    x = torch.randn(9, 16)
    assert torch.equal(compiled(x), model(x))
    assert (compiled.stats.compiles, compiled.stats.recompiles) == (2, 1)
    compiled(torch.randn(4, 16))  # the first variant is still cached
    assert compiled.stats.compiles == 2 and compiled.stats.cache_hits == 3


def test_recompile_limit_falls_back_to_eager_with_one_warning() -> None:
    fn = _case("views_expand_unsqueeze").build()
    compiled = ef.compile(fn, backend="eager", dynamic=False)  # each size a recompile
    with patch(recompile_limit=3), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, 7):
            x, y = torch.randn(n, 5), torch.randn(3, 5)
            assert torch.equal(compiled(x, y), fn(x, y))
    limit_warnings = [w for w in caught if issubclass(w.category, ef.RecompileLimitWarning)]
    assert len(limit_warnings) == 1
    assert "x.shape == (3, 5)" in str(limit_warnings[0].message)
    assert compiled.stats.compiles == 3 and compiled.stats.eager_fallback_calls == 3
