"""``cudnn_batch_norm`` (what ``batch_norm`` runs as for float32 on CUDA) hides its
running-statistics writes from its schema; the recorder records it as
``native_batch_norm`` so the aot stage functionalizes the writes. Before, a float32
conv-BN net's training compile on CUDA failed in the aot stage ("re-tracing wrote into
graph input(s) ..._running_mean"). Runs on CPU by calling the op directly (the recorded
program never runs the cuDNN kernel)."""

from __future__ import annotations

import ember.frontend
import pytest
import torch


def bn_cudnn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor,
             rv: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = torch.ops.aten.cudnn_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)[0]
    return out.relu()


def bn_eager(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, rm: torch.Tensor,
             rv: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.batch_norm(x, rm, rv, w, b, True, 0.1, 1e-5).relu()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_through_cudnn_batch_norm_updates_running_stats_and_grads(
        backend: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 3, 6, 6)
    w, b = torch.rand(3) + 0.5, torch.randn(3)
    ours = [t.clone().requires_grad_(True) for t in (x, w, b)]
    theirs = [t.clone().requires_grad_(True) for t in (x, w, b)]
    stats_ours, stats_theirs = [torch.zeros(3), torch.ones(3)], [torch.zeros(3), torch.ones(3)]
    fast = ember.frontend.compile(bn_cudnn, backend=backend)
    for _ in range(2):
        got, want = fast(*ours, *stats_ours), bn_eager(*theirs, *stats_theirs)
        torch.testing.assert_close(got, want)
        torch.autograd.backward([got.square().sum(), want.square().sum()])
    torch.testing.assert_close(stats_ours, stats_theirs)
    for a, c in zip(ours, theirs):
        torch.testing.assert_close(a.grad, c.grad)
