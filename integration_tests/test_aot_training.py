"""Training end to end through ``ember.frontend.compile``: one optimizer step of an MLP,
a conv net with BatchNorm and a transformer block gives the parameters, gradients and
buffers eager torch gives (float32, docs/architecture.md), under ``aot_eager`` and ``inductor``,
with the programs serialized at every stage boundary."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import ember.frontend
import pytest
import torch
from ember.runtime.config import patch

TOL = 1e-4


@pytest.fixture(autouse=True)
def _serialize_boundaries() -> Iterator[None]:
    with patch(serialize_boundaries=True):
        yield


class TransformerBlock(torch.nn.Module):
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
        att = ((q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(),
                               torch.nn.Linear(32, 4))


def conv_bn() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 5))


MODELS: list[tuple[str, Callable[[], torch.nn.Module], Callable[[], torch.Tensor]]] = [
    ("mlp", mlp, lambda: torch.randn(8, 16)),
    ("conv_bn", conv_bn, lambda: torch.randn(4, 3, 6, 6)),
    ("transformer_block", TransformerBlock, lambda: torch.randn(2, 6, 32)),
]


def _step(model: torch.nn.Module, forward: Callable[[torch.Tensor], torch.Tensor],
          x: torch.Tensor, target: torch.Tensor) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.zero_grad()
    torch.nn.functional.mse_loss(forward(x), target).backward()
    opt.step()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("name,make_model,make_input", MODELS, ids=[m[0] for m in MODELS])
def test_one_optimizer_step(backend: str, name: str, make_model: Callable[[], torch.nn.Module],
                            make_input: Callable[[], torch.Tensor]) -> None:
    torch.manual_seed(0)
    eager = make_model().train()
    compiled_model = copy.deepcopy(eager)
    compiled = ember.frontend.compile(compiled_model, backend=backend)
    x = make_input()
    with torch.no_grad():
        target = torch.randn_like(copy.deepcopy(eager)(x))

    _step(eager, eager, x, target)
    _step(compiled_model, compiled, x, target)

    for (pname, pe), (_, pc) in zip(eager.named_parameters(), compiled_model.named_parameters()):
        assert pc.grad is not None, f"{pname} got no gradient"
        torch.testing.assert_close(pc.grad, pe.grad, atol=TOL, rtol=TOL, msg=f"grad {pname}")
        torch.testing.assert_close(pc, pe, atol=TOL, rtol=TOL, msg=f"param {pname}")
    for (bname, be), (_, bc) in zip(eager.named_buffers(), compiled_model.named_buffers()):
        torch.testing.assert_close(bc, be, atol=TOL, rtol=TOL, msg=f"buffer {bname}")


def test_no_grad_call_builds_no_backward() -> None:
    model = mlp()
    compiled = ember.frontend.compile(model, backend="aot_eager")
    x = torch.randn(8, 16)
    with torch.no_grad():
        out = compiled(x)
    assert out.grad_fn is None
    torch.testing.assert_close(out, model(x))
