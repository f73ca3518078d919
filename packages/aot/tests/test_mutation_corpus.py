"""The mutation and aliasing corpus: each function runs eagerly and through the aot
stage (captured with the runtime's recorder, run by ProgramCallable on the reference
interpreter); outputs, inputs after the call, and output/input aliasing must match."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from aot_capture import compile_fn
from ember.runtime.ir import IRFormatError, OutputKind, resolve_op
from ember.runtime.stages import StageDeclined
from ember_testing.mutation_corpus import CORPUS, check_against_eager, two_mutated_inputs


def _f32(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _non_overlapping_views(a, b):
    a.add_(1)
    return a + b


@pytest.mark.parametrize("name,fn,make_inputs", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_matches_eager(name: str, fn: Callable[..., Any],
                              make_inputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    inputs = make_inputs()
    program, run = compile_fn(fn, *[t.clone() for t in inputs])  # verifies core-functional
    assert not any(resolve_op(n.target)._schema.is_mutable for n in program.forward.calls())
    check_against_eager(fn, lambda *args: run(list(args)), inputs)
    # a second call on fresh inputs reuses the compiled program
    check_against_eager(fn, lambda *args: run(list(args)), make_inputs())


def test_mutated_input_moves_to_signature() -> None:
    program, _ = compile_fn(two_mutated_inputs, _f32(3, 4), _f32(3, 4))
    specs = program.signature.outputs["forward"]
    assert [(s.kind, s.target) for s in specs] == [
        (OutputKind.USER_OUTPUT, None),
        (OutputKind.MUTATED_INPUT, "in0"),
        (OutputKind.MUTATED_INPUT, "in1"),
    ]


def test_same_tensor_passed_twice() -> None:
    x = _f32(3, 4)
    _, run = compile_fn(_non_overlapping_views, x, x)
    eager_x, compiled_x = x.clone(), x.clone()
    expected = _non_overlapping_views(eager_x, eager_x)
    (got,) = run([compiled_x, compiled_x])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled_x, eager_x)


def test_non_overlapping_views_of_one_base() -> None:
    base = _f32(4, 3)
    a, b = base[:2], base[2:]
    _, run = compile_fn(_non_overlapping_views, a.clone(), b.clone())
    eager_base, compiled_base = base.clone(), base.clone()
    expected = _non_overlapping_views(eager_base[:2], eager_base[2:])
    (got,) = run([compiled_base[:2], compiled_base[2:]])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled_base, eager_base)


def test_batchnorm_running_stats_are_copied_back() -> None:
    bn = torch.nn.BatchNorm1d(4)
    state = [bn.running_mean, bn.running_var, bn.num_batches_tracked]

    def fn(x, mean, var, count):
        return torch.func.functional_call(
            bn, {"running_mean": mean, "running_var": var, "num_batches_tracked": count,
                 "weight": bn.weight.detach(), "bias": bn.bias.detach()}, (x,))

    x = _f32(8, 4)
    program, run = compile_fn(fn, x, *[s.clone() for s in state])
    kinds = [s.kind for s in program.signature.outputs["forward"]]
    assert kinds.count(OutputKind.MUTATED_INPUT) == 3
    eager_state = [s.clone() for s in state]
    compiled_state = [s.clone() for s in state]
    expected = fn(x, *eager_state)
    (got,) = run([x, *compiled_state])
    torch.testing.assert_close(got, expected)
    for e, g in zip(eager_state, compiled_state):
        torch.testing.assert_close(g, e)


def test_view_of_parameter_mutated_under_no_grad() -> None:
    def fn(x):
        x.add_(1)
        return x * 2

    weight = torch.nn.Parameter(_f32(3, 4))
    with torch.no_grad():
        _, run = compile_fn(fn, weight[0])
    eager_weight = weight.detach().clone()
    with torch.no_grad():
        expected = fn(eager_weight[0])
        (got,) = run([weight[0]])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(weight.detach(), eager_weight)


def _write_one_read_other(a, b):
    a.add_(1)
    return b * 2, a.sum()


def test_input_that_views_another_input() -> None:
    base = _f32(3, 4)
    program, run = compile_fn(_write_one_read_other, base, base[1])
    assert program.metadata["input_aliases"]["in1"]["base"] == "in0"  # type: ignore[index]
    fresh = _f32(3, 4)
    eager, compiled = fresh.clone(), fresh.clone()
    expected = _write_one_read_other(eager, eager[1])
    got = run([compiled, compiled[1]])
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(compiled, eager)
    with pytest.raises(RuntimeError, match="captured as a view of input 'in0'"):
        run([_f32(3, 4), _f32(4)])


def test_unexpected_aliasing_of_a_written_input_is_refused() -> None:
    _, run = compile_fn(_write_one_read_other, _f32(4), _f32(4))
    x = _f32(4)
    with pytest.raises(RuntimeError, match="shares memory with input 'in0'"):
        run([x, x[:]])


def test_write_into_a_captured_constant_is_refused() -> None:
    counter = torch.zeros(3)

    def fn(x):
        counter.add_(x)
        return x * 2

    with pytest.raises(IRFormatError, match="writes into the tensor"):
        compile_fn(fn, _f32(3))


def test_write_into_a_fresh_python_tensor_is_fine() -> None:
    def fn(x):
        t = torch.tensor([1.0, 2.0, 3.0])
        t.add_(x)
        return t

    _, run = compile_fn(fn, _f32(3))
    x = _f32(3)
    torch.testing.assert_close(run([x])[0], fn(x))


def test_earlier_input_that_is_a_view_of_a_later_one() -> None:
    base = _f32(3, 4)
    _, run = compile_fn(_write_one_read_other, base[1], base)
    fresh = _f32(3, 4)
    eager, compiled = fresh.clone(), fresh.clone()
    expected = _write_one_read_other(eager[1], eager)
    got = run([compiled[1], compiled])
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(compiled, eager)


def test_partly_overlapping_written_inputs_are_declined() -> None:
    """Not a bad program (eager runs it): the stage declines it, so the pipeline runs
    its ops eagerly with a warning instead of failing the user's call."""
    base = _f32(6)
    with pytest.raises(StageDeclined, match="partly overlap"):
        compile_fn(_write_one_read_other, base[:4], base[2:])


def test_partly_overlapping_written_inputs_run_eagerly_through_compile() -> None:
    import ember.frontend
    from ember.runtime.stages import EagerGraphWarning

    eager_base = _f32(7)
    compiled_base = eager_base.clone()
    expected = _write_one_read_other(eager_base[:6], eager_base[1:7])
    with pytest.warns(EagerGraphWarning, match="partly overlap"):
        got = ember.frontend.compile(_write_one_read_other)(compiled_base[:6],
                                                           compiled_base[1:7])
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(compiled_base, eager_base)


def _read_both(a, b):
    return a * 2 + b.sum(), b * 3


def test_inputs_sharing_memory_that_nothing_writes_are_independent() -> None:
    """Two inputs over one storage that the graph only reads are two inputs: no view of
    one is read for the other (each gets its own value and, in training, its own
    gradient), and the program drops their alias, so it takes them shared or not."""
    base = _f32(3, 4)
    program, run = compile_fn(_read_both, base, base[1])
    assert "input_aliases" not in program.metadata
    assert not any(n.target == "aten::as_strided.default" for n in program.forward.calls())
    for a, b in ((base, base[1]), (_f32(3, 4), _f32(4))):
        for got, want in zip(run([a, b]), _read_both(a, b)):
            torch.testing.assert_close(got, want)


def test_only_written_alias_groups_are_kept() -> None:
    """Of two groups of inputs sharing memory, the one the graph writes a member of keeps
    its alias (a view of its root); the other does not."""
    def f(a, b, c, d):
        a.add_(1)
        return b * 2, c + d.sum()

    x, y = _f32(3, 4), _f32(2, 5)
    program, run = compile_fn(f, x, x[1], y, y[0])
    assert set(program.metadata["input_aliases"]) == {"in1"}  # type: ignore[arg-type]
    eager, compiled = (x.clone(), y.clone()), (x.clone(), y.clone())
    want = f(eager[0], eager[0][1], eager[1], eager[1][0])
    got = run([compiled[0], compiled[0][1], compiled[1], compiled[1][0]])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    torch.testing.assert_close(compiled[0], eager[0])


def test_written_inputs_over_disjoint_parts_of_one_storage_are_independent() -> None:
    """A flat parameter's pieces (disjoint parts of one storage), written in place as an
    optimizer step writes them: each is its own input, nothing is declined, and every
    write lands; pieces that overlap are still declined (above)."""
    def step(a, b):
        a.add_(1)
        b.mul_(2)
        return a.sum() + b.sum()

    base = _f32(10)
    program, run = compile_fn(step, base[:4], base[4:])
    assert "input_aliases" not in program.metadata
    eager, compiled = base.clone(), base.clone()
    want = step(eager[:4], eager[4:])
    (got,) = run([compiled[:4], compiled[4:]])
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(compiled, eager)
