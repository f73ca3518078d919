"""Normalisation training steps at full size on the GPU (issue 19 items 2-3): Ember's
bf16 gradients against eager's, both measured against a float32 eager reference
(numerics only; ``tools/gpu/norm_bandwidth.py`` times them)."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from test_norm_kernels import BatchNormReLU, RMSNorm, SoftmaxLayerNorm
from torch import nn

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU"),
]


def _grads(model: nn.Module, x: torch.Tensor, call: Callable[..., torch.Tensor] | None = None
           ) -> list[torch.Tensor]:
    """The gradients of ``x`` and ``model``'s parameters of one training step, run
    through ``call`` (a compiled ``model``) when given."""
    x = x.detach().requires_grad_(True)
    out = (call or model)(x)
    out.float().sum().backward()
    assert x.grad is not None
    grads = [x.grad.float()]
    for p in model.parameters():
        assert p.grad is not None
        grads.append(p.grad.float())
    return grads


CASES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "rms_norm": (lambda: RMSNorm(4096), (16384, 4096)),
    "softmax_layernorm": (lambda: SoftmaxLayerNorm(4096), (16384, 4096)),
    "batch_norm_1d": (lambda: BatchNormReLU(4096, 1), (16384, 4096)),
    "batch_norm_2d": (lambda: BatchNormReLU(64, 2), (32, 64, 56, 56)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bf16_training_step_gradients_are_as_close_as_eagers(name: str) -> None:
    import ember.frontend

    make, shape = CASES[name]
    torch.manual_seed(0)
    reference = make().cuda()
    for p in reference.parameters():
        with torch.no_grad():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(shape, device="cuda")
    want = _grads(copy.deepcopy(reference), x)
    eager = copy.deepcopy(reference).to(torch.bfloat16)
    compiled_model = copy.deepcopy(reference).to(torch.bfloat16)
    compiled = ember.frontend.compile(compiled_model, backend="inductor")
    eager_grads = _grads(eager, x.to(torch.bfloat16))
    got = _grads(compiled_model, x.to(torch.bfloat16), compiled)
    for g, e, w in zip(got, eager_grads, want, strict=True):
        scale = w.abs().max().item() + 1e-6
        eager_error = (e - w).abs().max().item() / scale
        error = (g - w).abs().max().item() / scale
        assert error <= 2 * eager_error + 1e-2, (name, error, eager_error)
