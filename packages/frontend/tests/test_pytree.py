"""Pytree arguments and results: flattened into graph inputs/outputs and rebuilt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import ember.frontend as ef
import torch


@dataclass
class Batch:
    x: torch.Tensor
    scale: float


@dataclass
class Result:
    out: torch.Tensor
    parts: list[torch.Tensor]
    note: str


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


def test_nested_containers_in_and_out() -> None:
    def f(inputs: dict, pair: Pair):  # type: ignore[no-untyped-def, type-arg]
        x, ys = inputs["x"], inputs["ys"]
        return {"sum": (x + ys[0], [ys[1] * pair.a]), "pair": Pair(pair.b, x), "n": 3}

    compiled = ef.compile(f, backend="eager")
    inputs = {"x": torch.randn(3), "ys": [torch.randn(3), torch.randn(3)]}
    pair = Pair(torch.randn(3), torch.randn(3))
    out = compiled(inputs, pair)
    ref = f(inputs, pair)
    assert set(out) == {"sum", "pair", "n"} and out["n"] == 3
    assert isinstance(out["pair"], Pair) and isinstance(out["sum"][1], list)
    assert torch.equal(out["sum"][0], ref["sum"][0])
    assert torch.equal(out["sum"][1][0], ref["sum"][1][0])
    assert torch.equal(out["pair"].a, pair.b) and torch.equal(out["pair"].b, inputs["x"])


def test_placeholder_names_follow_the_arguments() -> None:
    def f(inputs, pair, *rest, scale=1.0):  # type: ignore[no-untyped-def]
        return inputs["x"] * scale + pair.a + rest[0]

    p = ef.capture(f, {"x": torch.randn(2)}, Pair(torch.randn(2), torch.randn(2)),
                   torch.randn(2), scale=2.0)
    names = [n.name for n in p.forward.placeholders]
    assert names == ["inputs_x", "pair_a", "pair_b", "rest_0"]


def test_dataclasses_in_and_out() -> None:
    def f(batch: Batch) -> Result:
        y = batch.x * batch.scale
        return Result(y.relu(), [y, batch.x], "done")

    compiled = ef.compile(f, backend="eager")
    batch = Batch(torch.randn(4), 0.5)
    out = compiled(batch)
    assert isinstance(out, Result) and out.note == "done"
    assert torch.equal(out.out, (batch.x * 0.5).relu())
    assert torch.equal(out.parts[1], batch.x)
    compiled(Batch(torch.randn(4), 0.5))
    assert compiled.stats.cache_hits == 1
    compiled(Batch(torch.randn(4), 2.0))  # a field's value is guarded
    assert compiled.stats.compiles == 2


def test_hf_model_output_is_rebuilt() -> None:
    from transformers.modeling_outputs import BaseModelOutput

    def f(x: torch.Tensor) -> BaseModelOutput:
        return BaseModelOutput(last_hidden_state=x.tanh(), hidden_states=(x, x * 2))

    compiled = ef.compile(f, backend="eager")
    x = torch.randn(2, 3)
    out = compiled(x)
    assert isinstance(out, BaseModelOutput)
    assert torch.equal(out.last_hidden_state, x.tanh())
    assert torch.equal(out.hidden_states[1], x * 2)
    assert torch.equal(out[0], x.tanh())
