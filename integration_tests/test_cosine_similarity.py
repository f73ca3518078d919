"""``F.cosine_similarity`` with inputs that require grad, in one graph
(``ember.runtime.checked_calls.REBUILT_CALLS``): torch's C++ clamps the two norms in
place under ``no_grad``, where the strict capture broke the graph. Values and gradients
as eager's, a zero vector (the clamp) included; both capture modes, static and
symbolic sizes, broadcasting."""

from __future__ import annotations

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F


def _loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.cosine_similarity(a, b, dim=-1).sum() * 3


@pytest.mark.parametrize("capture", ["strict", "trace"])
@pytest.mark.parametrize("dynamic", [False, True])
def test_cosine_similarity_trains_in_one_graph(capture: str, dynamic: bool) -> None:
    torch.manual_seed(0)
    compiled = ef.compile(_loss, backend="aot_eager", dynamic=dynamic,
                          options={"capture": capture})
    for first, second in (((4, 8), (4, 8)), ((5, 8), (1, 8))):
        a = torch.randn(*first, requires_grad=True)
        b = torch.randn(*second, requires_grad=True)
        with torch.no_grad():
            a[0] = 0  # a zero vector: its norm is clamped to eps
        ra, rb = (t.detach().clone().requires_grad_() for t in (a, b))
        got, want = compiled(a, b), _loss(ra, rb)
        torch.testing.assert_close(got, want)
        got.backward()
        want.backward()
        torch.testing.assert_close((a.grad, b.grad), (ra.grad, rb.grad))
    assert compiled.stats.graph_breaks == 0


def test_inference_keeps_torchs_own_call() -> None:
    """Without an input that requires grad there is no write to stop at."""
    compiled = ef.compile(_loss)
    a, b = torch.randn(3, 8), torch.randn(3, 8)
    torch.testing.assert_close(compiled(a, b), _loss(a, b))
    assert compiled.stats.graph_breaks == 0
