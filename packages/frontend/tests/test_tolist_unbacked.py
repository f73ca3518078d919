"""``Tensor.tolist()`` of an integer tensor in a strict capture: one unbacked int per
item (``aten::unbind`` and an ``aten::_local_scalar_dense`` node each, as ``.item()``),
so Mixture-of-Experts code (``x.split(counts.tolist())``, HF JetMoE) is one graph that
serves every routing. The checks torch's fake tensors asked for (sizes in range, the
split sizes summing to the dimension) run when the symbols are bound: a bad value raises
``ShapeError`` instead of reading out of bounds. A float or bool tensor's ``tolist()``
still breaks and says why."""

from __future__ import annotations

from typing import Any

import ember.frontend as ef
import pytest
import torch
from ember.runtime.config import patch
from ember.runtime.ir import print_program
from ember.runtime.ir.symbolic import ShapeError
from torch import nn

BACKENDS = ["eager", "aot_eager", "inductor"]


def grouped_experts(x: torch.Tensor, counts: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    sizes = counts.tolist()  # [u0, u1, u2] while captured
    parts = torch.split(x, sizes, dim=0)
    outs = [torch.tanh(p @ w[i]) for i, p in enumerate(parts)]
    return torch.cat(outs, dim=0)


# sizes of 0 give empty chunks, first, inside and last
ROUTINGS = ([3, 0, 7], [5, 5, 0], [0, 10, 0], [1, 2, 7])


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_by_tolist_sizes_is_one_graph_for_every_routing(backend: str) -> None:
    f = ef.compile(grouped_experts, backend=backend)
    w = torch.randn(3, 4, 5)
    for sizes in ROUTINGS:
        x, counts = torch.randn(10, 4), torch.tensor(sizes)
        torch.testing.assert_close(f(x, counts, w), grouped_experts(x, counts, w),
                                   msg=f"sizes={sizes}")
    assert (f.stats.compiles, f.stats.graph_breaks) == (1, 0), f.stats
    x = torch.randn(10, 4)
    with pytest.raises(ShapeError, match=r"guard 'u0\+u1\+u2 == 10' fails for u0=3"):
        f(x, torch.tensor([3, 3, 3]), w)  # eager: split_with_sizes' sum check
    with pytest.raises(ShapeError, match=r"size -2 is outside the range \[0, 10\] of "
                                         r"symbol u0"):
        f(x, torch.tensor([-2, 6, 6]), w)
    with pytest.raises(ShapeError, match=r"size 11 is outside the range \[0, 10\]"):
        f(x, torch.tensor([11, -1, 0]), w)


def test_the_graph_holds_one_unbacked_int_per_item() -> None:
    f = ef.compile(grouped_experts, backend="eager")
    f(torch.randn(10, 4), torch.tensor([3, 0, 7]), torch.randn(3, 4, 5))
    text = print_program(f.graphs[0])
    lines = [line.split("  #")[0].strip() for line in text.splitlines()]
    assert "symbols u0 in [0, 10], u1 in [0, 10], u2 in [0, 10]" in lines, text
    assert "guard u0+u1+u2 == 10" in lines, text
    assert any(line.startswith("%unbind: (i64[]{} cpu, i64[]{} cpu offset=1, i64[]{} cpu "
                               "offset=2) = aten::unbind.int(%counts)") for line in lines), text
    for i, name in enumerate(["_local_scalar_dense", "_local_scalar_dense_1",
                              "_local_scalar_dense_2"]):
        assert (f"%{name}: int(u{i}) = aten::_local_scalar_dense.default(%unbind.{i})"
                in lines), text
    assert any(line.startswith("%split_with_sizes: (f32[u0, 4]{4,1} cpu, f32[u1, 4]")
               and line.endswith("aten::split_with_sizes.default(%x, [sym(u0), sym(u1), "
                                 "sym(u2)])") for line in lines), text
    assert any(line.startswith("%cat: f32[u0+u1+u2, 5]") for line in lines), text


def grouped_loss(x: torch.Tensor, counts: torch.Tensor, order: torch.Tensor,
                 w: torch.Tensor) -> torch.Tensor:
    sizes = counts.tolist()
    parts = torch.split(x.index_select(0, order), sizes, dim=0)
    y = torch.cat([torch.tanh(p @ w[i]) for i, p in enumerate(parts)])
    out = torch.zeros(x.size(0), y.size(1)).index_add(0, order, y)
    first = order[: sizes[0]]  # a slice of data-dependent length
    return out.pow(2).sum() + x.index_select(0, first).sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_training_through_tolist_sizes_matches_eager(backend: str) -> None:
    f = ef.compile(grouped_loss, backend=backend)
    for n, sizes in ((10, [3, 0, 7]), (10, [0, 10, 0]), (10, [4, 4, 2]), (13, [6, 7, 0]),
                     (7, [0, 2, 5])):
        x, w = torch.randn(n, 4, requires_grad=True), torch.randn(3, 4, 5, requires_grad=True)
        order, counts = torch.randperm(n), torch.tensor(sizes)
        xr, wr = (t.detach().clone().requires_grad_(True) for t in (x, w))
        f(x, counts, order, w).backward()
        grouped_loss(xr, counts, order, wr).backward()  # type: ignore[no-untyped-call]
        torch.testing.assert_close(x.grad, xr.grad, msg=f"sizes={sizes}")
        torch.testing.assert_close(w.grad, wr.grad, msg=f"sizes={sizes}")
    # the static capture of n=10, then (automatic dynamic) one of a symbolic n
    assert (f.stats.compiles, f.stats.graph_breaks) == (2, 0), f.stats


def zero_d_and_nested(x: torch.Tensor, n: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    k = n.tolist()  # a 0-d tensor's tolist() is one int, like item()
    pairs = rows.tolist()  # [[u1, u2], [u3, u4]]
    return torch.zeros(k) + torch.cat([x[:a] * b for a, b in pairs]).sum()


def test_zero_d_and_nested_tolist() -> None:
    f = ef.compile(zero_d_and_nested, backend="aot_eager")
    for k, rows in ((4, [[1, 2], [3, 4]]), (0, [[0, 5], [6, 1]])):
        args = (torch.randn(8, 3), torch.tensor(k), torch.tensor(rows))
        torch.testing.assert_close(f(*args), zero_d_and_nested(*args))
    assert (f.stats.compiles, f.stats.graph_breaks) == (1, 0), f.stats


def float_values(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    factors = scale.tolist()
    out: torch.Tensor = x * factors[0]
    return out


def sizes_then_print(x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    parts = torch.split(x, counts.tolist())
    print("", end="")  # a break: u0 would be live across it
    return parts[0] * 2


@pytest.mark.parametrize("fn, args, reason", [
    (float_values, (torch.randn(4), torch.tensor([2.0])),
     "Tensor.tolist() needs the tensor's data (a torch.float32 tensor: only an integer "
     "tensor's items can be unbacked symbolic ints)"),
    (sizes_then_print, (torch.randn(10, 2), torch.tensor([3, 7])),
     "Tensor.tolist() needs the tensor's data (its value is a data-dependent size the "
     "code after a graph break would need)"),
])
def test_tolist_that_cannot_be_captured_breaks_with_its_reason(
        fn: Any, args: tuple[torch.Tensor, ...], reason: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    f = ef.compile(fn, backend="eager")
    with patch(logs=frozenset({"graph_breaks"})):
        torch.testing.assert_close(f(*args), fn(*args))
    err = capsys.readouterr().err
    assert reason in err, err
    line = fn.__code__.co_firstlineno + 1
    assert f"test_tolist_unbacked.py:{line} in {fn.__name__}" in err, err  # the tolist()
    assert f.stats.eager_fallback_calls == 0, f.stats


def test_tolist_of_a_data_dependent_length_breaks() -> None:
    def positives(x: torch.Tensor) -> list[int]:
        return torch.nonzero(x > 0).flatten().tolist()

    f = ef.compile(positives, backend="eager", dynamic=True)
    with patch(logs=frozenset({"graph_breaks"})):
        x = torch.tensor([1.0, -1.0, 2.0])
        assert f(x) == [0, 2]
    assert f.stats.graph_breaks == 1, f.stats


def _tiny_jetmoe(layers: int) -> nn.Module:
    """HF JetMoE: each router's ``expert_size.tolist()`` splits the grouped tokens."""
    transformers = pytest.importorskip("transformers")
    config = transformers.JetMoeConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, kv_channels=8, num_local_experts=4,
        num_experts_per_tok=2, use_cache=False, attn_implementation="eager")
    for name in ("attention_dropout", "hidden_dropout", "dropout"):
        if hasattr(config, name):
            setattr(config, name, 0.0)
    torch.manual_seed(0)
    model: nn.Module = transformers.JetMoeForCausalLM(config)
    return model


def test_tiny_jetmoe_inference_through_the_inductor_is_one_graph() -> None:
    # (was 18 breaks and 39 compiles over 3 calls: a break at each router's tolist())
    model = _tiny_jetmoe(2).eval()
    f = ef.compile(model, backend="inductor")
    with torch.no_grad():
        for seed in range(3):
            ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(seed))
            torch.testing.assert_close(f(input_ids=ids).logits, model(input_ids=ids).logits)
    assert (f.stats.compiles, f.stats.graph_breaks) == (1, 0), f.stats


def test_tiny_jetmoe_training_matches_eager() -> None:
    # (through the inductor too, but slower than this file's budget: 7 s for one layer)
    model = _tiny_jetmoe(2)
    f = ef.compile(model, backend="aot_eager")
    for seed in range(2):
        ids = torch.randint(0, 128, (2, 8), generator=torch.Generator().manual_seed(seed))
        model.zero_grad()
        out = f(input_ids=ids, labels=ids)
        out.loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad()
        ref = model(input_ids=ids, labels=ids)
        ref.loss.backward()
        torch.testing.assert_close(out.loss, ref.loss)
        for name, p in model.named_parameters():
            if p.grad is not None:
                torch.testing.assert_close(grads[name], p.grad, msg=name)
        assert len(grads) == sum(p.grad is not None for p in model.parameters())
    assert (f.stats.compiles, f.stats.graph_breaks) == (1, 0), f.stats
