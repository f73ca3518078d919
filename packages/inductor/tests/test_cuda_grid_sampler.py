"""``grid_sampler_2d`` and its backward as Triton kernels on a CUDA GPU, against eager's
CUDA kernels: every interpolation x padding x align_corners combination, and training
through ``F.grid_sample`` (whose bilinear, zero-padded, corner-aligned calls record
``cudnn_grid_sampler`` on a GPU). Skipped without CUDA; run on the H200 test machine
(tools/gpu/h200_all.sh)."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))

from grid_sampler_cases import COMBOS, Combo, batched, combo_id, inputs, problems
from helpers import compile_and_load, trace

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def test_every_combination_matches_eager() -> None:
    x, grid, grad = (t.cuda() for t in inputs(batch=2, channels=3))
    fn = batched(COMBOS)
    compiled, run = compile_and_load(trace(fn, [x, grid, grad]))
    assert compiled.metadata["fallbacks"] == {}
    # NOTE: eager's CUDA kernels and Triton contract multiply-adds as their compilers
    # choose; the input gradient's atomic adds run in any order
    assert problems(run(x, grid, grad), fn(x, grid, grad), COMBOS, 1e-4, 1e-4) == []


class _Warp(torch.nn.Module):
    def __init__(self, combo: Combo) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.mode, self.padding, self.align = combo

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        out = F.grid_sample(self.conv(x), grid, mode=self.mode, padding_mode=self.padding,
                            align_corners=self.align)
        return out.relu().sum((2, 3))


@pytest.mark.parametrize("combo", [("bilinear", "zeros", True), ("bilinear", "border", False),
                                   ("nearest", "reflection", True),
                                   ("bicubic", "zeros", False)], ids=combo_id)
def test_training_matches_eager(combo: Combo) -> None:
    import ember.frontend

    torch.manual_seed(0)
    model = _Warp(combo).cuda()
    eager = copy.deepcopy(model)
    compiled = ember.frontend.compile(model, backend="inductor")
    x = torch.randn(2, 3, 16, 20, device="cuda")
    grid = (torch.rand(2, 12, 10, 2, device="cuda") * 2.4 - 1.2).requires_grad_(True)
    grid2 = grid.detach().clone().requires_grad_(True)
    got, want = compiled(x, grid), eager(x, grid2)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    got.square().sum().backward()
    want.square().sum().backward()
    assert compiled.stats.fallbacks == 0
    assert grid.grad is not None and grid2.grad is not None
    torch.testing.assert_close(grid.grad, grid2.grad, rtol=1e-3, atol=1e-3)
    for p, q in zip(model.parameters(), eager.parameters()):
        assert p.grad is not None and q.grad is not None
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-3)
