"""``matmul`` under a dynamic recorder (:mod:`ember.runtime.tracing_matmul`): the Python
expansion matches ``torch.matmul`` for every rank combination (values and gradients),
a dynamic recorder routes ``@``/``matmul`` with a symbolic operand through it and records
``bmm`` over the symbols, and static recording is untouched."""

from __future__ import annotations

import pytest
import torch
from ember.runtime import tracing_matmul
from ember.runtime.ir import InputSpec, print_graph, verify
from ember.runtime.tracing import GraphRecorder
from ember.runtime.tracing_matmul import symbolic_matmul

SHAPES = [  # (a, b): every branch of torch.matmul's rank rules, broadcasting included
    ((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((3, 5), (5, 4)),
    ((2, 3, 5), (5,)), ((5,), (2, 5, 4)), ((2, 3, 5), (5, 4)), ((3, 5), (2, 5, 4)),
    ((2, 3, 5), (2, 5, 4)), ((2, 1, 3, 5), (6, 5, 4)), ((1, 3, 5), (7, 5, 4)),
    ((2, 6, 3, 5), (6, 5, 4)),
]


@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_expansion_matches_torch_matmul_in_values_and_gradients(
        sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    a = torch.randn(sa, dtype=torch.float64, requires_grad=True)
    b = torch.randn(sb, dtype=torch.float64, requires_grad=True)
    got, want = symbolic_matmul(a, b), torch.matmul(a, b)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    ga, gb = torch.autograd.grad(got, (a, b), grad)
    wa, wb = torch.autograd.grad(want, (a, b), grad)
    torch.testing.assert_close((ga, gb), (wa, wb))


def test_mismatched_batches_still_raise() -> None:
    with pytest.raises(RuntimeError):
        symbolic_matmul(torch.randn(2, 3, 5), torch.randn(3, 5, 4))


def _record(dynamic: bool) -> str:
    rec = GraphRecorder(dynamic=dynamic)
    qkv = torch.randn(4, 8, 96)
    dims = {0: (2, None)} if dynamic else None
    q = rec.add_input(qkv[..., :32], InputSpec("q"), dynamic_dims=dims)
    k = rec.add_input(qkv[..., 32:64], InputSpec("k"), dynamic_dims=dims)
    with rec:
        out = q @ k.transpose(-1, -2)
    program = rec.finish([out])
    verify(program)
    return print_graph(program.forward)


def test_a_dynamic_recorder_expands_matmul_of_symbolic_operands(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []
    real = tracing_matmul.symbolic_matmul

    def counting(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        calls.append((a.dim(), b.dim()))
        return real(a, b)

    monkeypatch.setattr(tracing_matmul, "symbolic_matmul", counting)
    text = _record(dynamic=True)
    assert calls == [(3, 3)]
    assert "aten::bmm.default" in text, text
    assert "f32[s0, 8, 8]" in text, text  # the batch stays a symbol
    calls.clear()
    static = _record(dynamic=False)
    assert calls == [], "a static recorder leaves matmul to torch"
    assert "f32[4, 8, 8]" in static, static
