"""``torch.utils.checkpoint.checkpoint`` inside a compiled function. The non-reentrant
form is captured in the graph; the reentrant form applies the custom autograd.Function
``CheckpointFunction`` from inside torch code the strict capture runs on fake tensors
(no ``Function.apply`` the interpreter sees), whose forward runs under no_grad. Before,
its ops were recorded cut from autograd: the ``eager`` backend's backward raised
"element 0 of tensors does not require grad", ``aot_eager`` gave the input no gradient.
Now a recorded call whose result went through a custom Function breaks the graph, and
the capture restarts so that the call's ops (run again for real at the break) are not
left in the graph, where a dropout in them drew from the generator once more."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F
from ember.runtime.config import patch
from torch.utils.checkpoint import checkpoint


class Checkpointed(torch.nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
        self.reentrant = reentrant

    def block(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.b(F.dropout(torch.relu(self.a(x)), 0.5, self.training)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=self.reentrant).sum() + torch.rand(())


def _run(fn: object, model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    torch.manual_seed(1)
    out = fn(x)  # type: ignore[operator]
    out.backward()
    assert x.grad is not None
    return (out.detach(), x.grad, *(p.grad for p in model.parameters() if p.grad is not None))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_values_and_gradients_match_eager(backend: str, reentrant: bool,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    torch.manual_seed(0)
    model, x = Checkpointed(reentrant), torch.randn(3, 4)
    compiled = ef.compile(model, backend=backend)
    with patch(logs=frozenset({"graph_breaks"})):
        got = _run(compiled, model, x)
    want = _run(model, model, x)
    assert len(got) == len(want) == 6
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert compiled.stats.graph_breaks == (1 if reentrant else 0)
    if reentrant:
        err = capsys.readouterr().err
        assert ("torch.utils.checkpoint.checkpoint applies the custom autograd.Function "
                "torch.utils.checkpoint.CheckpointFunction") in err
        assert "checkpoint(self.block, x, use_reentrant=self.reentrant)" in err


def test_the_broken_calls_ops_are_not_left_in_the_graph() -> None:
    lin = torch.nn.Linear(4, 4)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(lambda t: torch.relu(lin(t)), x, use_reentrant=True) * 2

    compiled = ef.compile(fn, backend="eager")
    x = torch.randn(2, 4, requires_grad=True)
    torch.testing.assert_close(compiled(x), fn(x))
    assert compiled.stats.graph_breaks == 1
    assert compiled.stats.graphs == 1  # only `* 2`: the segment before the call is empty
