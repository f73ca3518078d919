"""``F.ctc_loss`` with Python-list lengths compiles in one graph (training too): torch has
no fake kernel for ``_ctc_loss`` and its backward (``tracing_rewrites.FAKE_KERNELS``
sizes their results), and its mean reduction builds a tensor from the list in C++
(``checked_calls``). The graph broke at the loss (strict) or failed (trace)."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("capture", ["strict", "trace"])
@pytest.mark.parametrize("reduction,backend", [
    ("mean", "inductor"), ("mean", "aot_eager"), ("sum", "aot_eager"),
    ("none", "aot_eager")])
def test_ctc_loss_with_list_lengths_trains_in_one_graph(capture: str, reduction: str,
                                                         backend: str) -> None:
    def loss(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.ctc_loss(x.log_softmax(2), targets, [6, 5], [3, 2], reduction=reduction)

    torch.manual_seed(0)
    compiled = ef.compile(loss, backend=backend, options={"capture": capture})
    x = torch.randn(6, 2, 5, requires_grad=True)
    targets = torch.randint(1, 5, (2, 3))
    expected_x = x.detach().clone().requires_grad_()
    got, want = compiled(x, targets), loss(expected_x, targets)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(x.grad, expected_x.grad)
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)


@pytest.mark.parametrize("capture", ["strict", "trace"])
def test_torch_ctc_loss_with_the_mean_enum(capture: str) -> None:
    """``torch.ctc_loss`` itself (its reduction an enum: 1 is mean), a target of length 0."""
    def loss(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.ctc_loss(x.log_softmax(2), targets, [6, 5], [3, 0], 0, 1)

    compiled = ef.compile(loss, backend="aot_eager", options={"capture": capture})
    x, targets = torch.randn(6, 2, 5), torch.randint(1, 5, (2, 3))
    torch.testing.assert_close(compiled(x, targets), loss(x, targets))
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (1, 0)


def test_ctc_loss_module_in_a_model() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.LogSoftmax(2))
    criterion = torch.nn.CTCLoss(zero_infinity=True)

    def step(x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return criterion(model(x), targets, [7, 7, 4], [2, 3, 1])

    compiled = ef.compile(step)
    x, targets = torch.randn(7, 3, 8), torch.randint(1, 5, (3, 3))
    torch.testing.assert_close(compiled(x, targets), step(x, targets))
    assert compiled.stats.graph_breaks == 0
