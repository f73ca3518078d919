"""Autocast's cache of cast weights around compiled calls (ember/frontend/autocast_cache.py,
``RealCastsUncached``): a capture never leaves a fake cast in the cache under a real
tensor (eager code later in the same block would get it), never reads a real cast that
eager code cached as a constant of its graph, and a compiled call casts the weights it
reads at every call (as torch.compile's aot_eager and inductor backends do; eager
reuses the block's first cast)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.ir import print_program
from torch import nn

BF16 = torch.bfloat16


def autocast_cpu() -> Any:
    return torch.autocast("cpu", dtype=BF16)


class Apply(torch.autograd.Function):
    """A custom Function calling a module in its forward: under ``no_grad`` the strict
    capture runs it for real on the fakes, so the module's real weight reaches F.linear
    under autocast."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
        out: torch.Tensor = layer(x)
        return out

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g, None


class ThroughFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = Apply.apply(x, self.lin)
        return out


CLOSURE_W = torch.randn(8, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)


def closure_matmul(x: torch.Tensor) -> torch.Tensor:
    return x @ CLOSURE_W


CASES = ["strict-function", "trace-closure"]


def _model(case: str) -> tuple[Callable[..., torch.Tensor], torch.Tensor, dict[str, Any]]:
    """The function, the weight that reaches autocast as a real tensor, the options."""
    if case == "strict-function":
        m = ThroughFunction()
        return m, m.lin.weight, {}
    return closure_matmul, CLOSURE_W, {"capture": "trace"}


@pytest.mark.parametrize("case", CASES)
def test_compiled_before_eager_in_one_block(case: str) -> None:
    """The capture ran inside the caller's block: eager code after it in the same block
    used the fake cast the capture left in the cache ("Please convert all Tensors to
    FakeTensors first")."""
    fn, _, options = _model(case)
    compiled = ef.compile(fn, backend="eager", options=options or None)
    x = torch.randn(4, 8)
    with torch.no_grad(), autocast_cpu():
        out = compiled(x)
        expected = fn(x)
    assert out.dtype == expected.dtype == BF16
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("case", CASES)
def test_eager_cast_is_not_a_graph_constant(case: str) -> None:
    """An eager call before the capture in the same block cached a real cast of the
    weight, which the capture read as a constant: later calls (other blocks, the weight
    changed) kept the first call's weight."""
    fn, w, options = _model(case)
    compiled = ef.compile(fn, backend="eager", options=options or None)
    x = torch.randn(4, 8)
    before = w.detach().clone()
    try:
        with torch.no_grad(), autocast_cpu():
            fn(x)
            compiled(x)
        with torch.no_grad():
            w.mul_(2)
        with torch.no_grad(), autocast_cpu():
            out = compiled(x)
        with torch.no_grad(), autocast_cpu():
            expected = fn(x)
    finally:
        with torch.no_grad():
            w.copy_(before)
    torch.testing.assert_close(out, expected)
    assert compiled.stats.compiles == 1


def test_cache_flag_and_eager_casts_kept() -> None:
    """The capture turns the cache off only around the calls given a real weight: the
    flag is back on after the call, and eager's cast made before it in the block is still
    the one eager reuses after it."""
    m = ThroughFunction()
    compiled = ef.compile(m, backend="eager")
    x = torch.randn(4, 8)
    with torch.no_grad(), autocast_cpu():
        first = m(x)
        compiled(x)
        assert torch.is_autocast_cache_enabled()
        m.lin.weight.mul_(2)  # eager keeps its cached cast until the block exits
        again = m(x)
    with torch.no_grad():
        m.lin.weight.div_(2)
    assert torch.equal(first, again)


def test_ordinary_calls_run_without_the_mode() -> None:
    """The torch-function mode is pushed only around calls that may reach a real
    weight: torch code sees a mode (``has_torch_function``), and MultiheadAttention's
    fast path, taken eagerly under CPU autocast, would be lost in the graph."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 2, batch_first=True).eval()
    x = torch.randn(2, 5, 16)

    def attend(x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = mha(x, x, x, need_weights=False)[0]
        return out

    compiled = ef.compile(attend, backend="eager")
    with torch.no_grad(), autocast_cpu():
        expected = attend(x)
        out = compiled(x)
    torch.testing.assert_close(out, expected)
    assert "aten::_native_multi_head_attention" in print_program(compiled.graphs[0])


def test_reformer_compiled_before_eager() -> None:
    """HF Reformer (its reversible layers are a custom autograd.Function, captured
    under no_grad) compiled inside the caller's autocast block, then run eagerly."""
    transformers = pytest.importorskip("transformers")
    config = transformers.ReformerConfig(
        vocab_size=64, hidden_size=32, num_attention_heads=2, attention_head_size=16,
        attn_layers=["local", "lsh"], feed_forward_size=64, axial_pos_shape=[4, 4],
        axial_pos_embds_dim=[16, 16], max_position_embeddings=16, is_decoder=True,
        local_attn_chunk_length=4, lsh_attn_chunk_length=4, num_buckets=2, num_hashes=1,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        lsh_attention_probs_dropout_prob=0.0, local_attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.ReformerModelWithLMHead(config).eval()
    ids = torch.randint(0, 64, (1, 16))
    compiled = ef.compile(model, backend="eager")
    with torch.no_grad(), autocast_cpu():
        torch.manual_seed(1)  # LSH draws random rotations
        out = compiled(ids).logits
        torch.manual_seed(1)
        expected = model(ids).logits
    assert out.dtype == expected.dtype == BF16
    torch.testing.assert_close(out, expected)


def _write_between_calls(fn: Callable[[torch.Tensor], torch.Tensor], lin: nn.Linear,
                         x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``fn(x)``, ``lin.weight *= 2``, ``fn(x)`` in one autocast block."""
    with torch.no_grad(), autocast_cpu():
        first = fn(x)
        lin.weight.mul_(2)
        second = fn(x)
    return first, second


def test_compiled_calls_cast_again_after_a_write() -> None:
    """A decision, not eager's behaviour: eager reuses the block's first cast of a weight
    after the weight is written in place (autocast's cache lives until the block exits);
    a compiled call casts the weights it reads at every call, as torch.compile's
    aot_eager and inductor backends do (only torch.compile(backend="eager") reuses the
    cast: its graph runs under the live autocast state). README, autocast blocks."""
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    x = torch.randn(4, 8)
    w0 = lin.weight.detach().clone()
    eager_first, eager_second = _write_between_calls(lin, lin, x)
    assert torch.equal(eager_first, eager_second)  # eager: the stale cached cast
    with torch.no_grad():
        lin.weight.copy_(w0)
    compiled = ef.compile(lin, backend="eager")
    first, second = _write_between_calls(compiled, lin, x)
    with torch.no_grad(), autocast_cpu():
        fresh = lin(x)  # a new block: cast from the written weight
    torch.testing.assert_close(first, eager_first)
    torch.testing.assert_close(second, fresh)
    assert not torch.equal(first, second)


def test_one_graph_reuses_its_cast_after_a_write() -> None:
    """Inside one graph a weight cast twice reuses the capture's first cast, a write
    between the two uses included, as eager does."""
    torch.manual_seed(0)
    lin = nn.Linear(8, 8)
    x = torch.randn(4, 8)

    def twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = lin(x)
        lin.weight.mul_(2)
        return a, lin(x)

    w0 = lin.weight.detach().clone()
    results = []
    for fn in (twice, ef.compile(twice, backend="eager")):
        with torch.no_grad(), autocast_cpu():
            results.append(fn(x))
        with torch.no_grad():
            lin.weight.copy_(w0)
    (expected_a, expected_b), (a, b) = results
    assert torch.equal(expected_a, expected_b)
    torch.testing.assert_close(a, expected_a)
    torch.testing.assert_close(b, expected_b)
