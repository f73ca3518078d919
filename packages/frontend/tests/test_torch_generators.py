"""Generator functions in torch's own code are interpreted, not run for real, and a
state that cannot be rebuilt at a graph break names that break.

``nn.MultiheadAttention.forward`` unpacks ``(x.transpose(1, 0) for x in (query, key,
value))`` when the three differ. torch code is recorded (run on fake tensors) rather
than interpreted, and running the genexpr function gave a lazy generator whose body
would run after the recording: unpacking it was a graph break with the generator live,
which made the whole forward run eagerly ("cannot rebuild the state at a graph break")."""

from __future__ import annotations

import copy

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from torch import nn


def test_multihead_attention_with_distinct_inputs_is_one_graph() -> None:
    torch.manual_seed(0)
    eager = nn.MultiheadAttention(8, 2, batch_first=True)
    model = copy.deepcopy(eager)
    compiled = ef.compile(model)
    x = torch.randn(2, 5, 8)
    mine = [x.clone().requires_grad_() for _ in range(3)]
    theirs = [x.clone().requires_grad_() for _ in range(3)]
    got, want = compiled(*mine)[0], eager(*theirs)[0]
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    for p, q in zip(model.parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a.grad, b.grad)
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)


def generator_live_at_a_break(x: torch.Tensor) -> torch.Tensor:
    pending = (t * 2 for t in (x, x + 1))
    first = next(pending)
    print("break")  # the suspended generator cannot be rebuilt here
    return first + next(pending)


def test_an_unrebuildable_state_names_the_break(capsys: pytest.CaptureFixture[str]) -> None:
    compiled = ef.compile(generator_live_at_a_break)
    x = torch.ones(3)
    with patch(logs=frozenset({"graph_breaks"})):
        torch.testing.assert_close(compiled(x), generator_live_at_a_break(x))
    err = capsys.readouterr().err
    assert "cannot rebuild the state at a graph break" in err
    assert "the graph break at " in err and "in generator_live_at_a_break: call to print()" in err
