"""Free layouts (``ember.frontend.free_layouts``): an input at a resume point that moved
in memory between captures (a row of a ``nonzero`` result iterated by a loop, the second
result of ``torch.where``) is captured again with its storage offset and size-1 strides
free, so a mixture-of-experts loop settles after a few compiles per resume point where it
used to compile one entry per expert and call until the recompile limit."""

from __future__ import annotations

import warnings
from typing import Any

import ember.frontend as ef
import pytest
import torch
import torch.nn.functional as F
from ember.frontend.compiled import RecompileLimitWarning
from ember.runtime.config import patch
from strict_helpers import strict
from torch import nn

H, E, K = 16, 4, 2


class Expert(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w1, self.w2 = nn.Linear(H, 32), nn.Linear(32, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.gelu(self.w1(x)))


class MoE(nn.Module):
    """Top-2 routing over 4 experts, the loop of HF SwitchTransformers/Mixtral (eager
    experts): each expert that got tokens runs on them, after a graph break."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.ModuleList(Expert() for _ in range(E))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        b, t, _ = hidden.shape
        hidden = hidden.view(-1, H)
        probs = F.softmax(self.gate(hidden), dim=1, dtype=torch.float)
        weights, router_idx = torch.topk(probs, K, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(hidden.dtype)
        final = torch.zeros_like(hidden)
        expert_mask = F.one_hot(router_idx, num_classes=E).permute(2, 1, 0)
        expert_hit = torch.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
        for expert_idx in expert_hit:
            idx, top_x = torch.where(expert_mask[expert_idx].squeeze(0))
            current = hidden[None, top_x].reshape(-1, H)
            out = self.experts[expert_idx](current) * weights[top_x, idx, None]
            final.index_add_(0, top_x, out.to(hidden.dtype))
        return final.view(b, t, H)


def _entries(compiled: Any) -> dict[int, int]:
    """Resume point -> number of cache entries (compiles) there."""
    inner = getattr(compiled, "_compiled", compiled)  # (a module's compiled forward)
    return {ip: len(entries) for ip, entries in inner.segments.items()}


@pytest.mark.parametrize("train", [False, True], ids=["infer", "train"])
def test_a_moe_block_settles_in_a_few_compiles_per_resume_point(train: bool) -> None:
    torch.manual_seed(0)
    model = MoE()
    compiled = ef.compile(model, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitWarning)
        for _ in range(10):
            x = torch.randn(2, 8, H, requires_grad=train)
            if not train:
                with torch.no_grad():
                    torch.testing.assert_close(compiled(x), model(x))
                continue
            model.zero_grad()
            model(x).square().sum().backward()
            want = [p.grad.clone() for p in model.parameters()], x.grad.clone()
            model.zero_grad()
            x.grad = None
            compiled(x).square().sum().backward()
            for got, ref in zip(model.parameters(), want[0]):
                torch.testing.assert_close(got.grad, ref)
            torch.testing.assert_close(x.grad, want[1])
    stats = compiled.stats
    assert stats.recompile_limit_fallbacks == 0 and stats.eager_fallback_calls == 0, stats
    # the loop body's resume point: static, then symbolic with free layouts (the loop
    # goes on), then the loop's exit; training: also the first expert of a later call
    # (the accumulator requires no grad yet). One graph per segment, no other break: the
    # accumulator (a detached view the runtime returned) writes in the graph
    assert max(_entries(compiled).values()) <= (4 if train else 3), _entries(compiled)
    assert stats.compiles <= (6 if train else 5), stats
    assert stats.graph_breaks == (5 if train else 4), stats


def rows_scaled(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for row in mask.nonzero():  # a graph break: one row (a view at offset i) per step
        print(end="")  # a break in the body: each step resumes with the next row live
        out = out + x[row] * 2
    return out


def test_a_row_of_a_nonzero_result_is_captured_with_a_free_layout(capsys: Any) -> None:
    f = ef.compile(rows_scaled, backend="aot_eager")
    torch.manual_seed(0)
    with patch(logs=frozenset({"dynamic"})):
        for n in (3, 4, 2, 5, 3, 4):
            x, mask = torch.randn(6, 3), torch.zeros(6, dtype=torch.bool)
            mask[torch.randperm(6)[:n]] = True
            torch.testing.assert_close(f(x, mask), rows_scaled(x, mask))
    err = capsys.readouterr().err
    assert "moved in memory (storage offset 0 -> 1" in err, err
    assert "recompiling with its layout free" in err, err
    assert f.stats.recompile_limit_fallbacks == 0, f.stats
    assert max(_entries(f).values()) <= 3, _entries(f)
    guards = f.guard_text()
    assert "stride() == (*,)" in guards and "its storage offset free" in guards, guards


def second_of_where(mask: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    rows, cols = torch.where(mask)  # cols starts where rows ends: offset == count
    print(end="")  # a break with both live
    return h[cols] * rows[:, None]


def test_the_second_result_of_where_moves_with_the_count() -> None:
    f = strict(second_of_where)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RecompileLimitWarning)
        for _ in range(12):
            mask, h = torch.rand(4, 6) > 0.5, torch.randn(6, 3)
            torch.testing.assert_close(f(mask, h), second_of_where(mask, h))
    assert f.stats.compiles <= 4, f.stats  # point 0, then static and free after the break


def reads_offset(mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(())
    for row in mask.nonzero():
        print(end="")
        out = out + row.storage_offset() + row.stride(0)  # the layout, read in Python
    return out


def test_code_that_reads_a_free_layout_gets_exact_layouts_again(capsys: Any) -> None:
    f = strict(reads_offset)
    with patch(logs=frozenset({"dynamic"})):
        for n in (3, 2, 4, 3):
            mask = torch.zeros(6, dtype=torch.bool)
            mask[:n] = True
            torch.testing.assert_close(f(mask), reads_offset(mask))
    err = capsys.readouterr().err
    assert "free layouts off for reads_offset" in err, err
    assert "storage_offset() on a tensor over the memory of an input whose layout is " \
           "free" in err, err


def strided(mask: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(2)
    for row in mask.nonzero():
        print(end="")
        out = out + torch.as_strided(row, (2,), (0,)).float()  # reads storage
    return out


def test_as_strided_of_a_free_input_gets_exact_layouts_again(capsys: Any) -> None:
    f = strict(strided)
    with patch(logs=frozenset({"dynamic"})), warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompileLimitWarning)  # exact: one per offset
        for n in (3, 2, 4, 3):
            mask = torch.zeros(6, dtype=torch.bool)
            mask[1:n + 1] = True
            torch.testing.assert_close(f(mask), strided(mask))
    assert "free layouts off for strided" in capsys.readouterr().err


def test_a_graph_that_addresses_storage_refuses_free_layouts() -> None:
    from ember.frontend.dynamic import DynamicPolicy
    from ember.frontend.free_layouts import FreeInputs, FreeLayoutsRefused
    from ember.runtime.ir import InputSpec
    from ember.runtime.tracing import GraphRecorder

    rec = GraphRecorder()
    x = rec.add_input(torch.randn(4), InputSpec("x"))
    with rec:
        y = torch.ops.aten.as_strided.default(x, (2,), (1,), 1)  # as a decomposition may
    program = rec.finish([y])
    policy = DynamicPolicy(None, layouts=True)
    free = FreeInputs([(torch.randn(4), x)])
    with pytest.raises(FreeLayoutsRefused, match="the graph calls aten::as_strided"):
        free.check(policy, "f", program)
    assert not policy.layouts


def overlapping(mask: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    row = None  # (a local before `rows`: the row is wrapped first at the resume point)
    out = torch.zeros(3)
    rows = mask.nonzero()
    for row in rows:
        print(end="")
        out = out + h[row].sum(0) + rows[0]  # `rows` shares the row's memory: read only
    return out


def overlapping_write(mask: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    row = None
    out = torch.zeros(3)
    rows = mask.nonzero()
    for row in rows:
        print(end="")
        rows.mul_(1)  # writes the memory the free row shares
        out = out + h[row].sum(0)
    return out


@pytest.mark.parametrize("fn", [overlapping, overlapping_write])
def test_inputs_that_share_memory_with_a_free_one(fn: Any, capsys: Any) -> None:
    f = strict(fn)
    torch.manual_seed(0)
    with patch(logs=frozenset({"dynamic"})), warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompileLimitWarning)  # exact: one per offset
        for n in (3, 2, 4, 3, 4):
            mask, h = torch.zeros(6, dtype=torch.bool), torch.randn(6, 3)
            mask[:n] = True
            torch.testing.assert_close(f(mask, h), fn(mask, h))
    err = capsys.readouterr().err
    if fn is overlapping:  # read only: two inputs, one free
        assert "free layouts off" not in err, err
        assert f.stats.recompile_limit_fallbacks == 0, f.stats
    else:  # the free row's fake would not see the write: exact layouts again
        assert f"free layouts off for {fn.__name__}" in err, err
        assert "share memory, one has a free layout, and the graph writes one" in err, err


class SlicedParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor, i: int) -> torch.Tensor:
        print(end="")  # a break
        return x + self.table[i]


def test_parameters_keep_their_exact_layout(capsys: Any) -> None:
    model = SlicedParameter()
    f = strict(model)
    with patch(logs=frozenset({"dynamic"})):
        for i in range(3):
            x = torch.randn(4)
            torch.testing.assert_close(f(x, i), model(x, i))
    assert "layout free" not in capsys.readouterr().err


def scaled_row(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


def test_rows_of_a_matrix_passed_in_turn_compile_twice(capsys: Any) -> None:
    f = ef.compile(scaled_row, backend="aot_eager")
    m = torch.randn(12, 5)
    with patch(logs=frozenset({"dynamic"})):
        for i in range(12):  # m[i]: offset 5*i, one entry per row up to the limit before
            torch.testing.assert_close(f(m[i]), scaled_row(m[i]))
        x = torch.randn(5)  # a tensor of its own: the same entry
        torch.testing.assert_close(f(x), scaled_row(x))
    assert f.stats.compiles == 2 and f.stats.recompile_limit_fallbacks == 0, f.stats
    assert "x moved in memory (storage offset 0 -> 5) in scaled_row" in capsys.readouterr().err


def test_a_free_layout_guard_checks_the_rest_and_survives_the_capture_cache() -> None:
    from ember.frontend.capture_cache_codec import decode_guard, encode_guard

    f = ef.compile(scaled_row, backend="aot_eager")
    m = torch.randn(6, 4, 3)
    f(m[0, 1])
    f(m[1, 2])  # offset 3 -> 18: free
    (guard,) = [g for g in f.segments[0][-1].guards.guards if g.kind == "symbolic_tensor"]
    assert guard.expected.offset is None
    assert decode_guard(encode_guard(guard), lambda s: None) == guard
    torch.testing.assert_close(f(m[2, 0]), scaled_row(m[2, 0]))
    assert f.stats.compiles == 2, f.stats
    for other in (m[3, :, 0], m[3, 1].double(), m[3, 1, :2]):  # strides, dtype, size
        torch.testing.assert_close(f(other), scaled_row(other))
    assert f.stats.compiles == 5, f.stats


def accumulate(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    acc = torch.zeros_like(h)  # the runtime returns it as a detached view of a base
    print(end="")  # a break with it live
    acc.add_(h * w)  # written with a value that requires grad: acc does from here on
    return acc * 2


def test_an_accumulator_written_with_gradients_after_a_break_stays_in_the_graph(
        capsys: Any) -> None:
    f = ef.compile(accumulate, backend="aot_eager")
    with patch(logs=frozenset({"graph_breaks"})):
        for _ in range(3):
            h, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
            f(h, w).sum().backward()
            got = h.grad, w.grad
            h.grad = w.grad = None
            accumulate(h, w).sum().backward()
            torch.testing.assert_close(got, (h.grad, w.grad))
    err = capsys.readouterr().err
    assert "could not run on fake tensors" not in err, err  # (as_strided of no base)
    assert f.stats.graph_breaks == 1 and f.stats.compiles == 2, f.stats
