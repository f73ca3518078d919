"""The aot stage end to end through ``ember.frontend.compile(backend="aot_eager")``: the
mutation and aliasing corpus (outputs, inputs after the call, aliasing equal to eager),
with every program serialized at the stage boundaries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


def add_on_input(x):
    x.add_(1)
    return x * 2


def mul_broadcast(x, y):
    x.mul_(y)
    return x.sum()


def inplace_identity(x, y):
    return x.add_(y)


def slice_mul(x):
    x[1:3].mul_(2)
    return x.sum()


def select_zero(x):
    x[0].zero_()
    return x + 1


def diagonal_fill(x):
    x.diagonal().fill_(0.5)
    return x.exp()


def transpose_row(x):
    x.t()[0].add_(1)
    return x.clone()


def unfold_mul(x):
    x.unfold(0, 2, 2).mul_(3)
    return x.sum()


def as_strided_add(x):
    x.as_strided((2, 2), (1, 2)).add_(1)
    return x * 1


def flat_view_slice(x):
    x.view(-1)[2:5].sub_(1)
    return x.cos()


def view_chain(x):
    x[1:].t()[0].mul_(0.5)
    return x.sum(1)


def old_view_sees_mutation(x):
    v = x[0]
    x.add_(1)
    return v * 2


def sibling_view(x):
    col = x[:, 0]
    row = x[0]
    row.fill_(3.0)
    return col.clone()


def view_output(x):
    return x[0]


def identity(x):
    return x


def mutate_then_view_output(x):
    x.add_(1)
    return x.t()


def outputs_alias_each_other(x):
    y = x * 2
    return y, y.view(-1)


def copy_into_input(x, y):
    x.copy_(y)
    return x + 1


def mutate_intermediate(x):
    y = x.clone()
    y[0].add_(1)
    return y


def split_part(x):
    parts = x.split(2)
    parts[1].mul_(2)
    return x.sum(0)


def unbind_part(x):
    x.unbind(0)[1].add_(1)
    return x.abs()


def dtype_promotion(x, y):
    x.add_(y)
    return x


def two_mutated_inputs(x, y):
    x.add_(1)
    y.mul_(2)
    return x + y


def masked_fill(x):
    x.masked_fill_(x > 0, 0.0)
    return x * 3


def relu_intermediate(x):
    y = x * 2
    y.relu_()
    return y + x


def mutated_view_is_output(x):
    row = x[1]
    row.add_(10)
    return row


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


CORPUS: list[tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = [
    (add_on_input, lambda: (_r(3, 4),)),
    (mul_broadcast, lambda: (_r(3, 4), _r(4))),
    (inplace_identity, lambda: (_r(3, 4), _r(3, 4))),
    (slice_mul, lambda: (_r(5, 2),)),
    (select_zero, lambda: (_r(3, 4),)),
    (diagonal_fill, lambda: (_r(4, 4),)),
    (transpose_row, lambda: (_r(3, 4),)),
    (unfold_mul, lambda: (_r(6),)),
    (as_strided_add, lambda: (_r(4),)),
    (flat_view_slice, lambda: (_r(3, 3),)),
    (view_chain, lambda: (_r(4, 3),)),
    (old_view_sees_mutation, lambda: (_r(3, 4),)),
    (sibling_view, lambda: (_r(3, 4),)),
    (view_output, lambda: (_r(3, 4),)),
    (identity, lambda: (_r(3, 4),)),
    (mutate_then_view_output, lambda: (_r(3, 4),)),
    (outputs_alias_each_other, lambda: (_r(3, 4),)),
    (copy_into_input, lambda: (_r(3, 4), _r(3, 4))),
    (mutate_intermediate, lambda: (_r(3, 4),)),
    (split_part, lambda: (_r(4, 3),)),
    (unbind_part, lambda: (_r(3, 4),)),
    (dtype_promotion, lambda: (_r(3, 4), torch.randn(3, 4, dtype=torch.float64))),
    (two_mutated_inputs, lambda: (_r(3, 4), _r(3, 4))),
    (masked_fill, lambda: (_r(3, 4),)),
    (relu_intermediate, lambda: (_r(3, 4),)),
    (mutated_view_is_output, lambda: (_r(3, 4),)),
]


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _as_list(value: Any) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def check_against_eager(fn: Callable[..., Any], compiled: Callable[..., Any],
                        inputs: tuple[torch.Tensor, ...]) -> None:
    eager_inputs = [t.clone() for t in inputs]
    compiled_inputs = [t.clone() for t in inputs]
    expected = _as_list(fn(*eager_inputs))
    got = _as_list(compiled(*compiled_inputs))
    assert len(got) == len(expected)
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e)
        for ei, gi in zip(eager_inputs, compiled_inputs):
            assert _same_storage(e, ei) == _same_storage(g, gi), "output aliasing differs"
    for e, g in zip(eager_inputs, compiled_inputs):
        torch.testing.assert_close(g, e)
    for i, e in enumerate(expected):
        for j in range(i):
            assert _same_storage(e, expected[j]) == _same_storage(got[i], got[j])


@pytest.mark.parametrize("fn,make_inputs", CORPUS, ids=[c[0].__name__ for c in CORPUS])
def test_corpus_under_aot_eager(fn: Callable[..., Any],
                                make_inputs: Callable[[], tuple[torch.Tensor, ...]]) -> None:
    compiled = ember.frontend.compile(fn, backend="aot_eager")
    check_against_eager(fn, compiled, make_inputs())
    check_against_eager(fn, compiled, make_inputs())  # the second call reuses the program


def test_batchnorm_running_stats() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    compiled_model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.BatchNorm1d(6))
    compiled_model.load_state_dict(model.state_dict())
    compiled = ember.frontend.compile(compiled_model, backend="aot_eager")
    for _ in range(2):
        x = torch.randn(8, 4)
        torch.testing.assert_close(compiled(x), model(x))
    for (name, e), (_, g) in zip(model.named_buffers(), compiled_model.named_buffers()):
        torch.testing.assert_close(g, e, msg=f"buffer {name}")


def test_same_tensor_passed_twice() -> None:
    def fn(a, b):
        a.add_(1)
        return a + b

    compiled = ember.frontend.compile(fn, backend="aot_eager")
    x = torch.randn(3, 4)
    eager_x, compiled_x = x.clone(), x.clone()
    torch.testing.assert_close(compiled(compiled_x, compiled_x), fn(eager_x, eager_x))
    torch.testing.assert_close(compiled_x, eager_x)


def test_view_of_parameter_mutated_under_no_grad() -> None:
    def fn(x):
        x.add_(1)
        return x * 2

    weight = torch.nn.Parameter(torch.randn(3, 4))
    eager_weight = weight.detach().clone()
    compiled = ember.frontend.compile(fn, backend="aot_eager")
    with torch.no_grad():
        expected = fn(eager_weight[0])
        got = compiled(weight[0])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(weight.detach(), eager_weight)


def test_input_that_views_another_input() -> None:
    def fn(a, b):
        a.add_(1)
        return b * 2

    compiled = ember.frontend.compile(fn, backend="aot_eager")
    for _ in range(2):
        base = torch.randn(3, 4)
        eager, mine = base.clone(), base.clone()
        torch.testing.assert_close(compiled(mine, mine[1]), fn(eager, eager[1]))
        torch.testing.assert_close(mine, eager)
