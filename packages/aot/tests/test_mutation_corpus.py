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


def _add_on_input(x):
    x.add_(1)
    return x * 2


def _mul_broadcast(x, y):
    x.mul_(y)
    return x.sum()


def _inplace_identity(x, y):
    return x.add_(y)


def _slice(x):
    x[1:3].mul_(2)
    return x.sum()


def _select_zero(x):
    x[0].zero_()
    return x + 1


def _diagonal_fill(x):
    x.diagonal().fill_(0.5)
    return x.exp()


def _transpose_row(x):
    x.t()[0].add_(1)
    return x.clone()


def _unfold(x):
    x.unfold(0, 2, 2).mul_(3)
    return x.sum()


def _as_strided(x):
    x.as_strided((2, 2), (1, 2)).add_(1)
    return x * 1


def _flat_view_slice(x):
    x.view(-1)[2:5].sub_(1)
    return x.cos()


def _view_chain(x):
    x[1:].t()[0].mul_(0.5)
    return x.sum(1)


def _old_view_sees_mutation(x):
    v = x[0]
    x.add_(1)
    return v * 2


def _sibling_view(x):
    col = x[:, 0]
    row = x[0]
    row.fill_(3.0)
    return col.clone()


def _view_output(x):
    return x[0]


def _identity(x):
    return x


def _mutate_then_view_output(x):
    x.add_(1)
    return x.t()


def _outputs_alias_each_other(x):
    y = x * 2
    return y, y.view(-1)


def _copy_into_input(x, y):
    x.copy_(y)
    return x + 1


def _copy_broadcast_dtype(x, y):
    x.copy_(y)
    return x.sum()


def _mutate_intermediate(x):
    y = x.clone()
    y[0].add_(1)
    return y


def _split_part(x):
    _, b = x.split(2)
    b.mul_(2)
    return x.sum(0)


def _unbind_part(x):
    x.unbind(0)[1].add_(1)
    return x.abs()


def _dtype_promotion(x, y):
    x.add_(y)
    return x


def _two_mutated_inputs(x, y):
    x.add_(1)
    y.mul_(2)
    return x + y


def _index_put(x, idx, v):
    x[idx] = v
    return x.sum()


def _masked_fill(x):
    x.masked_fill_(x > 0, 0.0)
    return x * 3


def _relu_intermediate(x):
    y = x * 2
    y.relu_()
    return y + x


def _mutated_view_is_output(x):
    row = x[1]
    row.add_(10)
    return row


def _non_overlapping_views(a, b):
    a.add_(1)
    return a + b


def _squeeze_intermediate(a, b):
    # torch.matmul of a 1-d and a 2-d tensor: unsqueeze, mm, then squeeze_ of the result
    y = a.unsqueeze(0) @ b
    y.squeeze_(0)
    return y


def _inplace_views_then_write(x):
    y = x * 2
    y.t_()
    y.unsqueeze_(0)
    y[0, 1].add_(5)  # a write through the changed view reaches y's data
    return y, y * 1


def _f32(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


CORPUS: list[tuple[str, Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = [
    ("add_on_input", _add_on_input, lambda: (_f32(3, 4),)),
    ("mul_broadcast", _mul_broadcast, lambda: (_f32(3, 4), _f32(4))),
    ("inplace_identity", _inplace_identity, lambda: (_f32(3, 4), _f32(3, 4))),
    ("slice", _slice, lambda: (_f32(5, 2),)),
    ("select_zero", _select_zero, lambda: (_f32(3, 4),)),
    ("diagonal_fill", _diagonal_fill, lambda: (_f32(4, 4),)),
    ("transpose_row", _transpose_row, lambda: (_f32(3, 4),)),
    ("unfold", _unfold, lambda: (_f32(6),)),
    ("as_strided", _as_strided, lambda: (_f32(4),)),
    ("flat_view_slice", _flat_view_slice, lambda: (_f32(3, 3),)),
    ("view_chain", _view_chain, lambda: (_f32(4, 3),)),
    ("old_view_sees_mutation", _old_view_sees_mutation, lambda: (_f32(3, 4),)),
    ("sibling_view", _sibling_view, lambda: (_f32(3, 4),)),
    ("view_output", _view_output, lambda: (_f32(3, 4),)),
    ("identity", _identity, lambda: (_f32(3, 4),)),
    ("mutate_then_view_output", _mutate_then_view_output, lambda: (_f32(3, 4),)),
    ("outputs_alias_each_other", _outputs_alias_each_other, lambda: (_f32(3, 4),)),
    ("copy_into_input", _copy_into_input, lambda: (_f32(3, 4), _f32(3, 4))),
    ("copy_broadcast_dtype", _copy_broadcast_dtype,
     lambda: (_f32(3, 4), torch.randn(4, dtype=torch.float64))),
    ("mutate_intermediate", _mutate_intermediate, lambda: (_f32(3, 4),)),
    ("split_part", _split_part, lambda: (_f32(4, 3),)),
    ("unbind_part", _unbind_part, lambda: (_f32(3, 4),)),
    ("dtype_promotion", _dtype_promotion,
     lambda: (_f32(3, 4), torch.randn(3, 4, dtype=torch.float64))),
    ("two_mutated_inputs", _two_mutated_inputs, lambda: (_f32(3, 4), _f32(3, 4))),
    ("index_put", _index_put,
     lambda: (_f32(5, 3), torch.tensor([0, 3]), _f32(2, 3))),
    ("masked_fill", _masked_fill, lambda: (_f32(3, 4),)),
    ("relu_intermediate", _relu_intermediate, lambda: (_f32(3, 4),)),
    ("squeeze_intermediate", _squeeze_intermediate, lambda: (_f32(3), _f32(3, 5))),
    ("inplace_views_then_write", _inplace_views_then_write, lambda: (_f32(3, 4),)),
    ("mutated_view_is_output", _mutated_view_is_output, lambda: (_f32(3, 4),)),
]


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _check_against_eager(fn: Callable[..., Any], eager_inputs: list[torch.Tensor],
                         compiled_inputs: list[torch.Tensor], run: Any) -> None:
    expected = fn(*eager_inputs)
    expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
    got = run(compiled_inputs)
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
        for ei, gi in zip(eager_inputs, compiled_inputs):
            assert _shares_memory(e, ei) == _shares_memory(g, gi), "output aliasing differs"
        assert tuple(g.stride()) == tuple(e.stride()) or not any(
            _shares_memory(e, ei) for ei in eager_inputs)
    for e, g in zip(eager_inputs, compiled_inputs):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("name,fn,make_inputs", CORPUS, ids=[c[0] for c in CORPUS])
def test_corpus_matches_eager(name: str, fn: Callable[..., Any],
                              make_inputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    inputs = make_inputs()
    program, run = compile_fn(fn, *[t.clone() for t in inputs])  # verifies core-functional
    assert not any(resolve_op(n.target)._schema.is_mutable for n in program.forward.calls())
    _check_against_eager(fn, [t.clone() for t in inputs], [t.clone() for t in inputs], run)
    # a second call on fresh inputs reuses the compiled program
    fresh = make_inputs()
    _check_against_eager(fn, [t.clone() for t in fresh], [t.clone() for t in fresh], run)


def test_mutated_input_moves_to_signature() -> None:
    program, _ = compile_fn(_two_mutated_inputs, _f32(3, 4), _f32(3, 4))
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


def test_partly_overlapping_written_inputs_are_refused() -> None:
    base = _f32(6)
    with pytest.raises(IRFormatError, match="partly overlap"):
        compile_fn(_write_one_read_other, base[:4], base[2:])
