"""Tensor arguments that are different objects over one storage, through the whole
pipeline (capture, aot, inductor): ``mha(q, k, v)`` with ``q``, ``k``, ``v`` three
detached handles of one tensor, each a leaf that requires grad, gets eager's three
gradients; a call whose arguments share storage differently compiles again."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import ember.frontend as ef
from ember.runtime.config import patch
from torch import nn


@pytest.fixture(autouse=True)
def _no_disk_caches():  # type: ignore[no-untyped-def]
    with patch(program_cache=False, capture_cache=False):
        yield


def _leaves(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    """``n`` leaves that require grad, all over ``x``'s storage."""
    return [x.detach().requires_grad_() for _ in range(n)]


def _gradients(fn: Callable[..., Any], module: nn.Module,
               inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    for t in [*inputs, *module.parameters()]:
        t.grad = None
    out = fn(*inputs)[0]
    (out * torch.linspace(0.5, 1.5, out.numel()).view(out.shape)).sum().backward()
    return [t.grad.clone() for t in [*inputs, *module.parameters()]]  # type: ignore[union-attr]


def test_attention_over_three_handles_of_one_tensor_gets_three_gradients() -> None:
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    compiled = ef.compile(mha)
    compiled(x, x, x)  # the same object thrice first: key and value are the query
    inputs = _leaves(x, 3)
    assert inputs[0].data_ptr() == inputs[1].data_ptr() and inputs[0] is not inputs[1]
    want = _gradients(mha, mha, inputs)
    got = _gradients(compiled, mha, inputs)
    assert len(got) == len(want) == 7  # query, key, value, four parameters
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    # three unrelated tensors: the same graph (the shared storage was only read)
    others = [torch.randn(2, 5, 16).requires_grad_() for _ in range(3)]
    for g, w in zip(_gradients(compiled, mha, others), _gradients(mha, mha, others)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def _write_b_read_a(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    b.add_(1)
    return a * 2


def test_a_written_view_argument_then_unrelated_tensors_compiles_again() -> None:
    """``f(x, x[:2])`` writes ``x`` through ``b``; ``f(y, z)`` with unrelated tensors
    fails the storage guard and compiles a second graph (it used to reach the compiled
    program's aliasing check and raise)."""
    compiled = ef.compile(_write_b_read_a)
    x, x_eager = torch.zeros(4), torch.zeros(4)
    torch.testing.assert_close(compiled(x, x[:2]), _write_b_read_a(x_eager, x_eager[:2]))
    torch.testing.assert_close(x, x_eager)
    y, z = torch.zeros(4), torch.zeros(2)
    torch.testing.assert_close(compiled(y, z), torch.zeros(4))
    torch.testing.assert_close(z, torch.ones(2))
    torch.testing.assert_close(y, torch.zeros(4))
    assert compiled.stats.compiles == 2
    x = torch.zeros(4)
    compiled(x, x[:2])  # the first graph again
    assert compiled.stats.compiles == 2


def test_a_written_argument_then_one_sharing_its_memory_compiles_again() -> None:
    """The other order: ``f(y, z)`` with unrelated tensors first, then ``f(x, x[:2])``
    (the written ``b`` now shares ``a``'s memory). Its guards hold, the program refuses
    the sharing before running, and the call compiles a second entry whose guards hold
    the sharing; later calls of either kind find their entry."""
    compiled = ef.compile(_write_b_read_a)
    y, z = torch.zeros(4), torch.zeros(2)
    torch.testing.assert_close(compiled(y, z), torch.zeros(4))
    for _ in range(2):
        x = torch.zeros(4)
        torch.testing.assert_close(compiled(x, x[:2]), torch.tensor([2.0, 2.0, 0.0, 0.0]))
        torch.testing.assert_close(x, torch.tensor([1.0, 1.0, 0.0, 0.0]))
        y, z = torch.zeros(4), torch.zeros(2)
        torch.testing.assert_close(compiled(y, z), torch.zeros(4))
        torch.testing.assert_close(z, torch.ones(2))
    assert (compiled.stats.compiles, compiled.stats.recompiles) == (2, 1)
    assert compiled.stats.eager_fallback_calls == 0


def test_dynamo_graphs_compile_again_for_inputs_that_share_memory_otherwise() -> None:
    """Dynamo does not guard on storage sharing between distinct tensors: the backend's
    program meets both orders (captured shared then called apart, captured apart then
    called shared with a write) and compiles the graph again for them."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(_write_b_read_a, backend="ember")
    x = torch.zeros(4)
    torch.testing.assert_close(compiled(x, x[:2]), torch.tensor([2.0, 2.0, 0.0, 0.0]))
    y, z = torch.zeros(4), torch.zeros(2)
    torch.testing.assert_close(compiled(y, z), torch.zeros(4))
    torch.testing.assert_close(z, torch.ones(2))
    x = torch.zeros(4)
    torch.testing.assert_close(compiled(x, x[:2]), torch.tensor([2.0, 2.0, 0.0, 0.0]))
    torch._dynamo.reset()
    compiled = torch.compile(_write_b_read_a, backend="ember")
    y, z = torch.zeros(4), torch.zeros(2)
    compiled(y, z)
    x = torch.zeros(4)
    torch.testing.assert_close(compiled(x, x[:2]), torch.tensor([2.0, 2.0, 0.0, 0.0]))
    torch.testing.assert_close(x, torch.tensor([1.0, 1.0, 0.0, 0.0]))
    torch._dynamo.reset()


def test_dynamic_shapes_take_an_argument_that_views_another() -> None:
    """``dynamic=True`` and ``f(x, x[:2])``: the view's dims stay static (the graph binds
    it as a view of ``x``, by static sizes), not a recording error; over three sizes and
    unrelated arguments the values and the writes match eager. A write through the view
    of a symbolic ``x`` cannot be expressed: that graph runs eagerly, with a warning."""
    from ember.runtime.stages import EagerGraphWarning

    def read(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * 2 + b.sum()

    for fn in (read, _write_b_read_a):
        compiled = ef.compile(fn, dynamic=True)
        for n in (6, 8, 10):
            x, x_eager = torch.zeros(n), torch.zeros(n)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", EagerGraphWarning)
                torch.testing.assert_close(compiled(x, x[:2]), fn(x_eager, x_eager[:2]))
                torch.testing.assert_close(x, x_eager)
                y, z, z_eager = torch.randn(n), torch.zeros(2), torch.zeros(2)
                torch.testing.assert_close(compiled(y, z), fn(y.clone(), z_eager))
                torch.testing.assert_close(z, z_eager)
