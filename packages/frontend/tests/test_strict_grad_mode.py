"""Grad-mode changes inside strict capture: one graph, eager's values, gradients and grad
mode after the call (bytecode/grad_mode.py)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.ir import print_program
from torch import nn

BACKENDS = ["eager", "aot_eager"]


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _run(fn: Callable[..., Any], model: nn.Module, x: torch.Tensor,
         grad: bool) -> tuple[list[torch.Tensor], dict[str, torch.Tensor | None], bool]:
    """Call ``fn(model, x)`` under grad mode ``grad``; backward through the outputs that
    require grad. Returns the outputs, each parameter's grad and the grad mode the call
    left."""
    with torch.set_grad_enabled(grad):
        outs = _tensors(fn(model, x))
        mode_after = torch.is_grad_enabled()
    differentiable = [o for o in outs if o.requires_grad]
    if differentiable:
        torch.autograd.backward([o.sum() for o in differentiable])
    grads = {name: p.grad for name, p in model.named_parameters()}
    return outs, grads, mode_after


def check_against_eager(fn: Callable[..., Any], model: nn.Module, x: torch.Tensor,
                        backend: str, graphs: int = 1, breaks: int = 0,
                        grad: bool = True) -> Any:
    """Compile ``fn`` (strict) and compare two calls with eager: values, which outputs
    require grad, parameters and buffers after the call, parameter gradients (None where
    eager's is None), the grad mode after the call, and the graph and break counts."""
    compiled = ef.compile(fn, backend=backend)
    for _ in range(2):
        eager_model, ember_model = copy.deepcopy(model), copy.deepcopy(model)
        expected, expected_grads, expected_mode = _run(fn, eager_model, x, grad)
        got, got_grads, got_mode = _run(compiled, ember_model, x, grad)
        assert got_mode == expected_mode
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e)
            assert g.requires_grad == e.requires_grad
        for name, e_grad in expected_grads.items():
            g_grad = got_grads[name]
            assert (g_grad is None) == (e_grad is None), name
            if e_grad is not None:
                torch.testing.assert_close(g_grad, e_grad)
        for (name, e_state), (_, g_state) in zip(eager_model.state_dict().items(),
                                                 ember_model.state_dict().items()):
            torch.testing.assert_close(g_state, e_state, msg=name)
    assert torch.is_grad_enabled()
    assert (compiled.stats.graphs, compiled.stats.graph_breaks) == (graphs, breaks), \
        [b.describe() for b in compiled.breaks]
    return compiled


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.teacher = nn.Linear(4, 4)
        self.student = nn.Linear(4, 4)


X = torch.randn(3, 4)


def distill(m: Pair, x: torch.Tensor) -> Any:
    with torch.no_grad():
        target = m.teacher(x).relu()
    return ((m.student(x) - target) ** 2).mean(), target


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_no_grad_block_is_one_graph(backend: str) -> None:
    compiled = check_against_eager(distill, Pair(), X, backend)
    # the teacher's parameters reach the region through detach: no gradient in any backend
    text = print_program(compiled.graphs[0])
    assert "aten::detach.default(%m_teacher_weight)" in text
    assert "aten::detach.default(%m_teacher_bias)" in text
    assert "aten::detach.default(%m_student" not in text


def test_no_grad_call_with_no_grad_block_adds_no_detach() -> None:
    compiled = ef.compile(distill, backend="eager")
    with torch.no_grad():
        compiled(Pair(), X)
    assert "detach" not in print_program(compiled.graphs[0])


def enable_inside_no_grad(m: Pair, x: torch.Tensor) -> Any:
    with torch.no_grad():
        t = m.teacher(x)
        with torch.enable_grad():
            u = m.student(x) * t
        v = u * 2
    return t, u, v, u.sum() + t.sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_enable_grad_inside_no_grad(backend: str) -> None:
    check_against_eager(enable_inside_no_grad, Pair(), X, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_enable_grad_block_in_a_call_made_under_no_grad(backend: str) -> None:
    # the graph starts under no_grad, and the block makes values that require grad
    check_against_eager(enable_inside_no_grad, Pair(), X, backend, grad=False)


def set_grad_in_the_middle(m: Pair, x: torch.Tensor) -> Any:
    y = m.student(x)
    torch.set_grad_enabled(False)
    z = m.teacher(y)
    torch.set_grad_enabled(True)
    return y + z, z


def set_grad_off_and_left_off(m: Pair, x: torch.Tensor) -> Any:
    y = m.student(x)
    torch.set_grad_enabled(False)
    return y, m.teacher(y)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [set_grad_in_the_middle, set_grad_off_and_left_off])
def test_set_grad_enabled_without_with(fn: Callable[..., Any], backend: str) -> None:
    try:
        check_against_eager(fn, Pair(), X, backend)
    finally:
        torch.set_grad_enabled(True)


# ---- the grad mode after the call -----------------------------------------------------


def nested(m: Pair, x: torch.Tensor) -> Any:
    with torch.no_grad():
        a = m.teacher(x)
        with torch.enable_grad():
            b = m.student(a)
            with torch.no_grad():
                c = b * 2
            d = c + b
        e = d * a
    return a, b, c, d, e, e + m.student(x)


def early_return(m: Pair, x: torch.Tensor) -> Any:
    with torch.no_grad():
        t = m.teacher(x)
        if x.shape[0] > 1:
            return t, m.student(t)
        t = t + 1
    return t


def _raises_inside_no_grad(m: Pair, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        t = m.teacher(x)
        raise ValueError(t.shape[0])


def exception_out_of_block(m: Pair, x: torch.Tensor) -> Any:
    try:
        _raises_inside_no_grad(m, x)
    except ValueError:
        pass
    return m.student(x)


def set_grad_with_form(m: Pair, x: torch.Tensor) -> Any:
    with torch.set_grad_enabled(False):
        t = m.teacher(x)
    return t, m.student(t)


def inference_block(m: Pair, x: torch.Tensor) -> Any:
    with torch.inference_mode():
        t = m.teacher(x)
    return t, m.student(x) * 2


@torch.no_grad()
def _decorated(m: Pair, x: torch.Tensor) -> torch.Tensor:
    t: torch.Tensor = m.teacher(x)
    return t.cos()


def decorated_helper(m: Pair, x: torch.Tensor) -> Any:
    t = _decorated(m, x)
    return t, m.student(x) * t


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fn", [nested, early_return, exception_out_of_block,
                                set_grad_with_form, inference_block, decorated_helper])
def test_grad_mode_is_restored_after_the_graph(fn: Callable[..., Any], backend: str) -> None:
    check_against_eager(fn, Pair(), X, backend)
    assert not torch.is_inference_mode_enabled()


def test_inference_mode_false_inside_inference_mode_runs_eagerly() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode(False):
            y = x * 2
        return y + 1

    compiled = ef.compile(fn, backend="eager")
    with torch.inference_mode():
        x = torch.randn(3)
        torch.testing.assert_close(compiled(x), fn(x))
        assert torch.is_inference_mode_enabled()
    assert not torch.is_inference_mode_enabled()
    assert "inside inference mode" in compiled.breaks[0].reason


# ---- a Llama-like block with a rotary helper under @torch.no_grad() -----------------


class Rotary(nn.Module):
    inv_freq: torch.Tensor

    def __init__(self, dim: int) -> None:
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class TinyLlama(nn.Module):
    def __init__(self, vocab: int = 32, dim: int = 16, layers: int = 2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(vocab, dim)
        self.rotary = Rotary(dim)
        self.qkv = nn.ModuleList(nn.Linear(dim, 3 * dim) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        cos, sin = self.rotary(h, torch.arange(ids.shape[1]))
        for qkv in self.qkv:
            q, k, v = qkv(h).chunk(3, dim=-1)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            h = h + torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        logits = self.head(self.norm(h))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())


@pytest.mark.parametrize("backend", [*BACKENDS, "inductor"])
def test_tiny_llama_with_no_grad_rotary_trains_in_one_graph(backend: str) -> None:
    ids = torch.randint(0, 32, (2, 6), generator=torch.Generator().manual_seed(1))
    eager_model, ember_model = TinyLlama(), TinyLlama()
    compiled = ef.compile(ember_model, backend=backend)
    for model, run in ((eager_model, eager_model), (ember_model, compiled)):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            loss = run(ids)
            loss.backward()
            opt.step()
    for (name, e), (_, g) in zip(eager_model.named_parameters(),
                                 ember_model.named_parameters()):
        torch.testing.assert_close(g, e, msg=name)
        torch.testing.assert_close(g.grad, e.grad, msg=name)
    stats = compiled.stats
    assert (stats.graphs, stats.graph_breaks, stats.compiles) == (1, 0, 1)


# ---- where a break stays --------------------------------------------------------------


class Updated(nn.Module):
    steps: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros(()))


def update_parameter(m: Updated, x: torch.Tensor) -> Any:
    y = m.lin(x).sum()
    with torch.no_grad():
        m.lin.weight.mul_(0.5)
        m.steps.add_(1)
    return y + m.lin(x).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_write_to_a_parameter_under_no_grad_breaks(backend: str) -> None:
    compiled = check_against_eager(update_parameter, Updated(), X, backend,
                                   graphs=2, breaks=1)
    reason = compiled.breaks[0].reason
    assert "in-place aten::mul_.Tensor" in reason and "requires grad" in reason
    assert compiled.breaks[0].location.text.strip() == "m.lin.weight.mul_(0.5)"


@pytest.mark.parametrize("backend", BACKENDS)
def test_parameter_update_in_a_call_under_no_grad_stays_in_the_graph(backend: str) -> None:
    # nothing is differentiated: aot writes the parameter back, as eager's update
    check_against_eager(update_parameter, Updated(), X, backend, grad=False)


def update_then_enable_grad(m: Updated, x: torch.Tensor) -> Any:
    m.lin.weight.mul_(0.5)
    with torch.enable_grad():
        y = m.lin(x)
    return y, m.steps + 1


def test_grad_mode_turned_on_after_a_parameter_update_breaks() -> None:
    compiled = check_against_eager(update_then_enable_grad, Updated(), X, "aot_eager",
                                   graphs=2, breaks=1, grad=False)
    assert "grad mode turned on after an in-place write" in compiled.breaks[0].reason


def init_in_forward(m: Updated, x: torch.Tensor) -> Any:
    y = m.lin(x)
    nn.init.zeros_(m.lin.bias)  # torch's own `with torch.no_grad(): tensor.zero_()`
    return y, m.lin(x)


def test_in_place_write_inside_torch_code_breaks() -> None:
    compiled = check_against_eager(init_in_forward, Updated(), X, "eager",
                                   graphs=2, breaks=1)
    assert "in-place aten::zero_.default" in compiled.breaks[0].reason


def update_buffer(m: Updated, x: torch.Tensor) -> Any:
    with torch.no_grad():
        m.steps.add_(1)
        scale = m.lin.weight.abs().mean()
    return m.lin(x) * scale, m.steps * 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_write_to_a_buffer_under_no_grad_stays_in_the_graph(backend: str) -> None:
    model = Updated()
    check_against_eager(update_buffer, model, X, backend)
