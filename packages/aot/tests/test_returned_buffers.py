"""Equal tensors a graph returns stay distinct buffers after aot's clean-ups.

Found on transformers' RWKV under ``torch.autocast`` (a graph break inside each layer):
the graph before the break made the five state tensors with equal ``torch.zeros``
calls and returned them, live at the break; CSE merged the equal calls, so the state
list held one buffer four times and the next graph's in-place writes into one state
showed in all of them (logits off by 1.6, no error).
"""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch


def _state_across_a_break(x: torch.Tensor) -> list[torch.Tensor]:
    state = [torch.zeros(x.shape[0], 3) for _ in range(3)]
    state[2] -= 1.0
    torch._dynamo.graph_break()  # the state is live at the break: graph outputs
    state[0][:, 1] = x
    return state


def _returned_zeros(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.zeros(2) + x, torch.zeros(2), torch.zeros(2)[:1], torch.zeros(2)[:1]


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_state_written_after_a_break_is_not_shared(backend: str) -> None:
    compiled = ef.compile(_state_across_a_break, backend=backend)
    for _ in range(2):
        x = torch.randn(2)
        got, want = compiled(x), _state_across_a_break(x)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
    assert compiled.stats.graph_breaks == 1


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_returned_equal_tensors_are_distinct_buffers(backend: str) -> None:
    compiled = ef.compile(_returned_zeros, backend=backend)
    _, b, c1, c2 = compiled(torch.ones(2))
    b.add_(1)
    c1.add_(5)
    assert b.tolist() == [1.0, 1.0] and c1.tolist() == [5.0] and c2.tolist() == [0.0]
