"""Training scaffolding: three small models (an MLP, a conv net with BatchNorm, a
transformer block) with input factories, one SGD step, and the comparison of parameters,
gradients and buffers with eager after it."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ember_testing.compare import prefixed

TOL = 1e-4
"""atol = rtol for float32 training results (docs/architecture.md)."""


class TransformerBlock(torch.nn.Module):
    """Pre-norm attention + MLP block, written out (no fused SDPA) so the joint graph
    has matmuls, softmax, layer norms and GELU."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        att = att.softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        out: torch.Tensor = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
        return out


def mlp() -> torch.nn.Module:
    """Linear/ReLU/Linear/Tanh/Linear on inputs of 16 features."""
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def conv_bn() -> torch.nn.Module:
    """Two convolutions with BatchNorm (one strided) and a linear head, on 3x8x8 images."""
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 4, 3, stride=2), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
        torch.nn.Linear(4 * 3 * 3, 5))


TrainingCase = tuple[str, Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]

MODELS: list[TrainingCase] = [
    ("mlp", mlp, lambda: torch.randn(8, 16)),
    ("conv_bn", conv_bn, lambda: torch.randn(4, 3, 8, 8)),
    ("transformer_block", TransformerBlock, lambda: torch.randn(2, 6, 32)),
]
"""(name, model factory, input factory) for each model."""


def sgd_step(model: torch.nn.Module, forward: Callable[[torch.Tensor], torch.Tensor],
             x: torch.Tensor, target: torch.Tensor) -> None:
    """One SGD step (momentum 0.9) of ``model``'s parameters on the MSE loss of
    ``forward(x)`` (the model itself, or its compiled form) against ``target``."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(forward(x), target)
    loss.backward()  # type: ignore[no-untyped-call]
    opt.step()


def assert_same_training_state(eager: torch.nn.Module, compiled: torch.nn.Module,
                               tol: float = TOL) -> None:
    """``compiled``'s gradients, parameters and buffers equal ``eager``'s within ``tol``;
    every parameter got a gradient."""
    for (name, pe), (_, pc) in zip(eager.named_parameters(), compiled.named_parameters()):
        assert pc.grad is not None, f"{name} got no gradient"
        torch.testing.assert_close(pc.grad, pe.grad, atol=tol, rtol=tol,
                                   msg=prefixed(f"grad {name}"))
        torch.testing.assert_close(pc, pe, atol=tol, rtol=tol, msg=prefixed(f"param {name}"))
    for (name, be), (_, bc) in zip(eager.named_buffers(), compiled.named_buffers()):
        torch.testing.assert_close(bc, be, atol=tol, rtol=tol,
                                   msg=prefixed(f"buffer {name}"))
